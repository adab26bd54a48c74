#include "transport/json_text.hpp"

#include <boost/json/serializer.hpp>

#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rpclb::detail::wire {
namespace json = boost::json;

namespace {

constexpr bool needs_escape(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

constexpr std::size_t max_depth = 64;

// Through json::serializer, which the text must match anyway.
void append_serialized(std::string& out, const json::value& v) {
    json::serializer sr;
    sr.reset(&v);
    char buf[512];
    while (!sr.done()) out += sr.read(buf, sizeof buf);
}

template <class N>
void append_number(std::string& out, N n) {
    char buf[24];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, end);
}

void append_at(std::string& out, const json::value& v, std::size_t depth);

void append_at(std::string& out, const json::array& a, std::size_t depth) {
    out += '[';
    bool first = true;
    for (const auto& e : a) {
        if (!first) out += ',';
        first = false;
        append_at(out, e, depth + 1);
    }
    out += ']';
}

void append_at(std::string& out, const json::object& o, std::size_t depth) {
    out += '{';
    bool first = true;
    for (const auto& kv : o) {
        if (!first) out += ',';
        first = false;
        append_json_string(out, kv.key());
        out += ':';
        append_at(out, kv.value(), depth + 1);
    }
    out += '}';
}

void append_at(std::string& out, const json::value& v, std::size_t depth) {
    switch (v.kind()) {
    case json::kind::null: out += "null"; return;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; return;
    case json::kind::int64: return append_number(out, v.get_int64());
    case json::kind::uint64: return append_number(out, v.get_uint64());
    case json::kind::double_: return append_serialized(out, v);
    case json::kind::string: return append_json_string(out, v.get_string());
    case json::kind::array:
        if (depth >= max_depth) return append_serialized(out, v);
        return append_at(out, v.get_array(), depth);
    case json::kind::object:
        if (depth >= max_depth) return append_serialized(out, v);
        return append_at(out, v.get_object(), depth);
    }
}

}  // namespace

#if defined(__SSE2__)
// Sixteen bytes a compare (SSE2 is part of x86-64), four compares a step: a 64 KiB string
// is scanned in about a third of the time the eight-byte word loop below takes.
std::size_t first_escape(std::string_view s) noexcept {
    const char* p = s.data();
    const std::size_t n = s.size();
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), last_control = _mm_set1_epi8(0x1f);
    // 0xff in each lane that holds '"', '\\' or a byte up to 0x1f (unsigned).
    const auto escapes = [&](std::size_t at) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + at));
        return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                            _mm_cmpeq_epi8(_mm_min_epu8(v, last_control), v));
    };
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m128i any = _mm_or_si128(_mm_or_si128(escapes(i), escapes(i + 16)),
                                         _mm_or_si128(escapes(i + 32), escapes(i + 48)));
        if (_mm_movemask_epi8(any) != 0) break;
    }
    for (; i + 16 <= n; i += 16)
        if (const auto mask = static_cast<unsigned>(_mm_movemask_epi8(escapes(i))); mask != 0)
            return i + static_cast<std::size_t>(std::countr_zero(mask));
    for (; i < n; ++i)
        if (needs_escape(static_cast<unsigned char>(p[i]))) return i;
    return n;
}
#else
namespace {
constexpr std::uint64_t ones = 0x0101010101010101ull;
constexpr std::uint64_t highs = 0x8080808080808080ull;

// Bytes of `w` below `n` (n <= 128) have their high bit set in the result; a byte after
// one that is may be flagged too (the borrow runs on), which only sends the caller to its
// byte-at-a-time check a little early.
constexpr std::uint64_t bytes_below(std::uint64_t w, std::uint64_t n) { return (w - ones * n) & ~w & highs; }
}  // namespace

std::size_t first_escape(std::string_view s) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        std::uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        const auto quote = bytes_below(w ^ (ones * '"'), 1);
        const auto backslash = bytes_below(w ^ (ones * '\\'), 1);
        if ((quote | backslash | bytes_below(w, 0x20)) != 0) break;
    }
    for (; i < s.size(); ++i)
        if (needs_escape(static_cast<unsigned char>(s[i]))) return i;
    return s.size();
}
#endif

void append_json_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    // A long string grows the output once, to its own size plus room for the rest of a
    // frame, instead of by doubling: the doubling that the frame's last bytes set off took
    // a 64 KiB argument's frame to a 128 KiB buffer, which glibc maps and unmaps on every
    // call (fresh pages, faulted in again each time; bench/README.md, rpc_throughput).
    if (constexpr std::size_t long_string = 4096, tail_room = 1024;
        s.size() >= long_string && out.capacity() - out.size() < s.size() + tail_room)
        out.reserve(out.size() + s.size() + tail_room);
    out += '"';
    while (!s.empty()) {
        const auto n = first_escape(s);
        out.append(s.data(), n);
        if (n == s.size()) break;
        const auto c = static_cast<unsigned char>(s[n]);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
        s.remove_prefix(n + 1);
    }
    out += '"';
}

void append_json(std::string& out, const json::value& v) { append_at(out, v, 0); }
void append_json(std::string& out, const json::array& a) { append_at(out, a, 0); }
void append_json(std::string& out, const json::object& o) { append_at(out, o, 0); }

}  // namespace rpclb::detail::wire
