// The LeastConnections selection algorithm.
#pragma once

#include "../failure_cost.hpp"
#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace rpclb::plugins {

/// Picks the member with the lowest load: its calls in flight from this node through this
/// balancer (predecessor-compatibility §2.4; MemberSnapshot::in_flight, which the balancer
/// counts) plus its failure load, the member's recent counted failures each decaying over
/// about `failure_penalty` (doc/reference/algorithms.md, "Failures"), so that a member that
/// fails fast never looks idle. A tie goes to a uniformly random one of the tied members:
/// a fresh balancer over [a, b, c] picks the three in a random order, and one-call clients
/// spread. Choosing and counting are two steps, so two concurrent picks may choose the same
/// member.
///
/// Options: `failure_penalty` (ms, integer 0 … 86,400,000, default 1,000; 0: failures cost
/// nothing); `seed` (integer ≥ 0: deterministic tie draws, for tests); `test_now_ms`
/// (integer ≥ 1: the clock frozen there, for tests). Bad options throw
/// std::invalid_argument naming the option at `init`.
///
/// Thread safety: shared objects safe for concurrent picks and releases once `init` has
/// returned. A pick reads every member's count once, and its failure load too while some
/// member failed in the last 40 × `failure_penalty`; a tie takes one draw and a second
/// pass. No lock (but the first pick on a snapshot that reads loads, and the first
/// counted failure on a snapshot, which build its table of loads), no allocation.
class LeastConnections final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::in_flight | capability::feedback | capability::snapshot_state;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The least loaded member; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    /// A counted failure adds 1 to the member's failure load.
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;

private:
    std::string balancer_;
    Draws draws_;
    FailureLoads failures_;
};

}  // namespace rpclb::plugins
