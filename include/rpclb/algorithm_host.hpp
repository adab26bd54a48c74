// What a selection algorithm may use of the node that runs it.
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/config.hpp>
#include <boost/json/array.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace rpclb {

struct MemberSnapshot;

/// The node as one balancer's algorithm sees it: its group's members, calls to them, an
/// executor to run timers on, a way to serve a function to the other members, and the
/// telemetry bus. An algorithm gets it through `AlgorithmContext::host` at `init`; it is
/// all of the node a plugin reaches (not the Cluster), so what plugins depend on stays
/// small and the library can change behind it.
///
/// rpclb implements it, one per balancer (src/routing/balancer_host.cpp). It lives as
/// long as the balancer: it outlives the algorithm's `init`, its picks and its services
/// until their stop() has returned. Work that may complete later (a timer, a call's
/// completion) must not use it after its service has stopped: keep what such work needs
/// in a shared_ptr it holds, and have stop() tell it to touch nothing more (the least_cpu
/// poller, plugins/least_cpu/cpu_poller.cpp, is the model).
///
/// Thread safety: distinct objects safe; shared objects safe (every member may be called
/// from any thread, including the executor's and from inside a call's completion).
///
/// The layout of this class is part of the plugin ABI (RPCLB_PLUGIN_ABI_VERSION).
class BOOST_SYMBOL_VISIBLE AlgorithmHost {
public:
    /// A served function: takes the call's JSON array of arguments and returns a JSON
    /// value or an ErrorMessage (the same as rpclb::Handler).
    using Function = std::function<CallResult(const boost::json::array& args)>;

    /// The type-erased completion of a call: `void(CallResult)`.
    using CallCompletion = boost::asio::any_completion_handler<void(CallResult)>;

    virtual ~AlgorithmHost() = default;

    /// The current members of the balancer's group (never null; possibly empty), as the
    /// balancer learns them. Not the snapshot picks read (the balancer picks from a copy of
    /// its own, less the members it ejected), so state kept in it is not theirs. Takes the
    /// group table's mutex briefly: call it off the pick path.
    virtual std::shared_ptr<const MemberSnapshot> members() const = 0;

    /// The executor of the node's worker pool: build timers on it
    /// (`boost::asio::steady_timer timer(host.executor())`) and post short work to it. Its
    /// handlers must not block; it stops running them when the node stops (pending
    /// handlers are then destroyed without running, which must free what they hold).
    virtual boost::asio::any_io_executor executor() const = 0;

    /// The node's telemetry bus (doc/reference/telemetry.md); it lives as long as the node,
    /// which is longer than the host.
    virtual TelemetryBus& telemetry() noexcept = 0;

    /// Serves `module.function` on this node to the other members (and to this node's own
    /// calls); replaces an earlier registration of the same name, by anyone. The function
    /// runs on the worker pool and stays registered as long as the node, after the
    /// balancer and its plugin object are gone: what it captures must stay valid that long
    /// (a plugin serving its own code pins itself with rpclb::pin_this_plugin). An
    /// exception it throws becomes `internal_server_error`. Throws std::bad_alloc.
    virtual void serve(std::string module, std::string function, Function function_body) = 0;

    /// Calls `module.function(args...)` on the member `node` (any node of the cluster,
    /// this one included) without blocking, as Cluster::async_call does for a direct call:
    /// completion signature `void(CallResult)`; the handler runs on its associated
    /// executor (default: executor()), never inline; `timeout` is the request's deadline
    /// (1 ms .. 4294967295 ms; default 10 s). Errors: those of Cluster::call for a direct
    /// call: `request_timeout` when the deadline passes, `service_unavailable`
    /// "noconnection" when `node` is not connected or its connection drops, `not_found`
    /// when it serves no such function, the function's own ErrorMessage as is, and
    /// `bad_request` at once for a timeout outside its range. Any Asio
    /// completion token works (a callback, `use_future`, `use_awaitable`, `deferred`).
    template <class CompletionToken>
    auto async_call(std::string node, std::string module, std::string function, boost::json::array args,
                    std::chrono::milliseconds timeout, CompletionToken&& token) {
        return boost::asio::async_initiate<CompletionToken, void(CallResult)>(
            [this](CallCompletion handler, std::string n, std::string m, std::string f, boost::json::array a,
                   std::chrono::milliseconds t) {
                initiate_call(std::move(n), std::move(m), std::move(f), std::move(a), t, std::move(handler));
            },
            token, std::move(node), std::move(module), std::move(function), std::move(args), timeout);
    }

protected:
    AlgorithmHost() = default;
    AlgorithmHost(const AlgorithmHost&) = delete;
    AlgorithmHost& operator=(const AlgorithmHost&) = delete;

    /// Starts the call of async_call() and completes `handler` as it describes.
    virtual void initiate_call(std::string node, std::string module, std::string function,
                               boost::json::array args, std::chrono::milliseconds timeout,
                               CallCompletion handler) = 0;
};

}  // namespace rpclb
