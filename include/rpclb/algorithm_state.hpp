// Process-wide state that selection algorithms share and that outlives their balancers.
#pragma once

#include <rpclb/member_snapshot.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// A load reading of one node (least_cpu's CPU percent), written by a poller and read on
/// the pick path. Both fields are atomics so picks read them without a lock; a reader may
/// see a value with the previous timestamp for an instant, which only matters at a ttl
/// boundary.
struct NodeReading {
    std::atomic<double> value{0.0};
    /// steady_clock time of the reading in milliseconds since the clock's epoch; 0 = never.
    std::atomic<std::int64_t> at_ms{0};
};

/// The readings of one member list, index-aligned with it: readings[i] is nodes[i]'s.
/// Holding it keeps its readings alive.
using ReadingTable = std::vector<std::shared_ptr<NodeReading>>;

/// State owned by librpclb for the whole process, which plugins may use so that it
/// survives a restart of their balancer and is shared by every balancer (as the
/// predecessor's VM-wide caches are): named counters, and node readings. Part of the
/// plugin contract (RPCLB_PLUGIN_ABI_VERSION). Look-ups take a mutex: do them off the pick
/// path (at init, when membership changes, or once per snapshot through
/// MemberSnapshot::state) and keep the references.
///
/// Thread safety: distinct objects safe; shared objects safe.
class AlgorithmState {
public:
    /// The process-wide instance; never destroyed, so references stay valid until exit.
    static AlgorithmState& instance();

    /// The counter named `key` of `scope` (a balancer's name, usually), created at 0 on
    /// first use and kept for the process's life.
    std::atomic<std::int64_t>& counter(std::string_view scope, std::string_view key);

    /// The reading of `node`, shared by every balancer and poller of the process: created
    /// empty on first use, and the same object for every caller as long as any holds it;
    /// freed with its last holder, so a name nobody reads any more costs nothing (a later
    /// call starts empty). Throws std::bad_alloc.
    std::shared_ptr<NodeReading> reading(std::string_view node);

    /// reading() of each of `nodes`, index-aligned, under one lock. Throws std::bad_alloc.
    ReadingTable readings(const std::vector<std::string>& nodes);

    /// How many node readings are alive now.
    std::size_t reading_entries();

private:
    std::shared_ptr<NodeReading> reading_locked(std::string_view node);

    std::mutex mutex_;
    std::map<std::string, std::atomic<std::int64_t>*, std::less<>> counters_;
    std::deque<std::atomic<std::int64_t>> counter_storage_;  // stable addresses
    // Weak: a reading lives as long as its holders. Entries whose reading is gone are
    // swept whenever the map has doubled since the last sweep.
    std::map<std::string, std::weak_ptr<NodeReading>, std::less<>> readings_;
    std::size_t readings_swept_size_ = 0;
};

}  // namespace rpclb
