// The LeastConnections selection algorithm.
#pragma once

#include <rpclb/detail/connection_counts.hpp>
#include <rpclb/selection_algorithm.hpp>

namespace rpclb::plugins {

/// Picks the member with the fewest calls in flight (reference §2.4).
///
/// A pick scans `members.nodes` once and takes the first member with the strictly lowest
/// count, so ties go to the earliest member in list order; it then counts one more call
/// on the chosen member. `release_node` counts one fewer, never below zero. A member that
/// leaves (`on_node_change(left, nodes)`) has its count reset to 0; `joined` changes
/// nothing (an unknown member counts 0). A fresh balancer over [a, b, c] picks a, b, c;
/// after releasing b the next pick is b.
///
/// Counts are the process-wide `"conn:" + node` counters of the balancer name
/// (detail::ConnectionCounts), so they survive a balancer restart and are shared with a
/// power_of_two instance on the same balancer name, as in the seed. Choosing and counting
/// are two steps, so two concurrent picks may choose the same member (as in the seed).
///
/// Differences from the seed, on purpose: counts never go below zero and have no slot
/// limit (§10.4); an empty member list gives `service_unavailable` "no members registered"
/// naming the balancer (§10.6). Takes no options. `choose_nodes` is the default random
/// sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick reads the cached counter table (rebuilt only when the membership version
/// changes) and does one atomic add: no lock, no allocation.
class LeastConnections final : public SelectionAlgorithm {
public:
    /// Binds the counts to the balancer's name. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the least loaded member (earliest on ties), counted as one more call in
    /// flight; `service_unavailable` when the list is empty, `internal_server_error` when
    /// memory ran out rebuilding the counter table.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// Resets the counts of nodes that left; ignores joins.
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override;

    /// One call fewer in flight on `node`, never below zero.
    void release_node(std::string_view node) override;

private:
    detail::ConnectionCounts counts_;
};

}  // namespace rpclb::plugins
