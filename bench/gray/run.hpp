// The scenarios of the gray bench and how one is run: which members, with what injected
// behaviour, which client loops at what rate, and the measurements of each stack
// (bench/README.md "gray").
#pragma once

#include "members.hpp"

#include <rpclb/call_options.hpp>

#include <boost/json/object.hpp>

#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gray {

/// Every scenario, in the order `--scenario all` runs them.
inline const char* const all_scenarios[] = {"healthy", "slow_member", "pauses", "stalls", "overload",
                                            "fast_fail", "heterogeneous", "cold_member"};

/// One rpclb stack: balancer `gray_<label>` with `algorithm` (none: LoadBalancerOptions'
/// default) and `opts` as its algorithm_opts.
struct Alg {
    std::string label;
    std::optional<std::string> algorithm;
    boost::json::object opts;
    /// The stack's calls are idempotent and hedged so (`hedge_delay_ms` and
    /// `hedge_attempts` in its :{json}, taken out of the algorithm's options).
    std::optional<rpclb::Hedging> hedging;
    std::string balancer() const { return "gray_" + label; }
};

/// The command line.
struct Options {
    std::string scenario = "all";
    int runs = 5;
    bool runs_given = false;
    bool quick = false;
    bool grpc = true;
    std::vector<Alg> algs;
    boost::json::object common_opts;  // --balancer-opts, under each algorithm's own
    std::optional<bool> ejection;     // --ejection on|off: in place of each scenario's choice
    std::optional<int> slow_start_ms; // --slow-start-ms: in place of each scenario's window
};

/// What one scenario (or one variant of it) runs.
struct Setup {
    std::string name;
    std::vector<Behaviour> members;
    bool ejection = true;  // outlier detection at its defaults; false: all detectors off
    int slow_start_ms = 0; // every balancer's slow-start window; 0 = off
    int bad = -1;          // the member whose share of calls is reported; -1 none
    double rate = 0;       // open loop, calls/s
    int concurrency = 0;   // closed loop; 0 = no closed loop
    double duration_s = 3;
    std::chrono::milliseconds timeout{2000};
    std::optional<Behaviour> cold;  // a member started during the open loop
    double cold_join_s = 0;
};

/// The measurements of one stack in one setup of one run.
struct StackRun {
    std::vector<Sample> open, closed;
    double join_s = -1;  // the cold member's start, seconds into the open loop
    // Extra attempts (hedges) sent ÷ calls, over both loops; nan without hedging.
    double extra_fraction = std::numeric_limits<double>::quiet_NaN();
};

/// The label of the gRPC stack.
inline const std::string grpc_label = "grpc_round_robin";

/// The setups a scenario needs (a ratio's baseline included), in run order; --quick
/// shortens the loops.
std::vector<Setup> setups_for(const std::string& scenario, bool quick);

/// Starts the setup's members, runs every stack of `o` in turn (rpclb balancers, then gRPC)
/// and stops them. A stack that fails is reported on stderr and left out of the result;
/// members that fail to start throw.
std::map<std::string, StackRun> run_setup(const Setup& setup, const Options& o, int run);

}  // namespace gray
