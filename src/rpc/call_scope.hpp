// The call a handler run serves, as call_deadline(), call_cancelled() and current_trace()
// see it (internal).
#pragma once

#include <rpclb/trace.hpp>

#include <atomic>
#include <chrono>

namespace rpclb::detail {

class Connection;

/// Opened by RpcServer around every handler run, on the thread running it: while it
/// lives, call_deadline(), call_cancelled() and current_trace() on that thread answer for
/// its call (a cast's handler has a trace context and no deadline). Scopes
/// nest (a handler that calls this node runs the inner handler in a scope of its own) and
/// close in reverse order.
///
/// Thread safety: one thread's; the connection is only asked closed(), which any thread may.
class CallScope {
public:
    using time_point = std::chrono::steady_clock::time_point;

    /// `deadline`: time_point::max() when the call has none (a cast). `connection`: the
    /// one the request came on, null for a call from this node. `cancel`: set when the
    /// caller says it gave up (wire::Cancel); null when it cannot. `trace`: the handler
    /// run's span (null: none).
    CallScope(time_point deadline, const Connection* connection, const std::atomic<bool>* cancel = nullptr,
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
    bool abandonable() const noexcept { return cancel_ || connection_; }

private:
    time_point deadline_;
    const Connection* connection_;
    const std::atomic<bool>* cancel_;
    const CallScope* outer_;
    const TraceContext* outer_trace_;
};

}  // namespace rpclb::detail
