#include "random.hpp"

#include "../plugin_random.hpp"

namespace rpclb::plugins {

void Random::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "random");
    balancer_ = context.balancer;
}

Result<std::size_t> Random::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    return scale32(thread_random(), size);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(random, rpclb::plugins::Random)
