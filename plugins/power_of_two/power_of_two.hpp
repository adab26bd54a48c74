// The PowerOfTwo selection algorithm ("power of two random choices").
#pragma once

#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace rpclb::plugins {

/// Draws two distinct members at random and picks the one with fewer calls in flight
/// (predecessor-compatibility §2.5): A when in_flight(A) ≤ in_flight(B), else B. A single
/// member is always picked.
///
/// Option `seed` (integer ≥ 0): a deterministic generator shared by the instance's threads
/// (Draws), for tests; default: each thread's own.
///
/// Thread safety: shared objects safe for concurrent picks once `init` has returned. A pick
/// is one draw and a read of two counts: no lock, no allocation.
class PowerOfTwo final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = capability::in_flight;

    /// Reads option `seed`; throws std::invalid_argument naming it when it is bad.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The less loaded of two distinct random members (the first drawn on a tie);
    /// `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

private:
    std::string balancer_;
    Draws draws_;
};

}  // namespace rpclb::plugins
