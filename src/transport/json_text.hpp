// JSON text of the values a frame carries, appended to a string (internal).
#pragma once

#include <boost/json/value.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rpclb::detail::wire {

/// Index of the first byte of `s` that a JSON string must escape ('"', '\\' or a control
/// character below 0x20, RFC 8259 section 7), or s.size() when there is none. Scans 64
/// bytes a step with SSE2 on x86-64, eight bytes a step elsewhere. Thread safety: pure
/// function.
std::size_t first_escape(std::string_view s) noexcept;

/// Appends `s` as a JSON string, quotes included, escaped as json::serializer escapes
/// (\" \\ \b \f \n \r \t, other control characters as \u00xx; every other byte as is,
/// so UTF-8 passes through unchanged). Thread safety: pure function.
void append_json_string(std::string& out, std::string_view s);

/// Appends the JSON text of `v`, byte for byte what json::serialize writes. Strings are
/// written with append_json_string: Boost.JSON 1.81's serializer falls back to a byte at a
/// time for the rest of a string once its output buffer runs short mid-string, which made
/// a 64 KiB string cost about 68 µs instead of a few (bench/README.md, rpc_throughput).
/// Numbers that are doubles, and values nested deeper than 64 levels, go through
/// json::serializer (same text; no recursion limit). Thread safety: pure function.
void append_json(std::string& out, const boost::json::value& v);
void append_json(std::string& out, const boost::json::array& a);
void append_json(std::string& out, const boost::json::object& o);

/// Appends compact JSON to one string. Strings and JSON values are written straight into
/// the output buffer (append_json_string, append_json), so a request's arguments are
/// neither copied into a temporary document nor serialized into a temporary string.
///
/// Each member function writes one member of the object being built; `begin_*` opens a
/// nested container (keyed at object level, unkeyed for array elements). Keys must be
/// plain ASCII that needs no escaping (the codec's literals). Thread safety: none.
class JsonWriter {
public:
    explicit JsonWriter(std::string buffer = {}) : out_(std::move(buffer)) {
        out_.clear();
        out_.reserve(256);
    }

    void begin_object() { open('{'); }
    void end_object() { close('}'); }
    void begin_array(std::string_view key) {
        write_key(key);
        open('[');
    }
    void end_array() { close(']'); }

    void string(std::string_view key, std::string_view s) {
        write_key(key);
        append_json_string(out_, s);
        need_comma_ = true;
    }

    void uint64(std::string_view key, std::uint64_t n) { number(key, n); }
    void integer(std::string_view key, int n) { number(key, n); }

    void boolean(std::string_view key, bool b) {
        write_key(key);
        out_ += b ? "true" : "false";
        need_comma_ = true;
    }

    /// `text` as the value of `key`, written as it is: it must be valid JSON.
    void raw(std::string_view key, std::string_view text) {
        write_key(key);
        out_ += text;
        need_comma_ = true;
    }

    /// A whole member, `"key":value`, written as it is: it must be valid JSON.
    void member(std::string_view text) {
        separate();
        out_ += text;
        need_comma_ = true;
    }

    template <class Json>  // json::value, json::array or json::object
    void value(std::string_view key, const Json& v) {
        write_key(key);
        append_json(out_, v);
        need_comma_ = true;
    }

    std::string finish() && { return std::move(out_); }

private:
    void separate() {
        if (need_comma_) out_ += ',';
        need_comma_ = false;
    }

    void write_key(std::string_view key) {
        separate();
        out_ += '"';
        out_ += key;
        out_ += "\":";
    }

    void open(char c) {
        separate();
        out_ += c;
    }

    void close(char c) {
        out_ += c;
        need_comma_ = true;
    }

    template <class N>
    void number(std::string_view key, N n) {
        write_key(key);
        char buf[24];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
        out_.append(buf, end);
        need_comma_ = true;
    }

    std::string out_;
    bool need_comma_ = false;  // a value was just written at this nesting level
};


}  // namespace rpclb::detail::wire
