// The client loops of the gray bench, over any stack (rpclb balancer, gRPC channel):
//   closed  `concurrency` asynchronous calls in flight; each completion issues the next;
//           latency from the call's issue;
//   open    calls issued at a fixed rate from one pacing thread, latency counted from each
//           call's intended send time (start + k / rate), so a client that falls behind or a
//           stall in the stack is not hidden (no coordinated omission).
// Both stop issuing at their deadline and end when the last call in flight completes.
#pragma once

#include "behaviour.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gray {

/// How one call ended, as the client saw it.
struct Reply {
    bool ok = false;
    int member = -1;              ///< index of the member that answered (or failed it); -1 unknown
    std::int64_t service_us = 0;  ///< the member's service time (0 for errors)
};

/// One stack under test. call() starts an asynchronous call and runs `done` exactly once,
/// on any thread, never inside call() itself. Thread safety: call() from any thread.
class Target {
public:
    virtual ~Target() = default;
    virtual void call(std::chrono::milliseconds timeout, std::function<void(Reply)> done) = 0;
};

/// One measured call.
struct Sample {
    double at_s = 0;          ///< intended send time, seconds from the loop's start
    std::int64_t latency_us;  ///< completion minus intended send time
    Reply reply;
};

/// Runs the closed loop for `duration`; returns every completed call.
std::vector<Sample> closed_loop(Target& target, int concurrency, std::chrono::milliseconds duration,
                                std::chrono::milliseconds timeout);

/// Runs the open loop at `rate` calls/s for `duration`; returns every completed call.
std::vector<Sample> open_loop(Target& target, double rate, std::chrono::milliseconds duration,
                              std::chrono::milliseconds timeout);

/// Order statistics of a set of samples (latencies of every call, errors included, in µs).
struct Stats {
    std::size_t calls = 0, errors = 0;
    double p50 = 0, p99 = 0, p999 = 0, max = 0;
    double mean = 0;
};

/// Stats of the samples whose `at_s` is in [from, to).
Stats stats_of(const std::vector<Sample>& samples, double from = -1, double to = 1e18);

}  // namespace gray
