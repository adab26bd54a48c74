// Process-wide state for selection algorithms that outlives balancer restarts.
#pragma once

#include <rpclb/detail/block_cursor.hpp>
#include <rpclb/detail/thread_slot.hpp>
#include <rpclb/selection_algorithm.hpp>
#include <rpclb/version.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rpclb {

namespace detail {

struct BalancerCounts;

/// Stripes of one in-flight count: a thread counts its picks on stripe
/// `thread_slot() % in_flight_stripes`, so threads on different stripes write different
/// cache lines.
inline constexpr std::size_t in_flight_stripes = 4;

/// The calling thread's stripe of the in-flight counts. No lock, no allocation after the
/// thread's first call (thread_slot).
inline std::size_t this_thread_stripe() noexcept { return thread_slot() % in_flight_stripes; }

/// The calls in flight from this process on one node through one balancer (seed §2.4,
/// §2.5): the sum of `in_flight_stripes` counters, each on its own pair of cache lines and
/// never below zero, so the sum is exact and never below zero either (seed-compatibility
/// §10.4). A release takes one call off the caller's stripe, or off the next stripe that
/// holds one (calls complete on network threads, which picked none).
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation.
struct InFlight {
    struct alignas(per_thread_alignment) Stripe {
        std::atomic<std::int64_t> calls{0};
    };
    std::array<Stripe, in_flight_stripes> stripes;

    /// One more call in flight, counted on `stripe` (< in_flight_stripes).
    void acquire(std::size_t stripe = this_thread_stripe()) noexcept {
        stripes[stripe].calls.fetch_add(1, std::memory_order_relaxed);
    }

    /// One call fewer in flight, off `stripe` if it holds one, else off the next stripe
    /// that does; false (and no change) when every stripe was zero.
    bool release(std::size_t stripe = this_thread_stripe()) noexcept {
        for (std::size_t k = 0; k < in_flight_stripes; ++k) {
            auto& calls = stripes[(stripe + k) % in_flight_stripes].calls;
            std::int64_t now = calls.load(std::memory_order_relaxed);
            while (now > 0)
                if (calls.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) return true;
        }
        return false;
    }

    /// Calls counted on `stripe` now.
    std::int64_t on_stripe(std::size_t stripe) const noexcept {
        return stripes[stripe].calls.load(std::memory_order_relaxed);
    }

    /// Calls counted on the stripes other than `stripe` now.
    std::int64_t off_stripe(std::size_t stripe) const noexcept {
        std::int64_t sum = 0;
        for (std::size_t k = 0; k < in_flight_stripes; ++k)
            if (k != stripe) sum += on_stripe(k);
        return sum;
    }

    /// Calls in flight now.
    std::int64_t value() const noexcept {
        std::int64_t sum = 0;
        for (const auto& stripe : stripes) sum += stripe.calls.load(std::memory_order_relaxed);
        return sum;
    }

    /// No calls in flight (the node left its group).
    void reset() noexcept {
        for (auto& stripe : stripes) stripe.calls.store(0, std::memory_order_relaxed);
    }
};

/// A picking thread's estimate of the members' calls in flight (the counting algorithms,
/// seed §2.4, §2.5): its own stripe as it is now, plus the other stripes as they were at
/// most one view period ago. A thread that picks less often than once a period reads every
/// stripe at each pick; one that picks back to back reads the cache lines other cores write
/// once a period rather than at every pick, which is what keeps two threads picking at once
/// from slowing each other down (bench/README.md, "selection").
///
/// One view per stripe (threads sharing a stripe share its view), each on cache lines of
/// its own: word 0 is the clock of the last refresh, word 1 + i the other stripes' calls on
/// member i.
///
/// Thread safety: distinct objects safe; shared objects safe (relaxed atomics: a reader
/// may mix two refreshes, which only makes the estimate a little older). No lock, no
/// allocation after construction.
class StripeViews {
public:
    /// The view clock's period per 8 members: 4,096 ticks of the time-stamp counter on x86
    /// (1.4–4 µs at 1–3 GHz), else 4,096 ns of steady_clock. A view of n members is read
    /// again once it is older than max(1, n / 8) periods, so that reading it (3 cache lines
    /// a member) stays a small share of the picks in between, whose scans grow with n too.
    static constexpr std::uint64_t period_per_8_members = 4096;

