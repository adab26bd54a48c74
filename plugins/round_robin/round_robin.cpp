#include "round_robin.hpp"

namespace rpclb::plugins {

void RoundRobin::init(const AlgorithmContext& context, const boost::json::object& options) {
    (void)options;
    balancer_ = context.balancer;
}

Result<std::size_t> RoundRobin::choose_from_nodes(const MemberSnapshot& members,
                                                  const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    // Relaxed: the cursor orders nothing but itself.
    std::uint64_t c = cursor_.fetch_add(1, std::memory_order_relaxed) + 1;
    const std::size_t index = static_cast<std::size_t>((c - 1) % size);
    // Only the pick that saw the latest value resets, so a concurrent pick's increment
    // is never lost to a stale reset; a failed exchange leaves it to a later pick.
    if (c > reset_after) cursor_.compare_exchange_strong(c, 0, std::memory_order_relaxed);
    return index;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(round_robin, rpclb::plugins::RoundRobin)
