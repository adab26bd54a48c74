// The LeastCpu selection algorithm.
#pragma once

#include <rpclb/algorithm_state.hpp>
#include <rpclb/reported_load.hpp>
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

/// LeastCpu's `algorithm_opts` (predecessor-compatibility §2.7), validated. Durations in
/// milliseconds.
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
    /// `source`: where a member's load comes from. "poll" (the default, the predecessor's):
    /// the CpuPoller's calls to each member's /proc/stat reading; "reported": what each
    /// member reports of itself in its answers and probe answers (LoadReport), as 100 ×
    /// its utilization (1.0, a fully busy worker pool, reads as 100), with no poller.
    bool reported = false;

    /// Reads and checks `options`. Throws std::invalid_argument naming the option when
    /// one has the wrong type or range, or is unknown.
    static LeastCpuSettings from_json(const boost::json::object& options);

    /// The time picks and readings use, in milliseconds: steady_clock's clock
    /// (CLOCK_MONOTONIC) read at tick resolution (CLOCK_MONOTONIC_COARSE, at most a few
    /// ms behind), or `test_now_ms` when set.
    std::int64_t now_ms() const noexcept;
};

/// Picks a random member among those whose CPU load is within `cpu_threshold` points of the
/// lowest (predecessor-compatibility §2.7, §10.9). The readings come from the CpuPoller that
/// services() returns, or, with `"source": "reported"`, from the members' own load reports
/// (no poller then); a missing reading, or one older than `cpu_cache_ttl`, counts as 50.0,
/// so until the first poll (or report) the picks are uniform. A pick never touches the network and, once
/// its snapshot holds the readings, takes no lock and allocates nothing.
///
/// Errors: `service_unavailable` "no members registered" for an empty list; init throws
/// std::invalid_argument naming a bad option.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned.
class LeastCpu final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::snapshot_state | capability::host | capability::services | capability::reported_load;
    /// The value of a missing or stale reading (the predecessor's default/fallback CPU).
    static constexpr double missing_cpu = 50.0;

    /// Reads the options (see LeastCpuSettings). Throws std::invalid_argument naming a
    /// bad option.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of a member in the least-loaded band; `service_unavailable` when the list is
    /// empty.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// One CpuPoller named "<balancer>_cpu_poller"; none with `"source": "reported"`. Its
    /// start() throws std::logic_error when the algorithm was initialised without a host
    /// (AlgorithmContext::host).
    std::vector<std::shared_ptr<Service>> services() override;

private:
    std::uint32_t draw() noexcept;

    AlgorithmContext context_;
    LeastCpuSettings settings_;
    // Only with the `seed` option: a splitmix64 counter shared by the instance's threads.
    alignas(64) std::atomic<std::uint64_t> seeded_state_{0};
};

}  // namespace rpclb::plugins
