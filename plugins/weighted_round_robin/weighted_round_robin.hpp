// The WeightedRoundRobin selection algorithm.
#pragma once

#include <rpclb/reported_load.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// Picks members in turn, each as often as its weight says, smoothly interleaved
/// ({a: 3, b: 1} gives a a b a, never a a a b; predecessor-compatibility §2.3, §10.5).
///
/// Options: `weights`, node name → integer in [0, 1,000,000], default `{}` (a missing member
/// weighs 1, weight 0 excludes it), or the string `"reported"`: each member weighs its rate
/// ÷ the load it reports (gRPC's weighted round robin, proposal A58), read at each pick,
/// and a member whose load is unknown weighs the mean of the others. The rate is the
/// member's share of this node's successful calls, counted in windows of 100 × members
/// successes and averaged with the window before; until a member has one it counts the
/// mean share (at first every member's: weights 1 ÷ load, load_weight()). At rate ÷
/// utilization every member converges to weighing its capacity;
/// `load_max_age_ms`, an integer in [1, 3,600,000], default 10,000, how long a report
/// counts, and `error_penalty`, a number in [0, 1000], default 1.0, the weight of this
/// node's error rate to the member (a moving average over about its last 10 calls) added
/// to its utilization (both with `"reported"` only); `start`, an integer ≥ 0, the cursor's
/// first value (default: random for each instance).
///
/// With `"reported"` the k-th pick takes the member whose share of the summed weights
/// holds frac(k × φ) (a Weyl sequence: shares follow the weights over any run of picks,
/// evenly interleaved), so a change of load shows in the very next pick.
///
/// Errors: bad options throw std::invalid_argument at `init`; all-zero weights give
/// `service_unavailable` "no member has a positive weight"; an empty list "no members
/// registered".
///
/// Thread safety: shared objects safe for concurrent picks once `init` has returned.
class WeightedRoundRobin final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::snapshot_state | capability::feedback | capability::reported_load;
    /// Largest accepted weight.
    static constexpr std::uint64_t max_weight = 1'000'000;
    /// Periods longer than this are scaled down.
    static constexpr std::uint64_t max_period = 65'536;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// With `"reported"`: counts the call's outcome in the member's error rate.
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;

private:
    // One period of member indices; empty when no member has a positive weight.
    using Period = std::vector<std::uint32_t>;

    Period build(std::span<const std::string> nodes) const;
    Result<std::size_t> choose_by_reported_load(const MemberSnapshot& members);

    // With "reported": what this node sees of each member, index-aligned with the
    // snapshot (its state; a new snapshot starts unknown).
    struct alignas(64) MemberStat {
        mutable std::atomic<double> error_rate{0.0};
        // Successful calls since the window began.
        mutable std::atomic<std::uint64_t> completed{0};
        // The member's share of the successes of the last windows (smoothed); 0: unknown.
        mutable std::atomic<double> share{0.0};
    };
    struct MemberStats {
        explicit MemberStats(std::size_t n) : members(n) {}
        std::vector<MemberStat> members;
        // Successes counted since the snapshot began; a window closes every window() of them.
        mutable std::atomic<std::uint64_t> completed{0};
        // The mean of the members' known shares, set when a window closes; 1 while none is.
        mutable std::atomic<double> mean_share{1.0};
        std::uint64_t window() const noexcept { return 100 * members.size(); }
    };
    const MemberStats* member_stats(const MemberSnapshot& members) const noexcept;
    static void count_success(const MemberStats& stats, std::size_t index) noexcept;

    std::string balancer_;
    bool reported_ = false;  // "weights": "reported"
    std::int64_t load_max_age_ms_ = default_load_max_age_ms;
    double error_penalty_ = 1.0;
    std::map<std::string, std::uint64_t, std::less<>> weights_;
    std::atomic<std::uint64_t> cursor_{0};
};

}  // namespace rpclb::plugins
