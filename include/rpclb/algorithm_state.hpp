// Process-wide state for selection algorithms that outlives balancer restarts.
#pragma once

#include <rpclb/detail/block_cursor.hpp>
#include <rpclb/detail/in_flight_count.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace rpclb {

/// A CPU (or any load) reading of one node, written by a poller and read on the pick path.
/// Both fields are atomics so picks read them without a lock; a reader may see a value
/// with the previous timestamp for an instant, which only matters at the ttl boundary.
struct NodeReading {
    std::atomic<double> value{0.0};
    /// steady_clock time of the reading, in milliseconds since the clock's epoch;
    /// 0 = never read.
    std::atomic<std::int64_t> at_ms{0};
};

/// State that belongs to the process, not to one algorithm instance, so that counters and
/// readings survive a restart of their balancer (as the seed's VM-wide caches do, §2
/// "Shared facts"), and readings are shared by every balancer (§2.7 NodeCpuCache).
///
/// The state is owned by librpclb (not by a plugin), lives until the process exits and is
/// never freed, so references stay valid; there is no slot limit (seed §10.4).
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

    /// The calls in flight from this process on `node` through balancer `balancer`,
    /// created at 0 on first use: the count of least_connections and power_of_two
    /// (the seed's `{:conn, name, node}` slot), kept per thread in the balancer's
    /// detail::InFlightTable (every 8 nodes of a balancer take
    /// 256 × (detail::thread_slot_count() + 1) bytes). Two calls for the same names give
    /// handles on the same count.
    detail::InFlightCount in_flight(std::string_view balancer, std::string_view node);

    /// The rotation cursor named `key` of balancer `balancer`, created at 0 on first use,
    /// handed to threads in blocks (the seed's `{:slot, name, id}` slots); the rest of each
    /// thread's block survives the balancer's restart with it.
    detail::BlockCursor& cursor(std::string_view balancer, std::string_view key);

    /// The reading slot of `node`, shared by every balancer; created empty on first use.
    NodeReading& reading(std::string_view node);

private:
    std::mutex mutex_;
    // Each slot on its own cache line: different nodes' counters are written by
    // different threads' picks and must not share a line.
    struct alignas(64) CounterSlot {
        std::atomic<std::int64_t> value{0};
    };
    struct alignas(64) ReadingSlot {
        NodeReading reading;
    };

    std::map<std::string, std::atomic<std::int64_t>*, std::less<>> counters_;
    std::map<std::string, NodeReading*, std::less<>> readings_;
    std::map<std::string, detail::InFlightCount, std::less<>> in_flight_;
    std::map<std::string, detail::InFlightTable*, std::less<>> in_flight_tables_;
    std::map<std::string, detail::BlockCursor*, std::less<>> cursors_;
    std::deque<CounterSlot> counter_storage_;  // stable addresses
    std::deque<ReadingSlot> reading_storage_;
    std::deque<detail::InFlightTable> in_flight_table_storage_;
    std::deque<detail::BlockCursor> cursor_storage_;
};

}  // namespace rpclb
