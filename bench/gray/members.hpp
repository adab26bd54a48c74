// The member processes of the gray bench (this binary run again with an internal flag) and
// the client side of each stack. A member is told what to be by one JSON argument:
//   --rpclb-member {"index":I,"name":"gm3@127.0.0.1","behaviour":"...","seeds":["127.0.0.1:P"],
//                   "balancers":[{"name":"gray_round_robin","algorithm":"round_robin","opts":{}}],
//                   "ejection":true,"plugin_dir":"..."}
//       an rpclb Cluster that hosts every balancer listed (one without "algorithm" is started
//       with LoadBalancerOptions' default algorithm) and serves gray.work with the member's
//       Behaviour on its worker pool; "ejection":false turns outlier detection off;
//   --grpc-member {"index":I,"behaviour":"...","port":P}
//       a gRPC C++ callback-API server (port 0 = any) of gray.Gray/Work that hands each call
//       to a pool of threads serving it with the same Behaviour.
// Both answer a call with the member's index and the time the call held a service slot, and
// print `PORT N` once they listen; both stop when their stdin closes.
#pragma once

#include "load.hpp"

#include <rpclb/call_options.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gray {

/// Threads that serve calls in a member: more than calls can be in flight at one member in
/// any scenario, so that a call waits only for what its Behaviour says (the capacity).
inline constexpr int member_threads = 96;

int run_rpclb_member(const std::string& spec);
int run_grpc_member(const std::string& spec);

/// True when this binary was built with the gRPC side (RPCLB_BUILD_GRAY_BENCH).
bool grpc_built();

/// The client node of the rpclb stacks: a Cluster with ClusterOptions::client that joins
/// through `seeds`. Thread safety: target() and wait_members() from any thread.
class RpclbClient {
public:
    RpclbClient(std::vector<std::string> seeds, std::string plugin_dir);
    ~RpclbClient();
    /// Waits until balancer `balancer` has `count` members; throws after 20 s.
    void wait_members(const std::string& balancer, std::size_t count);
    /// Calls of gray.work routed through balancer `balancer`, idempotent and hedged when
    /// `hedging` is set.
    std::unique_ptr<Target> target(const std::string& balancer, std::optional<rpclb::Hedging> hedging = std::nullopt);
    /// Extra attempts (hedges) sent through balancer `balancer` so far.
    std::uint64_t hedges(const std::string& balancer);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Calls of gray.Gray/Work on one gRPC channel over `members` ((index, port) pairs) with
/// the round_robin LB policy. Unreachable ports are allowed (a member that starts later).
std::unique_ptr<Target> make_grpc_target(const std::vector<std::pair<int, unsigned short>>& members);

}  // namespace gray
