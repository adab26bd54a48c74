#include "power_of_two.hpp"

namespace rpclb::plugins {

void PowerOfTwo::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "power_of_two", {"failure_penalty", "seed", "test_now_ms"});
    balancer_ = context.balancer;
    draws_.init(options);
    failures_.init(options, "power_of_two");
}

Result<std::size_t> PowerOfTwo::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (size == 1) return std::size_t{0};
    const auto [a, b] = draws_.two(size);
    double score_a = static_cast<double>(members.in_flight(a));
    double score_b = static_cast<double>(members.in_flight(b));
    std::int64_t now = 0;
    if (failures_.on() && failures_.recent(now)) {
        const FailureLoads::Row* loads = nullptr;
        try {
            loads = &failures_.row(members, snapshot_owner());
        } catch (const std::exception&) {
            return state_build_error(balancer_);
        }
        score_a += failures_.load(*(*loads)[a], now);
        score_b += failures_.load(*(*loads)[b], now);
    }
    return score_a <= score_b ? a : b;
}

void PowerOfTwo::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    failures_.record(members, snapshot_owner(), index, outcome);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(power_of_two, rpclb::plugins::PowerOfTwo)
