// One node of an rpclb cluster: identity, mesh, groups, RPC, balancers.
//
// This header declares Cluster and names the types of its members; the headers that
// define them are included where they are used: <rpclb/error.hpp> for ErrorMessage and
// the value of a Result, <boost/json/array.hpp> for a call's arguments,
// <rpclb/cluster_async.hpp> for the async_* members, <rpclb/load_balancer.hpp>,
// <rpclb/groups.hpp>, <rpclb/telemetry.hpp> and <rpclb/plugin_registry.hpp> for the
// objects Cluster hands out, <boost/asio/ip/tcp.hpp> for listen_endpoint() and
// <boost/asio/any_io_executor.hpp> for the executors. <rpclb/typed.hpp> includes them all.
#pragma once

#include <rpclb/call_options.hpp>
#include <rpclb/cluster_options.hpp>
#include <rpclb/error_fwd.hpp>
#include <rpclb/handler.hpp>
#include <rpclb/node_filter.hpp>
#include <rpclb/pick_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Asio types that Cluster's declarations only name, declared here so that including this
// header stays cheap (doc/explanation/header-cost.md). A file that uses them includes
// their Asio header.
#if defined(BOOST_ASIO_USE_TS_EXECUTOR_AS_DEFAULT)
#include <boost/asio/any_io_executor.hpp>  // an alias then, which can't be declared ahead
#endif
namespace boost::asio {
#if !defined(BOOST_ASIO_USE_TS_EXECUTOR_AS_DEFAULT)
class any_io_executor;
#endif
template <typename... Signatures>
class any_completion_handler;
namespace ip {
class tcp;
template <typename InternetProtocol>
class basic_endpoint;
}  // namespace ip
}  // namespace boost::asio

namespace rpclb {

class Groups;
class LoadBalancer;
struct LoadBalancerOptions;
class PluginRegistry;
class TelemetryBus;

/// Counters a node keeps about its own health.
struct ClusterStats {
    std::uint64_t bad_frames = 0;       ///< frames refused: by the codec, or past a link's membership budget
    std::uint64_t auth_failures = 0;    ///< handshakes that failed the cookie check
    std::uint64_t peers_lost = 0;       ///< established peers that went away
    std::uint64_t slow_inline_runs = 0; ///< inline handler runs over their slow_threshold
    /// Frames written to peers (requests, answers, casts, membership, handshake).
    std::uint64_t frames_sent = 0;
    /// WebSocket messages written to peers: fewer than `frames_sent` when frames that
    /// queued up behind a write went out together (ClusterOptions::max_batch_frames).
    std::uint64_t messages_sent = 0;
    /// Requests and casts refused because their connection's send queue was full
    /// (ClusterOptions::max_send_queue_bytes).
    std::uint64_t overloaded = 0;
    /// Entries in the table of known nodes (learnt from connections and gossip, clients
    /// excluded): the nodes connected now plus those this node still redials (of two
    /// nodes, the one whose name sorts first dials). A lost peer this node doesn't redial
    /// is dropped at once, one it redials after 30 failed dials in a row, so the table
    /// shrinks back as names come and go. A size, not a counter.
    std::uint64_t known_nodes = 0;
    /// Nodes that refused this node's cookie when it dialled them. Each refusal is final:
    /// that address is not dialled again (a refusal also counts in auth_failures).
    std::uint64_t cookie_refusals = 0;
    /// Connections refused during the TLS handshake, either side: a plaintext peer
    /// against a TLS node (or the reverse), or a certificate that failed verification
    /// (ClusterOptions::tls). Each is logged with its reason; dials are retried.
    std::uint64_t tls_failures = 0;
    /// Accepted connections closed at once, unread, because this node already held 64
    /// connections whose cookie handshake was not done (doc/how-to/secure-a-cluster.md,
    /// "Before authentication").
    std::uint64_t unauthenticated_refused = 0;
    /// Connections closed because the peer sent a WebSocket message over 8 KiB
    /// (detail::max_handshake_message) before its cookie handshake was done. Its payload
    /// is not buffered: the frame's header is enough to refuse it.
    std::uint64_t oversize_before_handshake = 0;
    /// Connections a peer refused or dropped because an older live incarnation of this
    /// node's name holds it there (doc/architecture.md "Restarts and one name, one node").
    std::uint64_t name_conflicts = 0;
    /// Blocking calls this node sent on a call channel (ClusterOptions::call_channels).
    std::uint64_t channel_calls = 0;
    /// Call channels open now: dialled by this node, plus accepted from peers. A size.
    std::uint64_t channels_open = 0;
    /// Requests from peers that waited for a worker past their caller's timeout (carried
    /// in the request, counted from its arrival here) and were therefore not run: the
    /// caller has given up on them, so running them would only put this node further
    /// behind (gRPC and brpc drop such requests too). Each is answered with
    /// `request_timeout`, which the caller drops as late. Also counted, and not run nor
    /// answered: requests whose connection closed while they waited for a worker (the
    /// caller's call failed at once when it dropped, e.g. a killed caller's backlog), and
    /// requests their caller cancelled before a worker started them (answered
    /// `request_timeout` "not run: the caller cancelled it").
    /// Inline handlers run as soon as their request is read, so theirs never count.
    std::uint64_t expired_requests = 0;
    /// Requests from peers whose `traceparent` was malformed (wrong version, length, a
    /// character that is not lowercase hex, an all-zero id): each was served as the start
    /// of a new trace, never refused (doc/how-to/route-calls.md "Trace context").
    std::uint64_t bad_traceparents = 0;
};

/// One node of a cluster.
///
/// Start it, register functions, start balancers, make calls; stop() (or the destructor)
/// closes every connection, fails pending calls with `service_unavailable` and joins the
/// threads.
///
/// Thread safety: distinct objects safe; shared objects safe (every public member may be
/// called from any thread, except that a blocking call() from a network thread fails at
/// once with `internal_server_error` instead of deadlocking).
class Cluster {
public:
    /// Completes `options` with with_defaults() (an empty cookie from `RPCLB_COOKIE`, a
    /// client node's missing name generated), then validates them; options() and name()
    /// give the completed values. Throws std::invalid_argument naming the bad option.
    explicit Cluster(ClusterOptions options);
    ~Cluster();

