// The telemetry bus: named events, Signals2-style listeners, free when nobody listens.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace rpclb {

/// The events rpclb emits. The first nine are the predecessor's (`[:rpc_load_balancer, ...]`,
/// predecessor-compatibility §5.1–5.3), named with dots; the rest are rpclb's own.
///
/// | event | measurements | metadata |
/// |---|---|---|
/// | `rpc.start` | system_time_ns | type, node, module, function, load_balancer |
/// | `rpc.stop` | duration | the same + status |
/// | `rpc.exception` | duration | type, node, module, function, load_balancer, kind, reason |
/// | `node_selected` | count = 1, members_count | algorithm, load_balancer, node (the pick) |
/// | `node_selected.empty` | count = 1 | algorithm, load_balancer (no node) |
/// | `least_cpu.poll.start` | system_time_ns | load_balancer |
/// | `least_cpu.poll.stop` | duration | load_balancer |
/// | `least_cpu.poll.exception` | duration | load_balancer, kind, reason |
/// | `least_cpu.poll.remote_error` | count = 1 | load_balancer, node (the remote), kind, reason |
/// | `membership.join` / `.leave` | count = 1 | group, node |
/// | `drain.begin` | in_flight (at the start) | load_balancer |
/// | `drain.end` | in_flight (left), duration | load_balancer, outcome |
/// | `supervisor.restart` | count = 1 | supervisor, child, reason |
/// | `plugin.loaded` | count = 1 | algorithm, path |
/// | `plugin.rejected` | count = 1 | algorithm, path, reason |
/// | `member.ejected` | count = 1, duration (of the ejection) | load_balancer, node, reason |
/// | `member.returned` | count = 1 | load_balancer, node |
/// | `rpc.attempt` | count = 1 | type, node (empty: refused), module, function, load_balancer, kind, outcome |
/// | `rpc.span` | system_time_ns (start), duration | kind, node, module, function, load_balancer, status, trace_id, span_id, parent_span_id |
///
/// The rpc.* events of a call (rpc.start, rpc.stop, rpc.exception, rpc.attempt) carry its
/// trace_id and the call's span_id. `rpc.span` is the span sink: one event per finished
/// span of a sampled trace (doc/reference/telemetry.md "Spans" says how to feed
/// OpenTelemetry): kind "call" (a call made on this node, from start to completion; node
/// as in rpc.start), "attempt" (one request of it, hedges and retries included, child of
/// the call; node: the member it went to) or "server" (a handler run here, child of the
/// caller's attempt; node: this node).
///
/// The predecessor's LeastCpu poller calls the balancer `load_balancer_name`; here it is the
/// `load_balancer` field like everywhere else.
enum class EventName : std::uint8_t {
    rpc_start,
    rpc_stop,
    rpc_exception,
    node_selected,
    node_selected_empty,
    least_cpu_poll_start,
    least_cpu_poll_stop,
    least_cpu_poll_exception,
    least_cpu_poll_remote_error,
    membership_join,
    membership_leave,
    drain_begin,
    drain_end,
    supervisor_restart,
    plugin_loaded,
    plugin_rejected,
    member_ejected,
    member_returned,
    rpc_attempt,
    rpc_span,
};

/// How many EventName values there are (one past the last).
inline constexpr std::size_t event_name_count =
    static_cast<std::size_t>(EventName::rpc_span) + 1;

/// The dotted name of `name`: "rpc.start", "node_selected.empty",
/// "least_cpu.poll.remote_error", "membership.join", "drain.end", "plugin.rejected"...
/// "unknown" for a value outside the enumeration.
std::string_view to_string(EventName name) noexcept;

/// One telemetry event: its name, measurements and metadata (see EventName for which
/// fields each event sets; a field an event doesn't use keeps its default).
///
/// The string views point into the emitter's data and are valid only while listeners
/// run: a listener that keeps anything must copy it. Build an Event only after
/// TelemetryBus::active() said someone listens.
struct Event {
    EventName name{};

    // ---- measurements ------------------------------------------------------------------
    /// rpc.start, least_cpu.poll.start: wall clock, ns since the Unix epoch.
    std::int64_t system_time_ns = 0;
    /// rpc.stop, rpc.exception, least_cpu.poll.stop/exception, drain.end: elapsed time.
    std::chrono::nanoseconds duration{0};
    /// node_selected*, remote_error, membership.*, supervisor.*, plugin.*: always 1.
    std::int64_t count = 1;
    /// node_selected: number of members the pick chose from.
    std::int64_t members_count = 0;
    /// drain.begin: calls in flight when the drain starts; drain.end: calls left.
    std::int64_t in_flight = 0;

