// Process-wide state for selection algorithms that outlives balancer restarts.
#pragma once

#include <rpclb/detail/block_cursor.hpp>
#include <rpclb/selection_algorithm.hpp>
#include <rpclb/version.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

namespace detail {

struct BalancerCounts;

/// The calls in flight from this process on one node through one balancer (reference
/// §2.4, §2.5): one atomic on its own cache line, never below zero (§10.4).
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation.
struct alignas(64) InFlight {
    std::atomic<std::int64_t> calls{0};

    /// One more call in flight.
    void acquire() noexcept { calls.fetch_add(1, std::memory_order_relaxed); }

    /// One call fewer in flight; false (and no change) when the count was zero.
    bool release() noexcept {
        std::int64_t now = calls.load(std::memory_order_relaxed);
        while (now > 0)
            if (calls.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) return true;
        return false;
    }

    /// Calls in flight now.
    std::int64_t value() const noexcept { return calls.load(std::memory_order_relaxed); }
};

/// The counters of one member list of one balancer, index-aligned with the list. Built by
/// AlgorithmState::count_table (in librpclb, so that a MemberSnapshot holding one may
/// outlive the plugin that asked for it); immutable once built.
struct CountTable {
    const BalancerCounts* owner = nullptr;  ///< the balancer the counters belong to
    std::vector<std::string> nodes;         ///< the list, for release_node's look-up
    bool sorted = true;                     ///< `nodes` ascending (MemberSnapshot's contract)
    std::vector<std::shared_ptr<InFlight>> counts;  ///< counts[i] is nodes[i]'s
};

}  // namespace detail

/// A CPU (or any load) reading of one node, written by a poller and read on the pick path.
/// Both fields are atomics so picks read them without a lock; a reader may see a value
/// with the previous timestamp for an instant, which only matters at the ttl boundary.
struct NodeReading {
    std::atomic<double> value{0.0};
    /// steady_clock time of the reading, in milliseconds since the clock's epoch;
    /// 0 = never read.
    std::atomic<std::int64_t> at_ms{0};
};

namespace detail {

/// The readings of one member list, index-aligned with it: readings[i] is nodes[i]'s.
/// Built by AlgorithmState::attach_readings (in librpclb, so that a MemberSnapshot holding
/// one may outlive the plugin that asked for it); immutable once built. Holding the table
/// keeps its readings alive.
struct ReadingTable {
    std::vector<std::shared_ptr<NodeReading>> readings;
};

/// The readings `members` already holds in its cache, when they are for its nodes; else
/// nullptr (then call AlgorithmState::attach_readings). No lock, no allocation.
inline const ReadingTable* cached_readings(const MemberSnapshot& members) noexcept {
    const auto* held = members.cache.readings.load(std::memory_order_acquire);
    if (held && (*held)->readings.size() == members.nodes.size()) [[likely]]
        return held->get();
    return nullptr;
}

}  // namespace detail

/// State that belongs to the process, not to one algorithm instance, so that counters and
/// readings survive a restart of their balancer (as the seed's VM-wide caches do, §2
/// "Shared facts"), and readings are shared by every balancer (§2.7 NodeCpuCache).
///
/// The state is owned by librpclb (not by a plugin) and lives until the process exits, so
/// references stay valid; there is no slot limit (seed §10.4). What is kept per member
/// name is freed once the name has left: in-flight counters through forget_in_flight,
/// readings when the last snapshot (or other holder) of the name lets go of them.
/// Look-ups take a mutex: do them off the pick path (at init or when membership changes)
/// and keep the references.
///
/// Thread safety: distinct objects safe; shared objects safe.
class AlgorithmState {
public:
    /// The process-wide instance.
    static AlgorithmState& instance();

    /// The counter named `key` of balancer `balancer`, created at 0 on first use.
    std::atomic<std::int64_t>& counter(std::string_view balancer, std::string_view key);

    /// The balancer's call counters (least_connections and power_of_two share them, as
    /// the seed's `{:conn, name, node}` slots are shared): an identity that CountTable
    /// records. Created on first use and kept for the process's life (one small object per
    /// balancer name).
    const detail::BalancerCounts* balancer_counts(std::string_view balancer);

