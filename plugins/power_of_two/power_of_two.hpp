// The PowerOfTwo selection algorithm ("power of two random choices").
#pragma once

#include "../failure_cost.hpp"
#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <cstdint>
#include <string>

namespace rpclb::plugins {

/// Draws two distinct members at random and picks the one with the lower load
/// (predecessor-compatibility §2.5): its calls in flight plus its failure load, the
/// member's recent counted failures each decaying over about `failure_penalty`
/// (doc/reference/algorithms.md, "Failures"), so that a member that fails fast never looks
/// idle. A tie goes to the first drawn, itself a uniformly random one of the two. A single
/// member is always picked.
///
/// With option `reported_load` true, two members that both reported their load within
/// `load_max_age_ms` (integer ms, default 10,000) are compared by the utilization they
/// reported (LoadReport::utilization(): the share of their capacity in use, counted over
/// every caller) plus their failure load, and by calls in flight when those are equal; a
/// member without a recent report is compared by calls in flight.
///
/// Options: `failure_penalty` (ms, integer 0 … 86,400,000, default 1,000; 0: failures cost
/// nothing); `seed` (integer ≥ 0: a deterministic generator shared by the instance's
/// threads, Draws, for tests; default: each thread's own); `test_now_ms` (integer ≥ 1: the
/// clock frozen there, for tests). Bad options throw std::invalid_argument naming the
/// option at `init`.
///
/// Thread safety: shared objects safe for concurrent picks and releases once `init` has
/// returned. A pick is one draw and a read of two counts, and of two failure loads while
/// some member failed in the last 40 × `failure_penalty`: no lock (but the first pick on a
/// snapshot that reads loads, and the first counted failure on a snapshot, which build its
/// table of loads), no allocation.
class PowerOfTwo final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities =
        capability::in_flight | capability::feedback | capability::snapshot_state | capability::reported_load;

    /// Reads the options; throws std::invalid_argument naming a bad one.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The less loaded of two distinct random members; `service_unavailable` for an empty
    /// list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    /// A counted failure adds 1 to the member's failure load.
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;

private:
    std::string balancer_;
    Draws draws_;
    FailureLoads failures_;
    bool reported_ = false;
    std::int64_t load_max_age_ms_ = 0;
};

}  // namespace rpclb::plugins