    Cluster(const Cluster&) = delete;
    Cluster& operator=(const Cluster&) = delete;

    /// Opens the listener, starts the threads and dials the seeds. Returns at once (does
    /// not wait for peers). Throws std::system_error if the address can't be bound.
    void start();

    /// Stops every balancer (leave, drain its calls), waits up to `stop_timeout` for calls
    /// this node is serving, closes every connection (after their queued replies), fails
    /// pending calls, joins the threads. Idempotent; must not be called from a handler or network thread.
    void stop();

    /// `short@host`.
    const std::string& name() const noexcept;

    /// The options the node was built with (validated; never changes).
    const ClusterOptions& options() const noexcept;

    /// Id drawn at construction: the start time in milliseconds then random bits (20 hex
    /// digits), so incarnations sort by start time; a restarted node has a new one.
    const std::string& incarnation() const noexcept;

    /// The bound listener (with the chosen port); nullopt for a client node or before start.
    std::optional<boost::asio::ip::basic_endpoint<boost::asio::ip::tcp>> listen_endpoint() const;

    /// Names of the nodes with an established connection, ascending.
    std::vector<std::string> connected_nodes() const;

    /// When this node is shut out of its cluster by cookie refusals (no peer connected,
    /// and every seed and every node it knows of refused its cookie), the name of a node
    /// that refused it; nullopt otherwise (also before start). Refusals are final, so a
    /// node shut out stays so until it restarts with the right cookie: calls from it fail
    /// at once with the refusal, and an admin listener's `/readyz` answers 503. Thread
    /// safety: any thread.
    std::optional<std::string> cookie_refused_by() const;

    /// One name, one live node: when this node's name is held at its peers by an older
    /// live incarnation (another process started earlier under the same name), they refuse
    /// this one. It keeps trying for twice `idle_timeout` (a holder that crashed unseen is
    /// declared dead by then, and the restart gets in), then gives the name up: it logs an
    /// error naming the conflict, closes its links, dials no one, its calls and
    /// wait_for_members() fail at once with Failure::name_taken, and every StopSignal wait
    /// of the process ends, so run_until_signalled() stops the node and returns. This
    /// returns that error's text once it has; nullopt otherwise. Thread safety: any thread.
    std::optional<std::string> name_taken() const;
    /// Runs `handler` (on a network thread, once) when this node gives up its name (see
    /// name_taken()), with the same text, before StopSignal waits end; none is needed for
    /// the node to stop (run_until_signalled). It must not call stop() itself (post that to
    /// another thread). Thread safety: any thread.
    void on_name_lost(std::function<void(const std::string&)> handler);

