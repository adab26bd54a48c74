// Serving calls: the function registry, and running handlers inline or on the worker pool
// (internal).
#pragma once

#include "membership/mesh.hpp"
#include "rpc/abandon_signal.hpp"
#include "rpc/served_balancers.hpp"
#include "transport/load_gauge.hpp"

#include <rpclb/error.hpp>
#include <rpclb/handler.hpp>
#include <rpclb/telemetry.hpp>
#include <rpclb/trace.hpp>
#include <rpclb/detail/zero_waiter.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/array.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rpclb::detail {

/// What RpcServer needs of this node: its name and the size limit of answers. Built by
/// Cluster from ClusterOptions (the fields of the same names). Plain data.
struct RpcOptions {
    /// This node's name, `short@host`; named in every error of a call served here.
    std::string node;
    /// Largest answer frame, in bytes; a bigger answer is replaced by an
    /// `internal_server_error` saying so.
    std::size_t max_message_size = 16u * 1024u * 1024u;
    /// This node's load: RpcServer counts its worker-pool runs there, and every answer
    /// carries a sample of it (wire::Response::load). Null: one of its own (pool size 1).
    std::shared_ptr<LoadGauge> load;
    /// Where the server spans of sampled traces go (rpc.span, kind "server"); null: nowhere.
    TelemetryBus* bus = nullptr;
};

/// Runs the functions registered on this node for requests and casts from peers and for
/// local calls.
///
/// The registry is an immutable table swapped on registration, so serving a call takes no
/// lock. A handler registered with `HandlerOptions::run_inline` runs on the thread that
/// read the request (a network thread) and its answer is written from there; others run on
/// the worker pool. Inline runs longer than their `slow_threshold` are counted
/// (`slow_inline_runs`) and logged once per function.
///
/// Thread safety: every member may be called from any thread.
class RpcServer final : public RequestSink {
public:
    RpcServer(RpcOptions options, boost::asio::thread_pool& workers, ServedBalancers& balancers);

    void register_function(std::string module, std::string function, Handler handler, HandlerOptions options);

    using time_point = std::chrono::steady_clock::time_point;

    /// Runs `module.function(args)` on the calling thread, the call's deadline
    /// `deadline` (call_deadline() in the handler); `threw` (if given) tells whether the
    /// handler threw; `trace` (if given) is the handler run's span (current_trace()).
    /// Errors name this node, module and function.
    CallResult run_handler(std::string_view module, std::string_view function, const boost::json::array& args,
                           bool* threw = nullptr, time_point deadline = time_point::max(),
                           const TraceContext* trace = nullptr) const;
    /// Runs a call to this node whose deadline is `deadline` in the span `trace`: inline
    /// handlers on the calling thread, others on the worker pool; `done` gets the result
    /// and whether the handler threw.
    void run_local(std::string module, std::string function, boost::json::array args, time_point deadline,
                   TraceContext trace, std::function<void(CallResult, bool threw)> done);

    void serve_request(const std::shared_ptr<Connection>& connection, wire::Request&& request) override;
    void serve_cast(wire::Cast&& cast) override;
    /// A request queued for a worker or running there is marked cancelled: not started
    /// (answered `request_timeout` "not run: the caller cancelled it"), or its handler sees
    /// call_cancelled() and the calls it made end, cancelled (AbandonSignal). Inline
    /// handlers have finished before a cancel can be read.
    void cancel_request(const Connection& connection, std::uint64_t id) override;
    /// The requests that came on `connection` and wait for a worker or run there are
    /// abandoned as cancel_request() abandons one: the calls their handlers made end,
    /// cancelled. On the connection's strand.
    void connection_closed(const Connection& connection) override;

    /// Waits until no received request or cast is running or queued, up to `deadline`.
    /// Returns false on timeout.
    bool wait_idle(std::chrono::steady_clock::time_point deadline);
    /// The node's stop has begun: wait_served_before_stop() waits only for the requests
    /// and casts received before this (one received while it is called may count on
    /// either side). Any thread; once.
    void mark_stop() noexcept { stop_marked_.store(true); }
    /// Waits until the requests and casts received before mark_stop() are done, up to
    /// `deadline`; those received since are not waited for (under a steady stream of
    /// overlapping calls the node is never idle, and wait_idle() would wait for the whole
    /// stop_timeout). Returns false on timeout.
    bool wait_served_before_stop(std::chrono::steady_clock::time_point deadline);
    std::int64_t serving() const noexcept { return serving_.load(); }
    /// The node's stop gave up waiting (stop_timeout passed): from now on a handler queued
    /// on the worker pool that has not started is not run. A request's answer would go to
    /// a connection that is closing, whose caller has failed the call; a cast is dropped;
    /// a local call completes with `service_unavailable` "node stopping". Handlers already
    /// running finish. Returns how many were queued then (requests, casts and local calls
    /// not yet started or still running).
    std::int64_t abandon_queued() noexcept;
    std::uint64_t slow_inline_runs() const noexcept { return slow_inline_runs_.load(); }
    /// ClusterStats::expired_requests.
    std::uint64_t expired_requests() const noexcept { return expired_requests_.load(); }
    /// ClusterStats::bad_traceparents.
    std::uint64_t bad_traceparents() const noexcept { return bad_traceparents_.load(); }
    /// The gauge of this node's load (RpcOptions::load).
    LoadGauge& load() noexcept { return *load_; }

private:
    struct Entry {
        Handler handler;
        HandlerOptions options;
        std::string name;                     // "module.function", for the log
        mutable std::atomic<bool> warned{false};  // a slow inline run was logged
    };
    struct KeyHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    using Table = std::unordered_map<std::string, std::shared_ptr<const Entry>, KeyHash, std::equal_to<>>;

