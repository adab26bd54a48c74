// The LeastCpu selection algorithm.
#pragma once

#include <rpclb/algorithm_state.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <boost/json/object.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// LeastCpu's `algorithm_opts` (seed §2.7), validated. Durations in milliseconds.
struct LeastCpuSettings {
    /// `poll_interval`: pause between the end of one poll cycle and the start of the next.
    /// Integer in [1, 86'400'000]; default 5000.
    std::chrono::milliseconds poll_interval{5000};
    /// `poll_startup_jitter`: the first poll waits a uniformly random time in [0, this].
    /// Integer in [0, 86'400'000]; 0 = poll at once; default 60000.
    std::chrono::milliseconds poll_startup_jitter{60000};
    /// `cpu_cache_ttl`: a reading older than this counts as missing. Integer in
    /// [0, 86'400'000]; default 10000.
    std::chrono::milliseconds cpu_cache_ttl{10000};
    /// `cpu_threshold`: width of the band of candidates above the lowest reading, in
    /// percentage points. Number in [0, 100]; default 5.0.
    double cpu_threshold = 5.0;
    /// `cpu_sampler_fixed` (testing aid): the poller reports this CPU percent for the
    /// local node instead of sampling /proc/stat. Number in [0, 100].
    std::optional<double> cpu_sampler_fixed;
    /// `test_now_ms` (testing aid): the clock of picks and of the poller's timestamps is
    /// frozen at this steady_clock time in milliseconds. Integer ≥ 1; 0 (absent) = the
    /// real steady_clock.
    std::int64_t test_now_ms = 0;
    /// `seed` (testing aid): picks in the candidate band and the startup jitter draw from
    /// a generator seeded with this, shared by the instance's threads, so a
    /// single-threaded sequence of picks is reproducible. Non-negative integer; absent =
    /// a per-thread generator seeded from std::random_device.
    std::optional<std::uint64_t> seed;

    /// Reads and checks `options`. Throws std::invalid_argument naming the option when
    /// one has the wrong type or range, or is unknown.
    static LeastCpuSettings from_json(const boost::json::object& options);

    /// The time picks and readings use, in milliseconds: steady_clock's clock
    /// (CLOCK_MONOTONIC) read at tick resolution (CLOCK_MONOTONIC_COARSE, at most a few
    /// ms behind), or `test_now_ms` when set.
    std::int64_t now_ms() const noexcept;
};

/// Picks a member with a low CPU load, from readings a poller keeps fresh (reference
/// §2.7, with §10.9).
///
/// A pick reads, for each member, its NodeReading from AlgorithmState (keyed by node,
/// shared by every balancer of the process, kept while a snapshot or poller holds it). A reading
/// that is missing (never written) or stale (older than `cpu_cache_ttl`; exactly ttl old
/// is still fresh) counts as 50.0. With `min` the lowest value, the candidates are the
/// members whose value is at most `min + cpu_threshold`; the pick is a uniformly random
/// candidate. A single member is picked without reading anything. Picking never touches
/// the network and never refreshes a reading. Until the first poll every member reads
/// 50.0, so the algorithm behaves like Random (up to `poll_startup_jitter` after start).
///
/// The readings come from the service returned by services(): one CpuPoller per balancer
/// (see cpu_poller.hpp), run on timers of the balancer's AlgorithmHost executor, that
/// samples the local CPU from /proc/stat and fetches each remote member's latest reading
/// with the host's asynchronous calls.
///
/// Differences from the seed, on purpose: CPU comes from /proc/stat deltas, not
/// `:cpu_sup`; remote readings travel over the mesh as the registered function
/// `rpclb.cpu_reading`; a failed or malformed remote reply is counted and logged, never a
/// crash of the poller (§10.9); an empty member list gives `service_unavailable` "no
/// members registered" naming the balancer (§10.6); options are checked at init. There is
/// no `on_node_change` (readings are node-scoped and age out through the ttl), as in the
/// seed's newest version. `choose_nodes` is the default random sample.
///
/// Cost: the readings of a member list are looked up once per snapshot (the first pick on
/// it keeps them as its state: MemberSnapshot::state); a pick then reads two atomics per member, a coarse
/// clock and one random number: about 50 ns of CPU at 8 members on the development VM
/// (Random: 11 ns), the same per thread with two threads. No lock, no allocation once the
/// snapshot holds its readings; members past the first 64 are read twice.
///
/// Memory: the algorithm keeps nothing per member name. A snapshot holds its members'
/// readings and frees them with itself; a reading lives while any snapshot (of any
/// balancer) or poller holds it, so a name that has left every group costs nothing once
/// its last snapshot is gone (a name that comes back starts without a reading, 50.0,
/// until the next poll).
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned.
class LeastCpu final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::snapshot_state | capability::host | capability::services;
    /// The value of a missing or stale reading (the seed's default/fallback CPU).
    static constexpr double missing_cpu = 50.0;

    /// Reads the options (see LeastCpuSettings). Throws std::invalid_argument naming a
    /// bad option.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of a member in the least-loaded band; `service_unavailable` when the list is
    /// empty.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// One CpuPoller named "<balancer>_cpu_poller". Its start() throws std::logic_error
    /// when the algorithm was initialised without a host (AlgorithmContext::host).
    std::vector<std::shared_ptr<Service>> services() override;

private:
    std::uint32_t draw() noexcept;

    AlgorithmContext context_;
    LeastCpuSettings settings_;
    // Only with the `seed` option: a splitmix64 counter shared by the instance's threads.
    alignas(64) std::atomic<std::uint64_t> seeded_state_{0};
};

}  // namespace rpclb::plugins