    /// Sets the load this node reports besides its worker pool's (gRPC ORCA's application
    /// utilization): every answer this node sends from now on, and every answer to a
    /// peer's probe, carries it, and balancers that weigh reported load
    /// (doc/reference/algorithms.md) weigh it instead of the busy share of the worker pool.
    ///
    /// @param load A finite number in [0, 1e9]; 0 (the default) reports none, so the busy
    /// share counts again. A scale of 0 to 1 (1: fully loaded) matches the busy share.
    ///
    /// Errors: throws std::invalid_argument for NaN, an infinity, a negative number or one
    /// above 1e9, naming the value; the reported load is then unchanged.
    ///
    /// Thread safety: any thread; no lock (one atomic store), so a handler may call it.
    void report_load(double load);

    /// Round trip of the failure detector's last direct probe of connected node `node`
    /// that it answered: a WebSocket ping over the link and its pong (RFC 6455, section
    /// 5.5), so it includes the peer's network thread. Each member is probed once per
    /// round of the detector (doc/explanation/failure-detection.md). nullopt when `node`
    /// is not connected or has not answered a probe yet. Thread safety: any thread.
    std::optional<std::chrono::microseconds> keepalive_rtt(std::string_view node) const;

    /// Reads the TLS certificate, key and CA files of options().tls again (the same
    /// paths; their content may have changed) and, when they load whole, makes them this
    /// node's credentials: every connection made from then on, dialled or accepted,
    /// presents the new certificate and verifies its peer against the new CA. Established
    /// links keep running on the credentials they were made with. This is how a node
    /// takes a renewed certificate or a new CA without a restart; `rpclb-node` does it on
    /// SIGHUP and on the admin command `reload_tls` (doc/how-to/secure-a-cluster.md,
    /// "Rotate certificates and CAs").
    ///
    /// The files are checked as the constructor checks them (detail::check_tls). When one
    /// fails, nothing changes: the node keeps the credentials it had and goes on serving.
    /// Every outcome is logged (channel `mesh`: info on success, warning on failure).
    ///
    /// @return nothing on success. Errors: `bad_request` when a file fails to load (the
    /// message names the field and the file, as `tls.key "/etc/n.key" does not match the
    /// certificate in tls.cert ...`; details hold `node` and `field`), or when TLS is off
    /// on this node (no `tls.cert`: TLS cannot be turned on or off while a node runs).
    ///
    /// Thread safety: any thread, concurrently with calls and with other reloads (each
    /// one builds a complete context and swaps it in under a short lock; the last swap
    /// wins). It reads files, so avoid calling it from a network thread.
    Result<void> reload_tls();

    /// The replicated groups.
    Groups& groups() noexcept;

    /// The plugin loader (search path from options, environment, install directory).
    PluginRegistry& plugins() noexcept;

    /// Health counters.
    ClusterStats stats() const noexcept;

    /// The node's telemetry bus: `rpc.*` around every call and cast, `node_selected*`,
    /// `membership.*`, `drain.*`, `supervisor.restart`, `plugin.*`, `least_cpu.poll.*`
    /// (doc/reference/telemetry.md). Lives as long as the Cluster.
    TelemetryBus& telemetry() noexcept;

    /// Registers `module.function`; replaces an existing registration. Any thread.
    /// Throws std::invalid_argument when `options.slow_threshold` is under 1 us.
    void register_function(std::string module, std::string function, Handler handler,
                           HandlerOptions options = {});

