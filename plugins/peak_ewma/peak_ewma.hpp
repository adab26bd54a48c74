// The PeakEwma selection algorithm (latency-aware power of two choices).
#pragma once

#include "../failure_cost.hpp"
#include "../member_table.hpp"
#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// Power of two choices scored by latency (Finagle's and Linkerd's PeakEWMA): of two
/// distinct random members, the one with the lower cost × (in_flight + 1), where cost is a
/// peak-sensitive moving average of the member's latencies, learnt from each release
/// (CallOutcome). A counted failure (doc/reference/algorithms.md, "Failures") counts as a
/// latency of at least `failure_penalty`, so a member that fails fast never looks cheap; a
/// member with no sample yet costs the mean of those that have one. A tie goes to the first
/// drawn, itself a uniformly random one of the two.
///
/// Options: `decay` (ms, integer 1 … 86,400,000, default 10,000); `failure_penalty` (ms,
/// integer 0 … 86,400,000, default 1,000; 0: failures cost only their latency); `seed`
/// (integer ≥ 0: deterministic draws, for tests); `test_now_ms` (integer ≥ 1: the clock
/// frozen there, for tests). Bad options throw std::invalid_argument naming the option at
/// `init`.
///
/// Thread safety: shared objects safe for concurrent picks and releases once `init` has
/// returned; only the first pick on a snapshot takes a mutex.
class PeakEwma final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::feedback | capability::in_flight | capability::snapshot_state;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The cheaper of two distinct random members; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    /// Records the call's latency in the member's cost; a counted failure's is at least
    /// `failure_penalty`.
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;

    /// The cost of `node` now in nanoseconds (0 when it has no sample), for tests.
    double cost_of(const std::string& node);

private:
    // One member's cost: nanoseconds, and the clock (PluginClock) at its last sample.
    struct alignas(64) Cost {
        std::atomic<double> ns{0};
        std::atomic<std::int64_t> at_ns{0};
    };
    using Costs = MemberTable<Cost>::Row;

    double cost(const Cost& member, std::int64_t now) const noexcept;

    std::string balancer_;
    std::chrono::nanoseconds decay_{std::chrono::seconds(10)};
    std::chrono::nanoseconds failure_penalty_{std::chrono::seconds(1)};
    Draws draws_;
    PluginClock clock_;
    // The mean cost of the members with a sample, for those without one.
    std::atomic<double> mean_ns_{1e6};
    MemberTable<Cost> costs_;
};

}  // namespace rpclb::plugins
