#include "least_connections.hpp"

namespace rpclb::plugins {

void LeastConnections::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "least_connections");
    counts_.init(context.balancer);
}

Result<std::size_t> LeastConnections::choose_from_nodes(const MemberSnapshot& members,
                                                        const PickOptions& options) {
    (void)options;
    return pick_counted(members, [](const auto& estimate, std::size_t size) {
        std::size_t best = 0;
        std::int64_t fewest = estimate(0);
        for (std::size_t i = 1; i < size; ++i) {
            const std::int64_t count = estimate(i);
            if (count < fewest) {
                best = i;
                fewest = count;
            }
        }
        return best;
    });
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_connections, rpclb::plugins::LeastConnections)
