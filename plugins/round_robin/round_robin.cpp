#include "round_robin.hpp"

#include "../plugin_random.hpp"

namespace rpclb::plugins {

void RoundRobin::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "round_robin", {"start"});
    balancer_ = context.balancer;
    cursor_.store(cursor_start(options), std::memory_order_relaxed);
}

Result<std::size_t> RoundRobin::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    return static_cast<std::size_t>(cursor_.fetch_add(1, std::memory_order_relaxed) % size);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(round_robin, rpclb::plugins::RoundRobin)