    /// Calls `module.function(args...)` on `node` and waits for the result. A thin layer
    /// over async_call(): only the calling thread blocks.
    ///
    /// With `options.load_balancer` set, `node` is ignored and the balancer routes (doc/architecture.md
    /// "how a call flows"): `call_directly` or a `local()` algorithm (call_direct) runs the
    /// handler here; otherwise the algorithm picks a member, the balancer's drainer counts
    /// the call, and the algorithm's release hears how it ended when it completes. When the group is
    /// empty the call waits `retry_sleep` and tries again, `retry_count` times
    /// (predecessor-compatibility §4.1; the only case ever retried). A member that answers
    /// `draining` (it is leaving the group and never ran the call) is replaced by another
    /// pick, at most 16 times. A call to the local node runs the handler in the calling
    /// thread, without the network.
    ///
    /// Errors (doc/architecture.md "Errors"): `request_timeout` "timeout" when the
    /// deadline passes; `service_unavailable` "noconnection" at once when the node is
    /// unknown, not connected, saying bye, or its connection drops while waiting; `not_found`
    /// when the target has no such function; `bad_request` for a request over the size limit;
    /// `internal_server_error` with the exception text when the handler threw; a handler's
    /// own ErrorMessage as is; `service_unavailable` "no members registered" {"load_balancer"}
    /// when the retries ran out; `service_unavailable` "node stopping" when this node stops
    /// while the call waits for a route, and for any call to another node (direct, routed
    /// or random-node) made after stop(). Details always name node, module and function.
    CallResult call(std::string_view node, std::string_view module, std::string_view function,
                    boost::json::array args, const CallOptions& options = {});
    /// call() with no arguments (an empty array) and default options.
    CallResult call(std::string_view node, std::string_view module, std::string_view function);

    /// A load-balanced call: `options.load_balancer` names the balancer (required).
    /// Errors besides call()'s: `service_unavailable` "no members registered" with details
    /// {"load_balancer"} when the balancer has no members (or is unknown), and
    /// `service_unavailable` naming the algorithm when its plugin can't be loaded.
    CallResult call(std::string_view module, std::string_view function, boost::json::array args,
                    const CallOptions& options);

    /// Fire-and-forget (predecessor-compatibility §1.5). Returns once the request is
    /// queued; a cast to an unknown or unconnected node is `service_unavailable`; a
    /// load-balanced cast with no members gives the balancer error. Handler errors are
    /// logged at debug, not returned. It blocks while a load-balanced cast waits for
    /// members (the no-route retry), so, like call(), it fails at once from a network
    /// thread (an inline handler or an inline completion) with `internal_server_error`
    /// (Failure::would_deadlock): use async_cast there.
    Result<void> cast(std::string_view node, std::string_view module, std::string_view function,
                      boost::json::array args, const CallOptions& options = {});
    /// cast() with no arguments (an empty array) and default options.
    Result<void> cast(std::string_view node, std::string_view module, std::string_view function);

    /// Asynchronous call(): the same routing, errors, no-route retry and re-selection,
    /// with every wait on a timer (no thread is blocked). Completion signature
    /// `void(CallResult)`; the handler runs on its associated executor (default: the
    /// worker pool; see CallOptions::run_completion_inline for the network thread), never
    /// inside async_call() itself, and that executor counts outstanding work until it
    /// does (a `bind_executor(ioc, handler)` keeps `ioc.run()` running until the call
    /// completes). Any Asio completion token works: a callback, `boost::asio::use_future`,
    /// `boost::asio::use_awaitable`, `boost::asio::deferred`.
    ///
    /// Cancellation: a handler with a cancellation slot (`bind_cancellation_slot`, or a
    /// coroutine's) may cancel the call with any cancellation type; it then completes at
    /// once with `request_timeout` "cancelled" (reason Failure::cancelled). A request
    /// already sent on the mesh link is cancelled there too: not started if it still waits
    /// for a worker, else its handler sees call_cancelled(); its answer is dropped. Emit
    /// the signal from the handler's executor (Asio's rule for cancellation slots). Started
    /// inside a handler that runs on the worker pool, the call is cancelled in the same way,
    /// with no slot, when the caller of that handler's call cancels it or its connection
    /// closes while the handler runs; started after that, it completes so at once, unsent
    /// (doc/how-to/route-calls.md "Deadlines").
    template <class CompletionToken>
    auto async_call(std::string node, std::string module, std::string function,
                    boost::json::array args, CallOptions options, CompletionToken&& token);

