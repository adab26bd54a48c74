#include <rpclb/handler.hpp>

#include "rpc/abandon_signal.hpp"
#include "rpc/call_scope.hpp"
#include "telemetry/trace_state.hpp"
#include "transport/connection.hpp"

#include <string>

namespace rpclb {

std::optional<std::chrono::steady_clock::time_point> call_deadline() noexcept {
    const auto* scope = detail::CallScope::current();
    if (!scope || scope->deadline() == std::chrono::steady_clock::time_point::max()) return std::nullopt;
    return scope->deadline();
}

bool call_cancelled() noexcept {
    const auto* scope = detail::CallScope::current();
    return scope && scope->cancelled();
}

}  // namespace rpclb

namespace rpclb::detail {

namespace {
thread_local const CallScope* innermost = nullptr;
}  // namespace

CallScope::CallScope(time_point deadline, const Connection* connection, AbandonSignal* signal,
                     const TraceContext* trace) noexcept
    : deadline_(deadline), connection_(connection), signal_(signal), outer_(innermost),
      outer_trace_(set_innermost_trace(trace)) {
    innermost = this;
}

CallScope::~CallScope() {
    innermost = outer_;
    set_innermost_trace(outer_trace_);
}

const CallScope* CallScope::current() noexcept { return innermost; }

bool CallScope::cancelled() const noexcept { return abandoned() || std::chrono::steady_clock::now() >= deadline_; }

bool CallScope::abandoned() const noexcept {
    return (signal_ && signal_->fired()) || (connection_ && connection_->closed());
}

std::optional<OptionProblem> check(const HandlerOptions& o) {
    if (o.slow_threshold.count() >= 1) return std::nullopt;
    return OptionProblem{"slow_threshold",
                         "must be at least 1 us; got " + std::to_string(o.slow_threshold.count()) + " us"};
}

}  // namespace rpclb::detail
