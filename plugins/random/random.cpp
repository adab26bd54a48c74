#include "random.hpp"

#include <rpclb/detail/thread_rng.hpp>

#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <random>

namespace rpclb::plugins {
namespace {

using detail::thread_rng;

}  // namespace

void Random::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "random");
    balancer_ = context.balancer;
}

Result<std::size_t> Random::choose_from_nodes(const MemberSnapshot& members,
                                              const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    boost::random::uniform_int_distribution<std::size_t> pick(0, size - 1);
    return pick(thread_rng());
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(random, rpclb::plugins::Random)
