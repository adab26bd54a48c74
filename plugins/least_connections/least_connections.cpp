#include "least_connections.hpp"

namespace rpclb::plugins {

void LeastConnections::init(const AlgorithmContext& context, const boost::json::object& options) {
    (void)options;
    counts_.init(context.balancer);
}

Result<std::size_t> LeastConnections::choose_from_nodes(const MemberSnapshot& members,
                                                        const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(counts_.balancer());
    const auto* counts = counts_.counts(members);
    if (!counts) return detail::table_build_error(counts_.balancer());
    // Every member's count is on the same balancer's table: how many shards to add up is
    // read once.
    const std::uint32_t shards = (*counts)[0].shards_in_use();
    std::size_t best = 0;
    std::int64_t fewest = (*counts)[0].value(shards);
    for (std::size_t i = 1; i < size; ++i) {
        const std::int64_t count = (*counts)[i].value(shards);
        if (count < fewest) {
            best = i;
            fewest = count;
        }
    }
    (*counts)[best].acquire();
    return best;
}

void LeastConnections::on_node_change(NodeChange change, std::span<const std::string> nodes) {
    if (change == NodeChange::left) counts_.reset(nodes);
}

void LeastConnections::release_node(std::string_view node) { counts_.release(node); }

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_connections, rpclb::plugins::LeastConnections)
