#include "least_connections.hpp"

namespace rpclb::plugins {

void LeastConnections::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "least_connections");
    balancer_ = context.balancer;
}

Result<std::size_t> LeastConnections::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    std::size_t best = 0;
    std::int64_t fewest = members.in_flight(0);
    for (std::size_t i = 1; i < size; ++i)
        if (const std::int64_t count = members.in_flight(i); count < fewest) {
            best = i;
            fewest = count;
        }
    return best;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_connections, rpclb::plugins::LeastConnections)
