// The LeastConnections selection algorithm.
#pragma once

#include <rpclb/detail/connection_counts.hpp>

namespace rpclb::plugins {

/// Picks the member with the fewest calls in flight (seed §2.4).
///
/// A pick reads every member's count once and takes the first member with the strictly
/// lowest, so ties go to the earliest member in list order; it then counts one more call on
/// the chosen member. A fresh balancer over [a, b, c] picks a, b, c; after releasing b the
/// next pick is b. Counts, their release and their reset when a member leaves are those of
/// every counting algorithm (detail::CountingAlgorithm), shared with power_of_two on the
/// same balancer name.
///
/// Counts are one atomic per member shared by every thread, so a pick sees every call
/// counted so far, from any thread.
///
/// Differences from the seed, on purpose: counts never go below zero and have no slot
/// limit (§10.4); an empty member list gives `service_unavailable` "no members registered"
/// naming the balancer (§10.6). Takes no options. `choose_nodes` is the default random
/// sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick reads every member's count through the snapshot's count table (built by the
/// first pick on a snapshot) and counts its call with one `fetch_add`. No lock, no
/// allocation.
class LeastConnections final : public detail::CountingAlgorithm {
public:
    /// Binds the counts to the balancer's name. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the least loaded member (earliest on ties), counted as one more call in
    /// flight; `service_unavailable` when the list is empty, `internal_server_error` when
    /// memory ran out rebuilding the counter table.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;
};

}  // namespace rpclb::plugins