    /// The calls in flight from this process on `node` through balancer `balancer`,
    /// created at 0 on first use and kept until `forget_in_flight` drops it (then holders
    /// keep their object and a later call creates a new one at 0). Two calls for the same
    /// names give the same counter.
    std::shared_ptr<detail::InFlight> in_flight(std::string_view balancer, std::string_view node);

    /// The counters of `nodes` through `balancer`, index-aligned (in_flight of each).
    /// Throws std::bad_alloc.
    std::shared_ptr<const detail::CountTable> count_table(std::string_view balancer,
                                                          std::span<const std::string> nodes);

    /// One call fewer on the counter of `node` through `balancer` if there is one (never
    /// below zero, never creating one): the slow path of a release that the newest member
    /// table doesn't cover. Takes the mutex. Never throws.
    void release_in_flight(std::string_view balancer, std::string_view node) noexcept;

    /// `nodes` left the group of `balancer`: their counters go to 0 and are dropped from
    /// this state, so a name that has left costs nothing here any more. Never throws.
    void forget_in_flight(std::string_view balancer, std::span<const std::string> nodes) noexcept;

    /// How many (balancer, node) counters this state holds now (for tests of the above).
    std::size_t in_flight_entries();

    /// The rotation cursor named `key` of balancer `balancer`, created at 0 on first use,
    /// handed to threads in blocks (the seed's `{:slot, name, id}` slots); the rest of each
    /// thread's block survives the balancer's restart with it.
    detail::BlockCursor& cursor(std::string_view balancer, std::string_view key);

    /// The reading slot of `node`, shared by every balancer and poller of the process:
    /// created empty on first use, and the same object for every caller as long as any of
    /// them (a caller, or a snapshot's ReadingTable) holds it; freed with its last holder,
    /// so a name nobody reads any more costs nothing (a later call starts empty). Takes
    /// the mutex; throws std::bad_alloc.
    std::shared_ptr<NodeReading> reading(std::string_view node);

    /// The readings of `members.nodes`, index-aligned: the table its cache holds, or one
    /// built now (reading() of each node) and stored in the cache if that is still empty.
    /// The result holds the table for the caller; nullptr when memory ran out. Takes the
    /// mutex when it builds.
    std::shared_ptr<const detail::ReadingTable> attach_readings(const MemberSnapshot& members) noexcept;

    /// How many node readings are alive now (for tests of reading()'s freeing).
    std::size_t reading_entries();

private:
    std::mutex mutex_;
    // Each slot on its own cache line: different nodes' counters are written by
    // different threads' picks and must not share a line.
    struct alignas(64) CounterSlot {
        std::atomic<std::int64_t> value{0};
    };

    std::map<std::string, std::atomic<std::int64_t>*, std::less<>> counters_;
    // Weak: a reading lives as long as its holders. Entries whose reading is gone are
    // swept whenever the map has doubled since the last sweep.
    std::map<std::string, std::weak_ptr<NodeReading>, std::less<>> readings_;
    std::size_t readings_swept_size_ = 0;
    std::map<std::string, std::unique_ptr<detail::BalancerCounts>, std::less<>> balancer_counts_;
    std::map<std::string, detail::BlockCursor*, std::less<>> cursors_;
    std::deque<CounterSlot> counter_storage_;  // stable addresses
    std::deque<detail::BlockCursor> cursor_storage_;
};

// Plugins compile in code that reads these (RPCLB_PLUGIN_ABI_VERSION covers them): a
// change of their layout must come with a new ABI version, and this makes it fail to
// compile until the version and these figures are changed together.
static_assert(RPCLB_PLUGIN_ABI_VERSION == 4 && sizeof(detail::InFlight) == 64 &&
                  sizeof(detail::CountTable) == 64 && sizeof(NodeReading) == 16 &&
                  sizeof(detail::ReadingTable) == 3 * sizeof(void*) &&
                  sizeof(detail::SnapshotCache) == 3 * sizeof(void*) && sizeof(MemberSnapshot) == 56,
              "a layout plugins compile against changed: bump RPCLB_PLUGIN_ABI_VERSION and update this check");

}  // namespace rpclb
