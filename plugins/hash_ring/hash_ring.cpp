#include "hash_ring.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <random>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

std::uint32_t parse_weight(const boost::json::object& options) {
    const auto* value = options.if_contains("weight");
    if (!value) return HashRing::default_weight;
    std::int64_t weight = 0;
    if (value->is_int64()) {
        weight = value->get_int64();
    } else if (value->is_uint64()) {
        weight = value->get_uint64() > HashRing::max_weight ? 0 : value->get_uint64();
    } else {
        weight = 0;
    }
    if (weight < 1 || weight > HashRing::max_weight)
        throw std::invalid_argument("hash_ring: option weight must be an integer in 1..4096, got " +
                                    boost::json::serialize(*value));
    return static_cast<std::uint32_t>(weight);
}

ErrorMessage build_failure(std::string_view balancer, const char* what) {
    return ErrorMessage{ErrorCode::internal_server_error,
                        std::string("hash_ring: building the ring failed: ") + what,
                        boost::json::object{{"load_balancer", balancer}}};
}

double parse_load_factor(const boost::json::object& options) {
    const auto* value = options.if_contains("load_factor");
    if (!value) return 0;
    if (!value->is_number() || !(value->to_number<double>() >= 1.0) || !(value->to_number<double>() <= 1e6))
        throw std::invalid_argument("hash_ring: option load_factor must be a number from 1 to 1e6, got " +
                                    boost::json::serialize(*value));
    return value->to_number<double>();
}

}  // namespace

void HashRing::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "hash_ring", {"weight", "load_factor"});
    weight_ = parse_weight(options);
    load_factor_ = parse_load_factor(options);
    balancer_ = context.balancer;
}

const ConsistentHashRing& HashRing::ring_of(const MemberSnapshot& members) {
    return members.state<ConsistentHashRing>(snapshot_owner(), [&] {
        rings_built_.fetch_add(1, std::memory_order_relaxed);
        return ConsistentHashRing(members.nodes, weight_);
    });
}

Result<std::size_t> HashRing::choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (!options.key) return scale32(thread_random(), size);
    const ConsistentHashRing* ring = nullptr;
    try {
        ring = &ring_of(members);
    } catch (const std::exception& e) {
        return build_failure(balancer_, e.what());
    }
    const std::uint64_t h = ConsistentHashRing::hash(*options.key);
    if (load_factor_ == 0 || members.calls.empty()) return ring->owner(h);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < size; ++i) total += members.in_flight(i);
    // Room: fewer calls than ⌈c × (total + 1) / members⌉, counting this one.
    const auto bound = static_cast<std::int64_t>(std::ceil(load_factor_ * static_cast<double>(total + 1) /
                                                           static_cast<double>(size)));
    return ring->first_with_room(h, [&](std::size_t member) { return members.in_flight(member) + 1 <= bound; });
}

Result<std::vector<std::size_t>> HashRing::choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                        const PickOptions& options) {
    if (members.nodes.empty()) return empty_members_error(balancer_);
    if (!options.key) return SelectionAlgorithm::choose_nodes(members, count, options);
    try {
        std::vector<std::size_t> replicas;
        replicas.reserve(std::min(count, members.nodes.size()));
        ring_of(members).replicas(ConsistentHashRing::hash(*options.key), count, replicas);
        return replicas;
    } catch (const std::exception& e) {
        return build_failure(balancer_, e.what());
    }
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(hash_ring, rpclb::plugins::HashRing)
