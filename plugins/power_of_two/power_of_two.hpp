// The PowerOfTwo selection algorithm ("power of two random choices").
#pragma once

#include <rpclb/detail/connection_counts.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstdint>

namespace rpclb::plugins {

/// Draws two distinct members at random and picks the one with fewer calls in flight
/// (reference §2.5): A when count(A) ≤ count(B), else B. A single member is always picked.
/// The pick counts one more call on the chosen member; `release_node`, `on_node_change`
/// and the counts themselves are those of least_connections (detail::ConnectionCounts:
/// the balancer's process-wide `AlgorithmState::in_flight(balancer, node)`, shared by both
/// algorithms on the same balancer name, surviving a restart, kept per thread, cancelled
/// exactly by a release from any thread, never below zero, reset when a node leaves).
///
/// How a pick reads a count (detail::InFlightCount::estimate): the picking thread's own
/// calls exactly, as they are now (releases of them from any thread included), plus other
/// threads' calls as this thread last summed them, re-read every 32 of its reads of that
/// member. So from one picking thread the rule above is exact; with several, a pick may not
/// yet see up to 32 reads' worth of other threads' newest calls on a member. Unlike
/// least_connections, which reads every count fresh, two random choices stay effective on
/// load figures that are a little old (Mitzenmacher, "How useful is old information?", IEEE
/// TPDS 11(1), 2000: with periodically updated loads, the best of two random choices keeps
/// its advantage where taking the least loaded of all members herds every caller onto the
/// same member); in exchange, picks on different threads don't move each other's cache
/// lines.
///
/// Option `seed` (integer ≥ 0, default: none): draw from a deterministic generator seeded
/// with it instead of a per-thread one, so tests can repeat a sequence of picks. The seeded
/// generator is one atomic counter shared by the instance's threads (splitmix64 of the
/// counter), so picks stay lock-free but every pick writes that counter; leave it unset in
/// production. Without `seed`, each thread draws from its own splitmix64 generator seeded
/// from std::random_device.
///
/// Both members come from one 64-bit draw (each 32-bit half scaled to its range by a
/// multiply and shift; the bias, under size / 2³², is far below any test's resolution).
///
/// Differences from the seed, on purpose: counts never go below zero (§10.4); an empty
/// member list gives `service_unavailable` "no members registered" naming the balancer
/// (§10.6). `choose_nodes` is the default random sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick is one draw, a read of two members' counts (the thread's own lines of each; the
/// other threads' lines once per 32 reads) and a plain store in the picking thread's own
/// row; `release_node` is one hash look-up and one compare-exchange. No lock, no
/// allocation (unless the membership version changed, when the count table is rebuilt; a
/// thread's first pick claims its thread slot, once).
class PowerOfTwo final : public SelectionAlgorithm {
public:
    /// Binds the counts to the balancer's name and reads option `seed`. Throws
    /// std::invalid_argument naming `seed` when it is not an integer ≥ 0.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the less loaded of two distinct random members (the first drawn on a tie),
    /// counted as one more call in flight; `service_unavailable` when the list is empty,
    /// `internal_server_error` when memory ran out rebuilding the counter table.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// Resets the counts of nodes that left; ignores joins.
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override;

    /// One call fewer in flight on `node`, never below zero.
    void release_node(std::string_view node) override;

private:
    std::uint64_t draw() noexcept;

    detail::ConnectionCounts counts_;
    bool seeded_ = false;
    std::atomic<std::uint64_t> seeded_state_{0};
};

}  // namespace rpclb::plugins
