// What a gray-bench member does with each call: the injected behaviour shared by the rpclb
// members and the gRPC servers, so both stacks serve exactly the same way.
//
// A call to a Member goes through, in order:
//   1. pause     while the member is paused (every `pause_every_s` seconds it stops for
//                `pause_ms`, counted from the member's start) the call waits for the end of
//                the pause; a call whose caller's deadline has passed by then is dropped;
//   2. failure   with probability `fail_rate` it is answered at once with an error;
//   3. capacity  it waits, first come first served, for one of `capacity` service slots
//                (0 = no limit); a call still waiting at its caller's deadline leaves the
//                queue unserved (as a server drops a request its caller gave up on), so a
//                backlog does not outlive the calls that made it;
//   4. service   it holds the slot for the service time: `service_ms`, fixed or drawn from
//                an exponential distribution of that mean, times `cold_factor` during the
//                member's first `cold_s` seconds, plus `stall_ms` with probability
//                `stall_rate`;
//   5. latency   it waits `extra_ms` more without holding a slot (network-like latency),
//                then, if the member is paused by then, until the pause ends.
// Every wait is a sleep of the serving thread: a member spends no CPU on service time, so
// that ten or more of them fit on a 2-core machine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace gray {

using Clock = std::chrono::steady_clock;

/// The behaviour injected into one member (see the file comment for the order of steps).
struct Behaviour {
    double service_ms = 10;    ///< mean service time
    bool exponential = false;  ///< service time drawn from an exponential distribution
    double extra_ms = 0;       ///< latency added after the service, outside the slot
    double pause_every_s = 0;  ///< period of the pauses; 0 = never paused
    double pause_ms = 0;       ///< length of each pause
    double fail_rate = 0;      ///< share of calls answered at once with an error
    int capacity = 0;          ///< calls served at once; 0 = unlimited
    double cold_s = 0;         ///< length of the cold start, from the member's start
    double cold_factor = 1;    ///< service time multiplier during the cold start
    double stall_rate = 0;     ///< share of calls that stall
    double stall_ms = 0;       ///< length of a stall (added to the service time)

    /// `key=value,...` (every field), as passed on a member's command line.
    std::string to_text() const;
    /// Inverse of to_text(); missing keys keep their defaults. Throws std::runtime_error on
    /// an unknown key or a bad number.
    static Behaviour from_text(std::string_view text);
};

/// How a call ended at the member.
struct Served {
    bool ok = true;              ///< false: answered with the injected error, or expired
    bool expired = false;        ///< its deadline passed while it waited for a slot
    std::int64_t service_us = 0; ///< time the call held a service slot
};

/// One member's behaviour, in effect from its construction. Thread safety: serve() may be
/// called from any number of threads at once.
class Member {
public:
    Member(Behaviour behaviour, std::uint64_t seed);
    /// Serves one call whose caller gives up at `deadline`, blocking the calling thread for
    /// the whole of it. `cancelled` (if set) says the caller gave up early: a call waiting
    /// for a slot then stops waiting (expired), as an application that honours
    /// cancellation does.
    Served serve(Clock::time_point deadline, const std::function<bool()>& cancelled = {});
    const Behaviour& behaviour() const noexcept { return b_; }
    /// Calls holding or waiting for a slot ÷ `capacity` (1.0 = every slot busy, above 1 a
    /// queue), averaged over time with a time constant of load_tau, as an application that
    /// knows its capacity reports it (a CPU's utilization is such an average too); 0
    /// without a capacity.
    double utilization();
    static constexpr std::chrono::milliseconds load_tau{250};

private:
    void wait_while_paused();
    double draw_uniform();

    Behaviour b_;
    Clock::time_point start_;
    // A call waiting for a slot; a released slot goes to the first in the queue.
    struct Waiter {
        bool granted = false;
    };
    bool acquire(Clock::time_point deadline, const std::function<bool()>& cancelled);
    void release();

    std::mutex mutex_;
    std::condition_variable granted_;
    void settle();  // under mutex_: folds the level since settled_at_ into average_level_
    int free_slots_;              // under mutex_
    Clock::time_point settled_at_;  // under mutex_
    double average_level_ = 0.0;    // under mutex_
    std::deque<Waiter*> queue_;   // under mutex_, first come first
    std::uint64_t rng_;           // splitmix64 state, under mutex_
};

}  // namespace gray
