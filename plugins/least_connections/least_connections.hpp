// The LeastConnections selection algorithm.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace rpclb::plugins {

/// Picks the member with the fewest calls in flight from this node through this balancer
/// (predecessor-compatibility §2.4; MemberSnapshot::in_flight, which the balancer counts),
/// the earliest in list order on a tie: a fresh balancer over [a, b, c] picks a, b, c.
/// Choosing and counting are two steps, so two concurrent picks may choose the same member.
/// Takes no options.
///
/// Thread safety: shared objects safe for concurrent picks once `init` has returned. A pick
/// reads every member's count once: no lock, no allocation.
class LeastConnections final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = capability::in_flight;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The least loaded member; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

private:
    std::string balancer_;
};

}  // namespace rpclb::plugins
