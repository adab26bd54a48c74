// The PeakEwma selection algorithm (latency-aware power of two choices).
#pragma once

#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// Power of two choices scored by latency: of two distinct random members it picks the one
/// with the lower cost × (in_flight + 1), where cost is a peak-sensitive moving average of
/// the member's call latencies (Finagle's and Linkerd's PeakEWMA, brpc's p2c). The cost
/// decays as e^(−Δt / decay), Δt being the time since the member's last sample: a latency
/// above the decayed cost replaces it at once (the peak), one below is averaged in with
/// weight 1 − e^(−Δt / decay). So a member that slowed down is avoided at once, and one
/// that nobody picks any more looks cheaper over time until a pick tries it again.
///
/// Feedback: every release carries the call's latency (CallOutcome). A call that failed
/// here or on the way (ErrorOrigin::local: no connection, timeout) counts as a latency of
/// at least `failure_penalty`, so a member that fails fast is not mistaken for a fast one.
/// A member without a sample yet costs the mean of the members that have one (1 ms when
/// none has), so a newcomer is tried without being flooded.
///
/// Options: `decay` (ms, integer 1 … 86,400,000, default 10,000); `failure_penalty` (ms,
/// integer 0 … 86,400,000, default 1,000); `seed` (integer ≥ 0: deterministic draws, for
/// tests).
///
/// Costs are kept per member name for the instance's life, so a membership change keeps
/// them; a snapshot's state is the index-aligned list of its members' costs.
///
/// Thread safety: shared objects safe for concurrent picks and releases once `init` has
/// returned. A pick is one draw, a coarse clock read and two reads of cost and count; a
/// release is a clock read and a compare-exchange. The first pick on a snapshot looks its members up under a mutex.
class PeakEwma final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::feedback | capability::in_flight | capability::snapshot_state;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The cheaper of two distinct random members; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    /// Records the call's latency in the member's cost.
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;

    /// The cost of `node` now in nanoseconds (0 when it has no sample), for tests.
    double cost_of(const std::string& node);

private:
    // One member's cost: nanoseconds, and the steady_clock time of its last sample.
    struct alignas(64) Cost {
        std::atomic<double> ns{0};
        std::atomic<std::int64_t> at_ns{0};
    };
    using Costs = std::vector<std::shared_ptr<Cost>>;

    const Costs& costs_of(const MemberSnapshot& members);
    double cost(const Cost& member, std::int64_t now) const noexcept;

    std::string balancer_;
    std::chrono::nanoseconds decay_{std::chrono::seconds(10)};
    std::chrono::nanoseconds failure_penalty_{std::chrono::seconds(1)};
    Draws draws_;
    // The mean cost of the members with a sample, for those without one.
    std::atomic<double> mean_ns_{1e6};
    std::mutex mutex_;  // by_name_, only when a snapshot's costs are looked up
    std::map<std::string, std::shared_ptr<Cost>, std::less<>> by_name_;
};

}  // namespace rpclb::plugins