    // ---- metadata ----------------------------------------------------------------------
    std::string_view type{};           ///< rpc.*: "call" | "cast"
    /// rpc.*: the node argument of the call (the predecessor's rule: for a load-balanced call the
    /// caller's value, not the selected target); node_selected: the pick; membership.*:
    /// the member; remote_error: the remote node.
    std::string_view node{};
    std::string_view module{};         ///< rpc.*
    std::string_view function{};       ///< rpc.*
    std::string_view load_balancer{};  ///< the balancer's name; empty = none (the predecessor's nil)
    /// rpc.stop, rpc.span: "ok", or the ErrorCode name (`to_string(ErrorCode)`, e.g.
    /// "request_timeout") of an error.
    std::string_view status{};
    std::string_view algorithm{};      ///< node_selected*: algorithm name; plugin.*: same
    std::string_view group{};          ///< membership.*
    std::string_view outcome{};        ///< drain.end: "drained" | "timeout"; rpc.attempt: "sent" | "refused"
    std::string_view kind{};           ///< rpc.exception / poll.*: "error" | "exit" | ...; rpc.attempt: "hedge" | "retry"; rpc.span: "call" | "attempt" | "server"
    /// rpc.exception: exception text; supervisor.restart: why the child stopped;
    /// plugin.rejected: the loader's message; remote_error: what failed.
    std::string_view reason{};
    std::string_view child{};          ///< supervisor.restart: the child's id
    std::string_view supervisor{};     ///< supervisor.restart: the supervisor's name
    std::string_view path{};           ///< plugin.*: the shared object's file
    /// rpc.*: the call's trace, 32 lowercase hex digits; empty in other events.
    std::string_view trace_id{};
    /// rpc.start/stop/exception/attempt: the call's span; rpc.span: the span's own (16 hex digits).
    std::string_view span_id{};
    /// rpc.span: the span's parent, 16 hex digits; empty for a root span.
    std::string_view parent_span_id{};
};

/// A listener: called with each event, on the emitting thread.
using Listener = std::function<void(const Event&)>;

/// The bus events go through: listeners connect and disconnect as with Boost.Signals2,
/// emitters call emit(). With no listener, active() and emit() are one atomic load each;
/// emitters test active() before building an Event. A listener runs on the emitting thread;
/// one that throws is logged (channel "telemetry") and doesn't stop the others.
///
/// Thread safety: distinct objects safe; shared objects safe (connect, disconnect and emit
/// from any threads, a listener may disconnect itself). A listener may still be running
/// after disconnect() returns and must be thread-safe (doc/reference/telemetry.md).
///
/// Example:
/// \code
///   rpclb::TelemetryBus::ScopedConnection c = bus.connect([](const rpclb::Event& e) {
///       if (e.name == rpclb::EventName::rpc_stop) std::cout << e.status << '\n';
///   });
/// \endcode
class TelemetryBus {
    struct Core;

public:
    /// A handle to one connected listener. Copies refer to the same listener; a default-
    /// constructed handle refers to none. Dropping every handle leaves the listener
    /// connected (as a Signals2 connection does); use ScopedConnection to tie it to a
    /// scope. A handle may outlive its bus: it then reports disconnected.
    ///
    /// Thread safety: distinct objects safe; shared objects safe.
    class Connection {
    public:
        Connection() = default;

        /// Disconnects the listener: later emissions don't call it (one already running
        /// on another thread may finish). Calling it again, through any copy, does
        /// nothing.
        void disconnect() noexcept;

        /// True while the listener is connected (false after disconnect() through any
        /// copy, after the bus was destroyed, and for a default-constructed handle).
        bool connected() const noexcept;

    private:
        friend class TelemetryBus;
        struct State;
        explicit Connection(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
        std::shared_ptr<State> state_;
    };

    /// Disconnects its listener when destroyed (or assigned over). Movable, not copyable.
    ///
    /// Thread safety: distinct objects safe; shared objects unsafe.
    class ScopedConnection {
    public:
        ScopedConnection() = default;
        /// Takes over `connection` (implicit, so `ScopedConnection c = bus.connect(f);`).
        ScopedConnection(Connection connection) noexcept : connection_(std::move(connection)) {}
        ScopedConnection(ScopedConnection&& other) noexcept;
        ScopedConnection& operator=(ScopedConnection&& other) noexcept;
        ScopedConnection(const ScopedConnection&) = delete;
        ScopedConnection& operator=(const ScopedConnection&) = delete;
        ~ScopedConnection() { connection_.disconnect(); }

        void disconnect() noexcept { connection_.disconnect(); }
        bool connected() const noexcept { return connection_.connected(); }

        /// Gives up ownership: the listener stays connected; returns its handle.
        Connection release() noexcept;

    private:
        Connection connection_;
    };

    TelemetryBus();
    /// Disconnects every listener (their handles then report disconnected). No emit() may
    /// be running or start on this bus.
    ~TelemetryBus();
    TelemetryBus(const TelemetryBus&) = delete;
    TelemetryBus& operator=(const TelemetryBus&) = delete;

    /// Connects `listener`; it receives every event emitted after connect() returns, until
    /// it is disconnected. Listeners are called in connection order.
    ///
    /// Errors: throws std::invalid_argument when `listener` is empty; std::bad_alloc.
    Connection connect(Listener listener);

    /// True when at least one listener is connected: one atomic load (acquire). A hint,
    /// since listeners come and go concurrently: an event emitted while one connects may
    /// or may not reach it.
    bool active() const noexcept { return listeners_->load(std::memory_order_acquire) != 0; }

    /// Delivers `event` to every connected listener, on this thread, in connection order.
    /// With no listener it returns after one atomic load (no lock, no allocation).
    /// Never throws: listeners' exceptions are caught and logged.
    void emit(const Event& event) const noexcept {
        if (active()) deliver(event);
    }

    /// Number of connected listeners (a snapshot).
    std::size_t listener_count() const noexcept {
        return listeners_->load(std::memory_order_acquire);
    }

private:
    void deliver(const Event& event) const noexcept;

    // The listener list and the count live in a Core shared with the connections' weak
    // references, so a handle that outlives the bus stays safe to use.
    std::shared_ptr<Core> core_;
    const std::atomic<std::size_t>* listeners_;  // inside *core_
};

}  // namespace rpclb
