// The call a handler run serves, as call_deadline(), call_cancelled() and current_trace()
// see it (internal).
#pragma once

#include <rpclb/trace.hpp>

#include <chrono>

namespace rpclb::detail {

class AbandonSignal;
class Connection;

/// Opened by RpcServer around every handler run, on the thread running it: while it
/// lives, call_deadline(), call_cancelled() and current_trace() on that thread answer for
/// its call (a cast's handler has a trace context and no deadline). Scopes
/// nest (a handler that calls this node runs the inner handler in a scope of its own) and
/// close in reverse order.
///
/// Thread safety: one thread's; the connection is only asked closed(), and the signal
/// fired() (or given hooks), which any thread may.
class CallScope {
public:
    using time_point = std::chrono::steady_clock::time_point;

    /// `deadline`: time_point::max() when the call has none (a cast). `connection`: the
    /// one the request came on, null for a call from this node. `signal`: fired when the
    /// caller gives up (it cancelled, or `connection` closed), and where the calls the
    /// handler makes hook themselves; null for a run that cannot be given up while it
    /// lasts (inline, local, a cast). It outlives the scope. `trace`: the handler run's
    /// span (null: none).
    CallScope(time_point deadline, const Connection* connection, AbandonSignal* signal = nullptr,
              const TraceContext* trace = nullptr) noexcept;
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

    /// The innermost scope open on this thread; null outside every handler.
    static const CallScope* current() noexcept;

    time_point deadline() const noexcept { return deadline_; }
    /// The deadline passed, the request's connection closed, or its caller cancelled it.
    bool cancelled() const noexcept;
    /// Its caller cancelled it or its connection closed (the deadline aside).
    bool abandoned() const noexcept;
    /// Whether abandoned() can ever become true: the call came from another node or can
    /// be cancelled.
    bool abandonable() const noexcept { return signal_ || connection_; }
    /// Where a call made by the handler hooks itself, to end when abandoned() becomes true
    /// (null: see the constructor).
    AbandonSignal* signal() const noexcept { return signal_; }

private:
    time_point deadline_;
    const Connection* connection_;
    AbandonSignal* signal_;
    const CallScope* outer_;
    const TraceContext* outer_trace_;
};

}  // namespace rpclb::detail
