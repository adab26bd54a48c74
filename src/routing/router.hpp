// One call's life: short-circuits, pick, send, re-pick after `draining`, the no-route
// retry, release (internal).
#pragma once

#include <rpclb/call_options.hpp>
#include <rpclb/error.hpp>
#include <rpclb/node_filter.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/array.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rpclb::detail {

class Mesh;
class CallChannels;
class RpcServer;
class BalancerRegistry;
class CallOperation;

/// What the Router needs of a node's options: its name and the defaults of CallOptions.
/// Built by Cluster from the ClusterOptions fields of the same names, which document
/// them. Plain data.
struct RouterOptions {
    std::string name;  ///< this node, `short@host`
    bool call_directly = false;
    bool retry = true;
    std::size_t retry_count = 5;
    std::vector<std::string> excluded_node_patterns;
};

/// What one call or cast asks for. `filter` set = the random-node helpers; else a
/// non-empty `options.load_balancer` = load-balanced; else direct to `node`.
struct CallSpec {
    enum class Kind { call, cast };
    Kind kind = Kind::call;
    std::string node;
    std::optional<NodeFilter> filter;
    std::string module;
    std::string function;
    boost::json::array args;
    CallOptions options;
};

/// Routes calls and casts (doc/architecture.md "Calls"): each is a CallOperation that
/// lives in shared_ptrs held by whatever it waits on (a connection's pending entry, a
/// retry timer, a worker task) and completes exactly once.
///
/// Thread safety: every member may be called from any thread.
class Router {
public:
    using Done = std::function<void(CallResult)>;

    Router(RouterOptions options, boost::asio::io_context& ioc, Mesh& mesh, CallChannels& channels,
           RpcServer& rpc, BalancerRegistry& balancers, TelemetryBus& bus);

    /// Gives the router the shared_ptr its operations hold (an alias of the node's).
    void set_self(std::weak_ptr<Router> self) { self_ = std::move(self); }

    /// Routes `spec`; `done` runs exactly once (a cast completes with a null value), on a
    /// network or worker thread, or, with `inline_local`, on the calling thread when the
    /// first attempt runs the handler here. Returns the operation, for cancel().
    std::shared_ptr<CallOperation> start(CallSpec spec, Done done, bool inline_local = false);
    /// Completes `operation` now with Failure::cancelled, unless it completed already. A
    /// request already sent is still answered (the answer is dropped) or times out there.
    static void cancel(const std::shared_ptr<CallOperation>& operation);
    /// Runs `spec` and waits for it (never on a network thread: that fails at once).
    CallResult run_blocking(CallSpec spec, bool on_network_thread);

    /// Runs `then(true)` after `delay` on the retry strand, or `then(false)` at once when
    /// the node stops first (see stop()); wake() ends the wait early only when `wakeable`
    /// (a hedge's delay is not). Never blocks.
    void after(std::chrono::milliseconds delay, std::function<void(bool fired)> then, bool wakeable = true);
    /// The node is stopping: every wait of after() ends with `then(false)`, and no call
    /// waits for a route again.
    void stop();
    /// Ends every wakeable wait of after() now, with `then(true)`, as if its delay had
    /// passed: a call waiting for a route looks again (Mesh::set_on_cookie_refused).
    void wake();
    bool stopping() const noexcept { return stopping_.load(); }
    /// The node is closing its connections (after its drain): from here a call or cast to
    /// another node fails at once with `node_stopping` instead of being queued on a
    /// connection whose strand may never run again. Calls made while the node drains
    /// (a handler calling on) still go out.
    void stop_sending() noexcept { sending_stopped_ = true; }
    bool sending_stopped() const noexcept { return sending_stopped_.load(); }

    const RouterOptions& options() const noexcept { return options_; }
    Mesh& mesh() noexcept { return mesh_; }
    CallChannels& channels() noexcept { return channels_; }
    RpcServer& rpc() noexcept { return rpc_; }
    BalancerRegistry& balancers() noexcept { return balancers_; }
    TelemetryBus& bus() noexcept { return bus_; }

private:
    const RouterOptions options_;
    Mesh& mesh_;
    CallChannels& channels_;
    RpcServer& rpc_;
    BalancerRegistry& balancers_;
    TelemetryBus& bus_;
    std::weak_ptr<Router> self_;
    // No-route retry timers, all on one strand so that arming and cancelling never race.
    boost::asio::strand<boost::asio::io_context::executor_type> retry_strand_;
    // The waits of after(), each with whether wake() ends it.
    std::map<std::shared_ptr<boost::asio::steady_timer>, bool> retry_timers_;
    std::set<const boost::asio::steady_timer*> woken_;  // cancelled by wake(), not by stop()
    std::atomic<bool> stopping_{false};
    std::atomic<bool> sending_stopped_{false};
};

}  // namespace rpclb::detail