    /// A load-balanced async_call(): `options.load_balancer` names the balancer (required;
    /// without it the call completes with `bad_request`). The same completion, errors and
    /// cancellation as the form with a node. The serving node's name comes back with the
    /// typed calls of <rpclb/typed.hpp> (`Reply<T>`).
    template <class CompletionToken>
    auto async_call(std::string module, std::string function, boost::json::array args, CallOptions options,
                    CompletionToken&& token);

    /// Asynchronous cast(). Completion signature `void(Result<void>)`: success once the
    /// request is queued (after any no-route retry).
    template <class CompletionToken>
    auto async_cast(std::string node, std::string module, std::string function,
                    boost::json::array args, CallOptions options, CompletionToken&& token);

    /// Asynchronous select_node(). Completion signature `void(Result<std::string>)`.
    template <class CompletionToken>
    auto async_select_node(std::string balancer, PickOptions options, CompletionToken&& token);

    /// Calls `module.function` on a node chosen by `filter` (predecessor-compatibility
    /// §1.6): on this node when `call_directly` is set or this node matches; otherwise on a
    /// uniformly random connected node (client nodes excluded) that matches, with the
    /// node's `excluded_node_patterns` applied. Nothing matches → the no-route retry, then
    /// `service_unavailable` "no nodes in cluster found with that filter" with details
    /// {"node_filter"}. With `options.load_balancer` the call is counted by that balancer's
    /// drainer (error when this node has no such balancer); selection is unaffected. An
    /// error from the chosen node is returned as is, never retried.
    CallResult call_on_random_node(const NodeFilter& filter, std::string_view module,
                                   std::string_view function, boost::json::array args,
                                   const CallOptions& options = {});
    /// call_on_random_node() with no arguments (an empty array) and default options.
    CallResult call_on_random_node(const NodeFilter& filter, std::string_view module,
                                   std::string_view function);

    /// Cast form of call_on_random_node() (predecessor-compatibility §1.7).
    Result<void> cast_on_random_node(const NodeFilter& filter, std::string_view module,
                                     std::string_view function, boost::json::array args,
                                     const CallOptions& options = {});
    /// cast_on_random_node() with no arguments (an empty array) and default options.
    Result<void> cast_on_random_node(const NodeFilter& filter, std::string_view module,
                                     std::string_view function);

    /// Asynchronous call_on_random_node(); completion `void(CallResult)`.
    template <class CompletionToken>
    auto async_call_on_random_node(NodeFilter filter, std::string module, std::string function,
                                   boost::json::array args, CallOptions options,
                                   CompletionToken&& token);

    /// Starts a balancer hosted on this node (predecessor-compatibility §1.1): loads the
    /// algorithm plugin, runs its init, starts its services, joins the group when
    /// `node_match_list` matches (client nodes never join). Returns once it is registered
    /// and selectable. The services and the balancer form a one_for_all subtree of the
    /// node's root Supervisor (doc/explanation/supervision.md): a failure of one restarts
    /// them all. Throws std::invalid_argument (bad options, name already started),
    /// std::runtime_error (plugin not found or refused, init failed, a service failed to
    /// start) naming the balancer, or std::logic_error before start() or after stop().
    std::shared_ptr<LoadBalancer> start_balancer(LoadBalancerOptions options);

    /// Stops a hosted balancer: leave, drain, stop its services. Returns false when it
    /// did not exist. Blocks up to its drain_timeout. A call it drained has its outcome
    /// when this returns; that call's completion handler may still be on its way
    /// (doc/explanation/draining-and-retries.md).
    bool stop_balancer(std::string_view name);

    /// The balancer used to route through `name`: the hosted one, else a routing-only one
    /// built from what its members announce. Errors: no members ("no members registered"),
    /// an announced algorithm that can't be loaded.
    Result<std::shared_ptr<LoadBalancer>> balancer(std::string_view name);

    /// Hosted balancers' names.
    std::vector<std::string> balancer_names() const;

    /// `balancer(name)` then `select_node` (predecessor-compatibility §1.3).
    Result<std::string> select_node(std::string_view balancer, const PickOptions& options = {});

    /// Members of a balancer's group (predecessor-compatibility §1.2); "no members
    /// registered" when empty, as in the predecessor. For a list that is simply empty, read
    /// `groups().members(balancer)->nodes`.
    Result<std::vector<std::string>> get_members(std::string_view balancer) const;

