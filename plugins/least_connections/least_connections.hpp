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
/// How fresh the counts are (detail::InFlightCount::estimate): the picking thread's own
/// calls always; other threads' calls as they are now while this thread picks at the pace
/// of real calls (less often than every 4 µs or so), so the least loaded member is the one
/// the whole process sees. Only a thread picking back to back (a burst of asynchronous
/// calls, a benchmark) reads other threads' part through a view read earlier in the same
/// period of its picks — at most about 8 µs old, shorter than any call those threads made;
/// its own calls still spread it over the members. Reading other threads' parts afresh on
/// every such pick would cost a cache-line transfer per pick per thread
/// (bench/README.md, `selection`).
///
/// Differences from the seed, on purpose: counts never go below zero and have no slot
/// limit (§10.4); an empty member list gives `service_unavailable` "no members registered"
/// naming the balancer (§10.6). Takes no options. `choose_nodes` is the default random
/// sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick reads the cached count table (rebuilt only when the membership version
/// changes), each member's count in its own thread's row and its view of the others, and
/// counts its call with a plain store. No lock, no allocation (a thread's first pick
/// claims its thread slot, once).
class LeastConnections final : public detail::CountingAlgorithm {
public:
    /// Periods a view of other threads' calls may serve (InFlightCount::begin_pick): 1, so
    /// only within the period of picks it was read in.
    static constexpr std::uint64_t view_max_age = 1;

    /// Binds the counts to the balancer's name. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the least loaded member (earliest on ties), counted as one more call in
    /// flight; `service_unavailable` when the list is empty, `internal_server_error` when
    /// memory ran out rebuilding the counter table.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;
};

}  // namespace rpclb::plugins
