#include "first_member.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace acme {

void FirstMember::init(const rpclb::AlgorithmContext& context, const boost::json::object& options) {
    // init is the only hook allowed to throw, and only std::invalid_argument: its message
    // becomes the reason start_balancer fails, so it names the option.
    rpclb::reject_unknown_options(options, "first_member");
    balancer_ = context.balancer;
}

rpclb::Result<std::size_t> FirstMember::choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                          const rpclb::PickOptions& options) {
    (void)options;
    if (members.nodes.empty()) return rpclb::empty_members_error(balancer_);
    return std::size_t{0};
}

rpclb::Result<std::vector<std::size_t>> FirstMember::choose_nodes(const rpclb::MemberSnapshot& members,
                                                                  std::size_t count,
                                                                  const rpclb::PickOptions& options) {
    (void)options;
    if (members.nodes.empty()) return rpclb::empty_members_error(balancer_);
    std::vector<std::size_t> indices(std::min(count, members.nodes.size()));
    std::iota(indices.begin(), indices.end(), std::size_t{0});
    return indices;
}

}  // namespace acme

// Exports the C table of the plugin (the function rpclb_plugin), generated from the class.
// The first argument is the algorithm name: it must match the file name
// librpclb_first_member.so, or the loader refuses the plugin.
RPCLB_PLUGIN(first_member, acme::FirstMember)
