// W3C trace context: the trace a call belongs to, as handlers see it and calls carry it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb {

/// A trace id: 16 bytes, never all zero in a valid context (W3C Trace Context §3.2.2.3).
using TraceId = std::array<std::uint8_t, 16>;
/// A span id: 8 bytes, never all zero in a valid context (§3.2.2.4).
using SpanId = std::array<std::uint8_t, 8>;

/// The `sampled` bit of the trace flags (§3.2.2.5).
inline constexpr std::uint8_t trace_flag_sampled = 0x01;
/// Length of a version-00 traceparent: "00-" 32 hex "-" 16 hex "-" 2 hex.
inline constexpr std::size_t traceparent_size = 55;
/// Longest tracestate a call carries, in bytes (the size W3C asks every vendor to pass on,
/// §3.3.1.5). A longer one is dropped, not cut: a cut list could end inside a member.
inline constexpr std::size_t max_tracestate_size = 512;

/// The fields of a `traceparent` header: the trace, the sender's span (`parent_id`) and
/// the trace flags. Plain data.
struct TraceParent {
    TraceId trace_id{};
    SpanId parent_id{};
    std::uint8_t flags = 0;
    bool sampled() const noexcept { return (flags & trace_flag_sampled) != 0; }
    friend bool operator==(const TraceParent&, const TraceParent&) = default;
};

/// Reads a traceparent as W3C Trace Context Level 1 §3.2 says: lowercase hex only; version
/// "ff" is refused; version "00" must be exactly 55 characters; a higher version is read
/// by its first 55 characters, which must be followed by nothing or by '-' (§3.2.4);
/// all-zero trace or parent ids are refused. nullopt when malformed. Pure; never throws.
std::optional<TraceParent> parse_traceparent(std::string_view text) noexcept;

/// Writes `parent` as a version-00 traceparent into `out` (exactly traceparent_size
/// characters, no terminator). Pure; never throws.
void write_traceparent(const TraceParent& parent, char* out) noexcept;

/// `parent` as a version-00 traceparent ("00-<trace>-<parent>-<flags>").
std::string to_traceparent(const TraceParent& parent);

/// Lowercase hex of an id (32 or 16 digits).
std::string to_hex(const TraceId& id);
std::string to_hex(const SpanId& id);

/// The trace context of one span: the trace, the span itself, its parent (all zero for a
/// root span), the trace flags and the vendor's `tracestate` (at most
/// max_tracestate_size bytes). Plain data.
struct TraceContext {
    TraceId trace_id{};
    SpanId span_id{};
    SpanId parent_span_id{};  ///< all zero: none (the span starts its trace here)
    std::uint8_t flags = 0;
    std::string tracestate{};

    bool sampled() const noexcept { return (flags & trace_flag_sampled) != 0; }
    /// The traceparent that names this span as the parent (what a call made in this
    /// context would hand on, were the call itself not a span).
    TraceParent traceparent() const noexcept { return TraceParent{trace_id, span_id, flags}; }
    /// The context of the span whose parent is the sender of `parent`: the same trace and
    /// flags, `span_id` as given (a fresh one: new_span_id()).
    static TraceContext child_of(const TraceParent& parent, const SpanId& span_id, std::string tracestate = {});
};

/// A random span id, never all zero, from this thread's generator. Any thread; no lock.
SpanId new_span_id() noexcept;

/// A new trace: a random trace id, a random span id, no parent, sampled or not.
/// Any thread; no lock.
TraceContext new_trace(bool sampled);

/// The trace context of this thread: the innermost open TraceScope's, or else that of the
/// call whose handler runs on this thread (its server span: the trace of the call, a span
/// id of its own, the caller's attempt as parent). nullopt in neither. A call made here
/// continues this trace as a child span (doc/how-to/route-calls.md "Trace context").
/// Any thread; no lock.
std::optional<TraceContext> current_trace();

/// Makes `context` the trace context of this thread while it lives: calls made on this
/// thread are its child spans, and current_trace() returns it. Scopes nest (with each
/// other and with handler runs) and must close in reverse order, on the thread that
/// opened them. An invalid context (an all-zero trace or span id) is replaced by
/// new_trace(context.sampled()).
///
/// Example (an HTTP front end continuing its request's trace into the cluster):
/// \code
///   rpclb::TraceScope scope(request["traceparent"], request["tracestate"]);
///   auto answer = cluster.call("", "billing", "charge", args, {.load_balancer = "workers"});
/// \endcode
///
/// Thread safety: one thread's.
class TraceScope {
public:
    explicit TraceScope(TraceContext context) noexcept;
    /// Continues the trace of `traceparent` (and `tracestate`, dropped when longer than
    /// max_tracestate_size): the context is the header's span (its parent-id as `span_id`,
    /// no parent), so calls made here are children of the header's sender, as a remote
    /// parent is in OpenTelemetry. A malformed header starts a new unsampled trace instead
    /// (continued() is then false).
    explicit TraceScope(std::string_view traceparent, std::string_view tracestate = {});
    ~TraceScope();
    TraceScope(const TraceScope&) = delete;
    TraceScope& operator=(const TraceScope&) = delete;

    const TraceContext& context() const noexcept { return context_; }
    /// False when the scope's traceparent text was malformed (it started a new trace).
    bool continued() const noexcept { return continued_; }

private:
    TraceContext context_;
    bool continued_ = true;
    const TraceContext* outer_;
};

}  // namespace rpclb
