// The HashRing selection algorithm (consistent hashing, with bounded loads).
#pragma once

#include "../plugin_random.hpp"
#include "consistent_hash_ring.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// Routes each key to the same member while the member set doesn't change, on a
/// ConsistentHashRing of the members (predecessor-compatibility §2.6, §10.2, §10.3). No key:
/// a random member. `choose_nodes` with a key returns `min(count, members)` distinct members
/// clockwise from the key, the single pick first.
///
/// Options: `weight`, virtual nodes per member, 1 … 4096 (default 128); `load_factor` c ≥ 1
/// (default none): a key whose owner has more than ⌈c × (in flight + 1) / members⌉ calls in
/// flight goes clockwise to the first member under that bound. Bad options throw
/// std::invalid_argument at `init`.
///
/// Thread safety: shared objects safe for concurrent picks and `on_node_change` once
/// `init` has returned.
class HashRing final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::snapshot_state | capability::in_flight | capability::choose_many;
    static constexpr std::uint32_t default_weight = 128;
    static constexpr std::uint32_t max_weight = 4096;

    /// Reads `weight` and `load_factor`; throws std::invalid_argument naming a bad one.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The key's owner (or, with `load_factor`, the first member with room), or a random
    /// member without a key. `service_unavailable` for an empty list;
    /// `internal_server_error` if building the ring runs out of memory.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    /// The key's replicas, or a random sample without a key.
    Result<std::vector<std::size_t>> choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                  const PickOptions& options) override;

    /// Virtual nodes per member, as configured.
    std::uint32_t weight() const noexcept { return weight_; }

    /// The load factor; 0 when loads are not bounded.
    double load_factor() const noexcept { return load_factor_; }

    /// For tests and benchmarks: how many rings this instance has built so far. Inline, so
    /// a test can call it through a static_cast. Thread-safe.
    std::uint64_t rings_built() const noexcept { return rings_built_.load(std::memory_order_relaxed); }

private:
    // The snapshot's ring, built on first use.
    const ConsistentHashRing& ring_of(const MemberSnapshot& members);
    std::string balancer_;
    std::uint32_t weight_ = default_weight;
    double load_factor_ = 0;
    std::atomic<std::uint64_t> rings_built_{0};
};

}  // namespace rpclb::plugins
