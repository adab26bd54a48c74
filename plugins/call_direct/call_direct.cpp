#include "call_direct.hpp"

namespace rpclb::plugins {

void CallDirect::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "call_direct");
    balancer_ = context.balancer;
    local_node_ = context.local_node;
}

Result<std::size_t> CallDirect::choose_from_nodes(const MemberSnapshot& members,
                                                  const PickOptions& options) {
    (void)options;
    const auto& nodes = members.nodes;
    if (nodes.empty()) return empty_members_error(balancer_);
    const std::size_t hint = last_index_.load(std::memory_order_relaxed);
    if (hint < nodes.size() && nodes[hint] == local_node_) return hint;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i] == local_node_) {
            last_index_.store(i, std::memory_order_relaxed);
            return i;
        }
    }
    return ErrorMessage{ErrorCode::service_unavailable,
                        "call_direct: the local node " + local_node_ + " is not a member",
                        boost::json::object{{"load_balancer", balancer_}, {"node", local_node_}}};
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(call_direct, rpclb::plugins::CallDirect)