    /// A request received from a peer, admitted: its entry (null: not registered) and the
    /// balancer it came through, tracked until finish(); or its refusal (a draining
    /// balancer's answer), which runs nothing.
    struct Served {
        wire::Request request;
        std::shared_ptr<const Entry> entry{};
        ServedBalancers::Handle balancer{};
        std::optional<std::string> refusal{};
        bool before_stop = false;  // counted in serving_before_stop_ (begin_serving)
        /// When the caller gives up on it (wire::Request::timeout_ms from its arrival;
        /// max(): never); a handler not started by then is not run.
        std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
        /// Fired by cancel_request() or connection_closed() (a request run by a worker;
        /// null for one run inline).
        std::shared_ptr<AbandonSignal> abandon{};
        /// The handler run's span: a child of the caller's attempt, or the root of a new
        /// (unsampled) trace when the request carried no valid traceparent.
        TraceContext trace{};
    };
    /// A request its caller may abandon while a worker has it: its connection and id.
    struct CancelKey {
        const Connection* connection;
        std::uint64_t id;
        bool operator==(const CancelKey&) const = default;
    };
    struct CancelKeyHash {
        std::size_t operator()(const CancelKey& k) const noexcept {
            return std::hash<const void*>{}(k.connection) ^ std::hash<std::uint64_t>{}(k.id);
        }
    };
    /// `entry`: the request's, when already found (null: found here).
    Served admit(wire::Request&& request, std::shared_ptr<const Entry> entry = nullptr);
    /// The trace context of the handler run a request or cast asks for: a child of the
    /// sender's attempt, or a new trace (a malformed traceparent is counted).
    TraceContext handler_trace(wire::TraceRead read, const TraceParent& parent, std::string&& tracestate);
    /// Runs an admitted request's handler, which came on `connection`, unless its
    /// deadline has passed (then a `request_timeout` error, counted in expired_requests_).
    CallResult run_unless_expired(const Served& served, const Connection* connection);
    /// The answer of an admitted request is out: ends its tracking.
    void finish(Served& served);
    std::shared_ptr<const Entry> find(std::string_view module, std::string_view function) const;
    /// Registered inline (an unknown function's not_found answer is made on the spot too).
    static bool runs_inline(const Entry* entry) noexcept { return !entry || entry->options.run_inline; }
    /// Runs `entry` (may be null: not registered), timing inline runs, in a CallScope of
    /// `deadline`, `connection` (the request's; null for a call from this node) and
    /// `trace` (the run's span, emitted as rpc.span when sampled and someone listens).
    CallResult run(const Entry* entry, std::string_view module, std::string_view function,
                   const boost::json::array& args, bool* threw, time_point deadline = time_point::max(),
                   const Connection* connection = nullptr, AbandonSignal* abandon = nullptr,
                   const TraceContext* trace = nullptr) const;
    /// rpc.span of a server span `trace` that ran from `start` (steady and system clocks).
    void emit_server_span(const TraceContext& trace, std::string_view module, std::string_view function,
                          const CallResult& result, std::chrono::steady_clock::time_point start,
                          std::chrono::system_clock::time_point wall_start) const;
    /// Encodes the answer to request `id` into `buffer` (Connection::spare_buffer),
    /// replacing one over the size limit.
    std::string answer(std::uint64_t id, CallResult result, std::string_view module, std::string_view function,
                       std::string buffer) const;
    /// Counts a received request or cast as served until end_serving(the value returned):
    /// true when it came before mark_stop().
    bool begin_serving() noexcept;
    /// True when abandon_queued was called: a queued handler skips its run.
    bool skip_abandoned() const noexcept;
    void end_serving(bool before_stop);

    const RpcOptions options_;
    const std::shared_ptr<LoadGauge> load_;
    boost::asio::thread_pool& workers_;
    ServedBalancers& balancers_;
    std::atomic<std::shared_ptr<const Table>> table_;
    std::mutex edit_mutex_;  // serialises registrations (never taken when serving)
    std::atomic<std::int64_t> serving_{0};  // requests and casts received, not yet answered
    std::atomic<std::int64_t> serving_before_stop_{0};  // those of them received before mark_stop()
    std::atomic<bool> stop_marked_{false};
    mutable std::atomic<std::uint64_t> slow_inline_runs_{0};
    std::atomic<std::uint64_t> expired_requests_{0};
    std::atomic<std::uint64_t> bad_traceparents_{0};
    std::atomic<bool> abandoned_{false};  // abandon_queued was called
    ZeroWaiter idle_;  // wait_idle and wait_served_before_stop: their counter at 0
    std::mutex cancel_mutex_;
    std::unordered_map<CancelKey, std::shared_ptr<AbandonSignal>, CancelKeyHash> cancellable_;  // under cancel_mutex_
};

}  // namespace rpclb::detail
