#include "hash_ring.hpp"

#include <boost/json/serialize.hpp>
#include <rpclb/detail/thread_rng.hpp>

#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <exception>
#include <random>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

using detail::thread_rng;

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

}  // namespace

void HashRing::init(const AlgorithmContext& context, const boost::json::object& options) {
    weight_ = parse_weight(options);
    balancer_ = context.balancer;
}

Result<std::size_t> HashRing::choose_from_nodes(const MemberSnapshot& members,
                                                const PickOptions& options) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (!options.key) {
        boost::random::uniform_int_distribution<std::size_t> pick(0, size - 1);
        return pick(thread_rng());
    }
    const ConsistentHashRing* ring = ring_for(members);
    if (!ring) return build_failure(balancer_, "out of memory");
    return ring->owner_of(*options.key);
}

Result<std::vector<std::size_t>> HashRing::choose_nodes(const MemberSnapshot& members,
                                                        std::size_t count,
                                                        const PickOptions& options) {
    if (members.nodes.empty()) return empty_members_error(balancer_);
    if (!options.key) return SelectionAlgorithm::choose_nodes(members, count, options);
    const ConsistentHashRing* ring = ring_for(members);
    if (!ring) return build_failure(balancer_, "out of memory");
    try {
        std::vector<std::size_t> replicas;
        replicas.reserve(std::min(count, members.nodes.size()));
        ring->replicas(ConsistentHashRing::hash(*options.key), count, replicas);
        return replicas;
    } catch (const std::exception& e) {
        return build_failure(balancer_, e.what());
    }
}

const ConsistentHashRing* HashRing::ring_for(const MemberSnapshot& members) {
    // Acquire pairs with the release in rebuild(): a ring seen here is fully built.
    const ConsistentHashRing* ring = ring_.load(std::memory_order_acquire);
    if (ring && ring->matches(members)) return ring;
    return rebuild(members);
}

const ConsistentHashRing* HashRing::rebuild(const MemberSnapshot& members) {
    try {
        std::lock_guard lock(rebuild_mutex_);
        // Another pick may have built it meanwhile, or the list may be one seen before
        // (pickers holding the old and the new snapshot during a membership change).
        for (auto it = rings_.rbegin(); it != rings_.rend(); ++it) {
            if ((*it)->same_members(members)) {
                ring_.store(it->get(), std::memory_order_release);
                return it->get();
            }
        }
        rings_.reserve(rings_.size() + 1);
        rings_.push_back(std::make_unique<const ConsistentHashRing>(members.nodes, weight_,
                                                                    members.version, &members));
        ring_.store(rings_.back().get(), std::memory_order_release);
        return rings_.back().get();
    } catch (const std::exception&) {
        return nullptr;
    }
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(hash_ring, rpclb::plugins::HashRing)
