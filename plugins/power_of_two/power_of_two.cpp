#include "power_of_two.hpp"

#include <rpclb/reported_load.hpp>

#include <boost/json/serialize.hpp>

#include <stdexcept>

namespace rpclb::plugins {

void PowerOfTwo::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "power_of_two",
                           {"failure_penalty", "reported_load", "load_max_age_ms", "seed", "test_now_ms"});
    balancer_ = context.balancer;
    reported_ = false;
    if (const auto* v = options.if_contains("reported_load")) {
        if (!v->is_bool())
            throw std::invalid_argument("power_of_two: option reported_load must be true or false, got " +
                                        boost::json::serialize(*v));
        reported_ = v->get_bool();
    }
    load_max_age_ms_ = ms_option(options, "power_of_two", "load_max_age_ms", default_load_max_age_ms, 1);
    if (options.contains("load_max_age_ms") && !reported_)
        throw std::invalid_argument("power_of_two: option load_max_age_ms applies only with reported_load true");
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
    if (reported_) {
        // Both members' own utilization, when both reported lately: it counts every
        // caller's calls, not only this node's, and it is relative to each member's
        // capacity. The calls in flight from here break a tie and stand in for a report
        // that is missing.
        if (const NodeLoadTable* loads = reported_loads(members)) {
            const std::int64_t now_ms = load_clock_ms();
            const auto load_a = (*loads)[a]->read(now_ms, load_max_age_ms_);
            const auto load_b = (*loads)[b]->read(now_ms, load_max_age_ms_);
            if (load_a && load_b) {
                const double util_a = load_a->utilization(), util_b = load_b->utilization();
                if (util_a != util_b) {
                    score_a = util_a;
                    score_b = util_b;
                }
            }
        }
    }
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
