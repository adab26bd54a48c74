#include "round_robin.hpp"

#include <rpclb/algorithm_state.hpp>

namespace rpclb::plugins {

void RoundRobin::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "round_robin");
    balancer_ = context.balancer;
    cursor_ = &AlgorithmState::instance().cursor(balancer_, "rr_cursor");
}

Result<std::size_t> RoundRobin::choose_from_nodes(const MemberSnapshot& members,
                                                  const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    const std::uint64_t c = cursor_->next();
    if (c > reset_after) cursor_->restart(c);
    return static_cast<std::size_t>((c - 1) % size);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(round_robin, rpclb::plugins::RoundRobin)