    /// Waits until balancer `balancer` has at least `count` members (as this node sees its
    /// group), or `timeout` passes: a readiness check before the first call, in place of
    /// retrying get_members(). Returns at once when there are enough already (and always
    /// for a `count` of 0).
    ///
    /// Errors: `request_timeout` (Failure::timeout) "balancer \"B\" has N of the M members
    /// waited for after T ms", details {"node", "load_balancer", "members": N, "wanted": M};
    /// `service_unavailable` "node stopping" when this node stops (or has stopped) while
    /// waiting; `service_unavailable` at once, before or during the wait, when no node will
    /// let this one in (no peer connected, and every seed and node it knows refused it):
    /// Failure::cookie_refused "cookie refused by N (the cookies differ)" with details
    /// {"refused_by"}, or Failure::tls_refused "TLS handshake with HOST:PORT failed:
    /// REASON" with details {"tls_peer"}; Failure::name_taken when this node gave up its
    /// name (name_taken()); `internal_server_error` (Failure::would_deadlock) at once from a network
    /// thread (an inline handler or completion), whose loop may be the one that applies the
    /// membership change: use async_wait_for_members() there. Thread safety: any thread.
    Result<void> wait_for_members(std::string_view balancer, std::size_t count, std::chrono::milliseconds timeout);

    /// Asynchronous wait_for_members(): the same conditions and errors, with completion
    /// signature `void(Result<void>)`, run on the handler's associated executor (default: the
    /// worker pool), never inside this function. A handler's cancellation slot may cancel the
    /// wait: it then completes with `request_timeout` "cancelled" (Failure::cancelled).
    /// Any completion token (callback, `use_future`, `use_awaitable`, `deferred`).
    template <class CompletionToken>
    auto async_wait_for_members(std::string balancer, std::size_t count, std::chrono::milliseconds timeout,
                                CompletionToken&& token);

    /// Waits until this node has an established connection to node `node`, or `timeout`
    /// passes: a readiness check before the first direct call, in place of polling
    /// connected_nodes(). Returns at once when it is connected already, and for this
    /// node's own name.
    ///
    /// Errors, with details {"node", "peer": `node`}: `request_timeout` (Failure::timeout)
    /// "NODE is not connected after T ms"; at once, the `service_unavailable` errors of
    /// wait_for_members() for a node no node lets in (Failure::cookie_refused,
    /// Failure::tls_refused), a name given up (Failure::name_taken) and a stopping node;
    /// `internal_server_error` (Failure::would_deadlock) from a network thread. Thread
    /// safety: any thread.
    Result<void> wait_for_node(std::string_view node, std::chrono::milliseconds timeout);

    /// Executor of the worker pool (handlers, default completion executor).
    boost::asio::any_io_executor worker_executor() const;

    /// Executor of the network io_context.
    boost::asio::any_io_executor network_executor() const;

private:
    struct Impl;
    using CallCompletion = boost::asio::any_completion_handler<void(CallResult)>;
    using CastCompletion = boost::asio::any_completion_handler<void(Result<void>)>;
    using WaitCompletion = boost::asio::any_completion_handler<void(Result<void>)>;

    // Start an asynchronous call or cast (empty `node` with a filter = the random-node
    // helpers) and complete `handler` on its associated executor, keeping that executor's
    // work count up until then and honouring its cancellation slot.
    void initiate_call(std::string node, std::optional<NodeFilter> filter, std::string module,
                       std::string function, boost::json::array args, CallOptions options,
                       CallCompletion handler);
    // The load-balanced async_call: bad_request without options.load_balancer.
    void initiate_balanced_call(std::string module, std::string function, boost::json::array args,
                                CallOptions options, CallCompletion handler);
    // Defined in src/lifecycle/member_wait.cpp.
    void initiate_wait_for_members(std::string balancer, std::size_t count, std::chrono::milliseconds timeout,
                                   WaitCompletion handler);
    void initiate_cast(std::string node, std::optional<NodeFilter> filter, std::string module,
                       std::string function, boost::json::array args, CallOptions options,
                       CastCompletion handler);

    std::shared_ptr<Impl> impl_;
};

}  // namespace rpclb
