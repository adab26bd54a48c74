// JSON text of the values a frame carries, appended to a string (internal).
#pragma once

#include <boost/json/value.hpp>

#include <cstddef>
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

}  // namespace rpclb::detail::wire
