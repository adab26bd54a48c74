// A function a node serves, and how it runs.
#pragma once

#include <rpclb/error_fwd.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <chrono>
#include <functional>
#include <optional>

namespace rpclb {

/// A registered function: takes the call's JSON array of arguments, returns a JSON value
/// or an ErrorMessage. Runs on the worker pool, or inline (HandlerOptions). An exception it throws becomes an
/// `internal_server_error` whose message is the exception's what(). Writing one needs
/// <rpclb/error.hpp> (ErrorMessage, CallResult) and <boost/json/array.hpp>.
using Handler = std::function<CallResult(const boost::json::array& args)>;

/// How a registered function runs.
struct HandlerOptions {
    /// Run the handler on the thread that read the request (a network thread), and write
    /// its answer from there, instead of handing it to the worker pool: no thread hand-off
    /// on the serving side, as gRPC's callback API and brpc's in-place handling do. The
    /// handler must not block: while it runs, no other frame of that connection (nor, with
    /// one network thread, of any connection) is read. Calls to this node from itself run
    /// it on the calling thread. Default false (the worker pool).
    bool run_inline = false;
    /// An inline run longer than this is counted in ClusterStats::slow_inline_runs and
    /// logged as a warning, once per function. Wall-clock time (a handler that blocks uses
    /// no CPU), so a run the kernel preempted on a busy machine counts too. Default 1 ms;
    /// at least 1 us (register_function throws std::invalid_argument otherwise); ignored
    /// unless run_inline.
    std::chrono::microseconds slow_threshold{1000};
};

/// The deadline of the call that the handler running on this thread serves: the time its
/// caller gives up (a request's timeout counted from its arrival here; a call from this
/// node to itself, from its start). nullopt outside a handler and in a cast's handler.
/// A call that the handler makes ends by this time too: its own deadline is the earlier of
/// its timeout and this (doc/how-to/route-calls.md "Deadlines"). Any thread; no lock.
std::optional<std::chrono::steady_clock::time_point> call_deadline() noexcept;

/// True when the caller of the call that the handler running on this thread serves has
/// given up on it: its deadline passed, the connection the request came on closed, or the
/// caller cancelled it (an explicit cancel, or a hedged call that another attempt answered).
/// A long handler checks it to stop early; its answer goes nowhere. The calls the handler
/// has under way, blocking or asynchronous, need no check: when the caller cancels or
/// the connection closes while the handler runs, they end at once with `request_timeout`
/// "cancelled" (Failure::cancelled), and a call made after that fails the same way
/// unsent (doc/how-to/route-calls.md "Deadlines"). False outside a handler. Any thread;
/// no lock.
bool call_cancelled() noexcept;

}  // namespace rpclb

namespace rpclb::detail {

/// The problem of a function's HandlerOptions, or nullopt: `slow_threshold` must be at
/// least 1 us. register_function throws its message(). Thread safety: pure function.
std::optional<OptionProblem> check(const HandlerOptions& options);

}  // namespace rpclb::detail