    /// The view clock now.
    static std::uint64_t clock() noexcept {
#if defined(__x86_64__) || defined(__i386__)
        return __rdtsc();
#else
        return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
    }

    StripeViews() = default;

    /// Views of `members` members. Throws std::bad_alloc.
    explicit StripeViews(std::size_t members)
        : period_(static_cast<std::int64_t>(period_per_8_members * std::max<std::size_t>(1, members / 8))),
          blocks_per_view_((members + 1 + words_per_block - 1) / words_per_block),
          blocks_(std::make_unique<Block[]>(in_flight_stripes * blocks_per_view_)) {}

    /// The estimate of member `i`'s calls in flight for a thread on `stripe`, whose count of
    /// member i is `counts[i]`. Call `refresh` first.
    std::int64_t estimate(const std::vector<std::shared_ptr<InFlight>>& counts, std::size_t stripe,
                          std::size_t i) const noexcept {
        return counts[i]->on_stripe(stripe) + word(stripe, i + 1).load(std::memory_order_relaxed);
    }

    /// Reads the other stripes of `counts` into the view of `stripe` when it is older than
    /// its period.
    void refresh(const std::vector<std::shared_ptr<InFlight>>& counts, std::size_t stripe) const noexcept {
        const auto now = static_cast<std::int64_t>(clock());
        auto& at = word(stripe, 0);
        if (now - at.load(std::memory_order_relaxed) < period_) [[likely]]
            return;
        for (std::size_t i = 0; i < counts.size(); ++i)
            word(stripe, i + 1).store(counts[i]->off_stripe(stripe), std::memory_order_relaxed);
        at.store(now, std::memory_order_relaxed);
    }

private:
    static constexpr std::size_t words_per_block = per_thread_alignment / sizeof(std::int64_t);
    struct alignas(per_thread_alignment) Block {
        std::atomic<std::int64_t> words[words_per_block]{};
    };

    std::atomic<std::int64_t>& word(std::size_t stripe, std::size_t w) const noexcept {
        return blocks_[stripe * blocks_per_view_ + w / words_per_block].words[w % words_per_block];
    }

    std::int64_t period_ = 0;  // view clock ticks
    std::size_t blocks_per_view_ = 0;
    std::unique_ptr<Block[]> blocks_;
};

/// The counters of one member list of one balancer, index-aligned with the list. Built by
/// AlgorithmState::count_table (in librpclb, so that a MemberSnapshot holding one may
/// outlive the plugin that asked for it); immutable once built, but for its views.
struct CountTable {
    const BalancerCounts* owner = nullptr;  ///< the balancer the counters belong to
    std::vector<std::string> nodes;         ///< the list, for release_node's look-up
    bool sorted = true;                     ///< `nodes` ascending (MemberSnapshot's contract)
    std::vector<std::shared_ptr<InFlight>> counts;  ///< counts[i] is nodes[i]'s
    StripeViews views;                              ///< the picking threads' estimates
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
static_assert(RPCLB_PLUGIN_ABI_VERSION == 5 &&
                  sizeof(detail::InFlight) == detail::in_flight_stripes * detail::per_thread_alignment &&
                  sizeof(detail::CountTable) == 88 && sizeof(NodeReading) == 16 &&
                  sizeof(detail::ReadingTable) == 3 * sizeof(void*) &&
                  sizeof(detail::SnapshotCache) == 3 * sizeof(void*) && sizeof(MemberSnapshot) == 56,
              "a layout plugins compile against changed: bump RPCLB_PLUGIN_ABI_VERSION and update this check");

}  // namespace rpclb
