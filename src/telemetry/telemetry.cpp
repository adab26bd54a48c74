#include <rpclb/telemetry.hpp>

#include <rpclb/detail/log.hpp>

#include <boost/signals2/signal.hpp>

#include <array>
#include <exception>
#include <stdexcept>
#include <utility>

namespace rpclb {
namespace {

constexpr std::array<std::string_view, event_name_count> event_names{
    "rpc.start",
    "rpc.stop",
    "rpc.exception",
    "node_selected",
    "node_selected.empty",
    "least_cpu.poll.start",
    "least_cpu.poll.stop",
    "least_cpu.poll.exception",
    "least_cpu.poll.remote_error",
    "membership.join",
    "membership.leave",
    "drain.begin",
    "drain.end",
    "supervisor.restart",
    "plugin.loaded",
    "plugin.rejected",
    "member.ejected",
    "member.returned",
    "rpc.attempt",
    "rpc.span",
};

void log_listener_failure(const Event& event, std::string_view what) noexcept {
    try {
        RPCLB_LOG("telemetry", error)
            << "listener threw on " << to_string(event.name) << ": " << what;
    } catch (...) {
        // Logging failed too; the emitter must still not see an exception.
    }
}

// Wraps a listener so that its exception stops neither the emitter nor the listeners
// connected after it (Signals2 would let it unwind through the whole invocation).
struct GuardedListener {
    Listener listener;

    void operator()(const Event& event) const noexcept {
        try {
            listener(event);
        } catch (const std::exception& e) {
            log_listener_failure(event, e.what());
        } catch (...) {
            log_listener_failure(event, "an exception not derived from std::exception");
        }
    }
};

}  // namespace

std::string_view to_string(EventName name) noexcept {
    const auto i = static_cast<std::size_t>(name);
    return i < event_names.size() ? event_names[i] : std::string_view("unknown");
}

struct TelemetryBus::Core {
    boost::signals2::signal<void(const Event&)> signal;
    // Read by every emitter, written only by connect/disconnect: its own cache line, so
    // the signal's bookkeeping next to it doesn't make emitters miss.
    alignas(64) std::atomic<std::size_t> listeners{0};
};

struct TelemetryBus::Connection::State {
    boost::signals2::connection connection;
    std::weak_ptr<Core> core;
    // Cleared by the first disconnect(), so the count drops exactly once per listener.
    std::atomic<bool> counted{true};
};

// ---- Connection --------------------------------------------------------------------------

void TelemetryBus::Connection::disconnect() noexcept {
    if (!state_ || !state_->counted.exchange(false, std::memory_order_acq_rel)) return;
    const std::shared_ptr<Core> core = state_->core.lock();
    if (!core) return;  // the bus is gone, and its listeners with it
    state_->connection.disconnect();
    core->listeners.fetch_sub(1, std::memory_order_release);
}

bool TelemetryBus::Connection::connected() const noexcept {
    return state_ && state_->counted.load(std::memory_order_acquire) &&
           state_->connection.connected();
}

// ---- ScopedConnection ----------------------------------------------------------------------

TelemetryBus::ScopedConnection::ScopedConnection(ScopedConnection&& other) noexcept
    : connection_(std::exchange(other.connection_, Connection())) {}

TelemetryBus::ScopedConnection& TelemetryBus::ScopedConnection::operator=(
    ScopedConnection&& other) noexcept {
    if (this != &other) {
        connection_.disconnect();
        connection_ = std::exchange(other.connection_, Connection());
    }
    return *this;
}

TelemetryBus::Connection TelemetryBus::ScopedConnection::release() noexcept {
    return std::exchange(connection_, Connection());
}

// ---- TelemetryBus --------------------------------------------------------------------------

TelemetryBus::TelemetryBus() : core_(std::make_shared<Core>()), listeners_(&core_->listeners) {}

TelemetryBus::~TelemetryBus() {
    // A disconnect() on another thread may hold the Core a moment longer; the listeners
    // (and whatever they captured) are released now regardless.
    core_->signal.disconnect_all_slots();
}

TelemetryBus::Connection TelemetryBus::connect(Listener listener) {
    if (!listener) throw std::invalid_argument("TelemetryBus::connect: empty listener");
    auto state = std::make_shared<Connection::State>();
    state->core = core_;
    state->connection = core_->signal.connect(GuardedListener{std::move(listener)});
    // Counted only once connected: an emitter that sees the count sees the listener.
    core_->listeners.fetch_add(1, std::memory_order_release);
    return Connection(std::move(state));
}

void TelemetryBus::deliver(const Event& event) const noexcept {
    try {
        core_->signal(event);
    } catch (...) {
        // Listeners can't throw (GuardedListener); only Signals2's own bookkeeping could,
        // e.g. std::bad_alloc. The emitter is on the data path and must not see it.
        log_listener_failure(event, "the listener list failed to run");
    }
}

}  // namespace rpclb
