#include "power_of_two.hpp"

namespace rpclb::plugins {

void PowerOfTwo::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "power_of_two", {"seed"});
    balancer_ = context.balancer;
    draws_.init(options);
}

Result<std::size_t> PowerOfTwo::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (size == 1) return std::size_t{0};
    const auto [a, b] = draws_.two(size);
    return members.in_flight(a) <= members.in_flight(b) ? a : b;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(power_of_two, rpclb::plugins::PowerOfTwo)
