// W3C Trace Context Level 1 (https://www.w3.org/TR/trace-context/): traceparent read and
// written, new ids, and the trace context of each thread.
#include <rpclb/trace.hpp>

#include "telemetry/trace_state.hpp"

#include <rpclb/detail/thread_rng.hpp>

#include <cstring>

namespace rpclb {
namespace {

constexpr char digits[] = "0123456789abcdef";

// The two lowercase hex digits of each byte value, byte after byte: a write is one copy
// of two characters per byte.
constexpr std::array<char, 512> hex_pairs = [] {
    std::array<char, 512> t{};
    for (int b = 0; b < 256; ++b) {
        t[2 * b] = digits[b >> 4];
        t[2 * b + 1] = digits[b & 0xf];
    }
    return t;
}();

// Each character's value as the high (`shift` 4) or low (`shift` 0) digit of a byte, or
// 0x100 when it is not a lowercase hex digit (uppercase is not valid in a traceparent,
// §3.2.2): a byte is the or of two entries, and any bit above its eight marks a bad digit.
constexpr std::array<std::uint16_t, 256> hex_table(int shift) {
    std::array<std::uint16_t, 256> t{};
    for (auto& v : t) v = 0x100;
    for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<std::uint16_t>((c - '0') << shift);
    for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<std::uint16_t>((c - 'a' + 10) << shift);
    return t;
}
constexpr auto high_digits = hex_table(4), low_digits = hex_table(0);

// The `size` bytes written as 2 × size hex digits at `text`; false when one is not a digit.
bool read_hex(const char* text, std::size_t size, std::uint8_t* out) noexcept {
    unsigned bad = 0;
    for (std::size_t i = 0; i < size; ++i) {
        const unsigned byte = high_digits[static_cast<unsigned char>(text[2 * i])] |
                              low_digits[static_cast<unsigned char>(text[2 * i + 1])];
        bad |= byte;
        out[i] = static_cast<std::uint8_t>(byte);
    }
    return bad < 0x100;
}

thread_local const TraceContext* innermost = nullptr;

}  // namespace

std::optional<TraceParent> parse_traceparent(std::string_view text) noexcept {
    if (text.size() < traceparent_size) return std::nullopt;
    const char* s = text.data();
    std::uint8_t version = 0;
    if (!read_hex(s, 1, &version) || version == 0xff) return std::nullopt;
    // Version 00 is exactly 55 characters; a later one may append fields after a '-'.
    if (version == 0 ? text.size() != traceparent_size : text.size() > traceparent_size && text[traceparent_size] != '-')
        return std::nullopt;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-') return std::nullopt;
    TraceParent p;
    if (!read_hex(s + 3, p.trace_id.size(), p.trace_id.data()) ||
        !read_hex(s + 36, p.parent_id.size(), p.parent_id.data()) || !read_hex(s + 53, 1, &p.flags))
        return std::nullopt;
    if (detail::all_zero(p.trace_id) || detail::all_zero(p.parent_id)) return std::nullopt;
    return p;
}

void write_traceparent(const TraceParent& p, char* out) noexcept {
    out[0] = '0';
    out[1] = '0';
    out[2] = '-';
    detail::write_hex(p.trace_id.data(), p.trace_id.size(), out + 3);
    out[35] = '-';
    detail::write_hex(p.parent_id.data(), p.parent_id.size(), out + 36);
    out[52] = '-';
    detail::write_hex(&p.flags, 1, out + 53);
}

std::string to_traceparent(const TraceParent& parent) {
    std::string text(traceparent_size, '\0');
    write_traceparent(parent, text.data());
    return text;
}

std::string to_hex(const TraceId& id) {
    std::string text(2 * id.size(), '\0');
    detail::write_hex(id.data(), id.size(), text.data());
    return text;
}

std::string to_hex(const SpanId& id) {
    std::string text(2 * id.size(), '\0');
    detail::write_hex(id.data(), id.size(), text.data());
    return text;
}

TraceContext TraceContext::child_of(const TraceParent& parent, const SpanId& span_id, std::string tracestate) {
    return TraceContext{parent.trace_id, span_id, parent.parent_id, parent.flags, std::move(tracestate)};
}

SpanId new_span_id() noexcept {
    auto& rng = detail::thread_rng();
    SpanId id;
    do {
        const std::uint32_t a = rng(), b = rng();
        std::memcpy(id.data(), &a, 4);
        std::memcpy(id.data() + 4, &b, 4);
    } while (detail::all_zero(id));
    return id;
}

TraceContext new_trace(bool sampled) {
    TraceContext c;
    auto& rng = detail::thread_rng();
    do {
        for (std::size_t i = 0; i < c.trace_id.size(); i += 4) {
            const std::uint32_t word = rng();
            std::memcpy(c.trace_id.data() + i, &word, 4);
        }
    } while (detail::all_zero(c.trace_id));
    c.span_id = new_span_id();
    c.flags = sampled ? trace_flag_sampled : 0;
    return c;
}

std::optional<TraceContext> current_trace() {
    if (const auto* c = innermost) return *c;
    return std::nullopt;
}

TraceScope::TraceScope(TraceContext context) noexcept : context_(std::move(context)) {
    if (detail::all_zero(context_.trace_id) || detail::all_zero(context_.span_id)) {
        context_ = new_trace(context_.sampled());
        continued_ = false;
    }
    outer_ = detail::set_innermost_trace(&context_);
}

TraceScope::TraceScope(std::string_view traceparent, std::string_view tracestate) {
    if (auto p = parse_traceparent(traceparent)) {
        context_.trace_id = p->trace_id;
        context_.span_id = p->parent_id;
        context_.flags = p->flags;
        if (tracestate.size() <= max_tracestate_size) context_.tracestate = std::string(tracestate);
    } else {
        context_ = new_trace(false);
        continued_ = false;
    }
    outer_ = detail::set_innermost_trace(&context_);
}

TraceScope::~TraceScope() { detail::set_innermost_trace(outer_); }

}  // namespace rpclb

namespace rpclb::detail {

const TraceContext* innermost_trace() noexcept { return innermost; }

const TraceContext* set_innermost_trace(const TraceContext* context) noexcept {
    const auto* outer = innermost;
    innermost = context;
    return outer;
}

void write_hex(const std::uint8_t* bytes, std::size_t size, char* out) noexcept {
    for (std::size_t i = 0; i < size; ++i) std::memcpy(out + 2 * i, &hex_pairs[2 * bytes[i]], 2);
}

TraceText::TraceText(const TraceId& trace_id, const SpanId& span_id, const SpanId* parent_id) noexcept : set(true) {
    write_hex(trace_id.data(), trace_id.size(), trace);
    write_hex(span_id.data(), span_id.size(), span);
    if (parent_id && !all_zero(*parent_id)) {
        write_hex(parent_id->data(), parent_id->size(), parent);
        has_parent = true;
    }
}

Event trace_span_event(const TraceText& ids, std::string_view kind, std::chrono::system_clock::time_point wall_start,
                 std::chrono::steady_clock::time_point start) noexcept {
    Event e{.name = EventName::rpc_span};
    e.system_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wall_start.time_since_epoch()).count();
    e.duration = std::chrono::steady_clock::now() - start;
    e.type = "call";
    e.kind = kind;
    e.trace_id = ids.trace_id();
    e.span_id = ids.span_id();
    e.parent_span_id = ids.parent_span_id();
    return e;
}

}  // namespace rpclb::detail
