// The trace context of this thread, as TraceScope and handler runs set it (internal).
#pragma once

#include <rpclb/telemetry.hpp>
#include <rpclb/trace.hpp>

#include <chrono>
#include <string_view>

namespace rpclb::detail {

/// The innermost trace context open on this thread (a TraceScope's or a handler run's
/// CallScope's); null when none is. Any thread; no lock.
const TraceContext* innermost_trace() noexcept;

/// Makes `context` the innermost trace context of this thread and returns the one it
/// replaces, which the caller restores (set_innermost_trace(outer)) when it closes.
const TraceContext* set_innermost_trace(const TraceContext* context) noexcept;

/// Lowercase hex of `size` bytes into `out` (2 × size characters). Pure.
void write_hex(const std::uint8_t* bytes, std::size_t size, char* out) noexcept;

/// A trace's ids as hex text, for telemetry events (whose fields are views): empty views
/// when built from nothing.
struct TraceText {
    char trace[32];
    char span[16];
    char parent[16];
    bool has_parent = false;
    bool set = false;

    TraceText() = default;
    TraceText(const TraceId& trace_id, const SpanId& span_id, const SpanId* parent_id) noexcept;
    std::string_view trace_id() const noexcept { return set ? std::string_view(trace, 32) : std::string_view(); }
    std::string_view span_id() const noexcept { return set ? std::string_view(span, 16) : std::string_view(); }
    std::string_view parent_span_id() const noexcept {
        return set && has_parent ? std::string_view(parent, 16) : std::string_view();
    }
};

/// An rpc.span event of a call's `kind` ("call", "attempt", "server") with `ids`, begun at
/// `wall_start` (`start` on the steady clock) and lasting until now; the caller sets the
/// node, module, function, balancer and status. Its fields view `ids`.
Event trace_span_event(const TraceText& ids, std::string_view kind, std::chrono::system_clock::time_point wall_start,
                 std::chrono::steady_clock::time_point start) noexcept;

/// True when every byte of the id is zero (an invalid id).
template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& id) noexcept {
    for (auto b : id)
        if (b) return false;
    return true;
}

}  // namespace rpclb::detail
