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
/// Counts are the balancer's process-wide `AlgorithmState::in_flight(balancer, node)`
/// (detail::ConnectionCounts), so they survive a balancer restart and are shared with a
/// power_of_two instance on the same balancer name, as in the seed. Each count is kept per
/// thread (detail::InFlightTable: a row per thread slot, written only by that thread's
/// picks and by releases of its calls) and summed when a pick reads it. A pick adds its
/// call to its own thread's row; a release — from any thread, such as the network thread a
/// call completes on — takes one call off a row that holds one, so it cancels the pick
/// exactly and no count goes below zero. A pick reads every count as it is at that moment
/// (no cached view: the least loaded of all members, chosen on old figures, would be the
/// same member for every thread at once), so from one thread the order above is exact;
/// choosing and counting are two steps, so two concurrent picks may choose the same member
/// (as in the seed). The price of fresh figures: when several threads pick at full speed,
/// each pick reads rows that the other threads keep changing, one cache-line transfer per
/// changed row (bench/README.md, `selection`).
///
/// Differences from the seed, on purpose: counts never go below zero and have no slot
/// limit (§10.4); an empty member list gives `service_unavailable` "no members registered"
/// naming the balancer (§10.6). Takes no options. `choose_nodes` is the default random
/// sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick reads the cached count table (rebuilt only when the membership version
/// changes), reads every member's count in each thread's row in use (one 128-byte segment
/// per 8 members that joined together, per thread) and counts its call with a plain store
/// in its own thread's row; `release_node` is one hash look-up and one compare-exchange.
/// No lock, no allocation (a thread's first pick claims its thread slot, once).
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
