// A function a node serves, and how it runs.
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <boost/json/array.hpp>

#include <chrono>
#include <functional>
#include <optional>

namespace rpclb {

/// A registered function: takes the call's JSON array of arguments, returns a JSON value
/// or an ErrorMessage. Runs on the worker pool, or inline (HandlerOptions). An exception it throws becomes an
/// `internal_server_error` whose message is the exception's what().
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

}  // namespace rpclb

namespace rpclb::detail {

/// The problem of a function's HandlerOptions, or nullopt: `slow_threshold` must be at
/// least 1 us. register_function throws its message(). Thread safety: pure function.
std::optional<OptionProblem> check(const HandlerOptions& options);

}  // namespace rpclb::detail
