// Reading fields of Boost.JSON documents, shared by the wire codec (src/transport/wire.cpp), the
// configuration loader (src/lifecycle/config.cpp) and the admin protocol (src/admin/protocol.cpp):
// exact conversions of one value, the names of JSON kinds used in error messages, the paths
// ("balancers[0].name") that name a field, and the check for numbers too large for a double.
//
// Private to librpclb (not installed).
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb::detail::json_fields {

/// Whether every number in `v` is finite. Boost.JSON 1.81 parses a number too large for a
/// double (1e999) as infinity instead of failing, and serialize() then writes `Infinity`,
/// which no JSON parser reads: whatever echoes or forwards a parsed document (a response,
/// an admin answer, a balancer's options announced to peers) must refuse such a document
/// first. Walks the document, one step per JSON value, where a scan of the text would
/// cost one per byte (a 64 KiB string is one value).
inline bool all_finite(const boost::json::value& v) noexcept {
    switch (v.kind()) {
    case boost::json::kind::double_: return std::isfinite(v.get_double());
    case boost::json::kind::array:
        for (const auto& e : v.get_array())
            if (!all_finite(e)) return false;
        return true;
    case boost::json::kind::object:
        for (const auto& m : v.get_object())
            if (!all_finite(m.value())) return false;
        return true;
    default: return true;
    }
}

// ---- exact conversions ---------------------------------------------------------------------
//
// read(value, out) stores the value in `out` and returns true only when its JSON kind is
// the one `out` stands for; otherwise `out` is untouched and it returns false. Nothing is
// coerced: 1.0 and 1e3 are not integers, "1" is not a number, null is nothing but null.
// The overloads taking a non-const value move arrays and objects out of it.

/// A non-negative integer: the parser yields int64 for integers that fit and uint64 only
/// above INT64_MAX, so both kinds are accepted when the number is not negative.
inline std::optional<std::uint64_t> non_negative_integer(const boost::json::value& v) noexcept {
    if (const auto* u = v.if_uint64()) return *u;
    if (const auto* i = v.if_int64(); i && *i >= 0) return static_cast<std::uint64_t>(*i);
    return std::nullopt;
}

inline bool read(const boost::json::value& v, std::string& out) {
    const auto* s = v.if_string();
    if (s) out.assign(s->data(), s->size());
    return s != nullptr;
}

inline bool read(const boost::json::value& v, bool& out) noexcept {
    const auto* b = v.if_bool();
    if (b) out = *b;
    return b != nullptr;
}

inline bool read(const boost::json::value& v, std::uint64_t& out) noexcept {
    const auto n = non_negative_integer(v);
    if (n) out = *n;
    return n.has_value();
}

/// A non-negative integer under 2^32.
inline bool read(const boost::json::value& v, std::uint32_t& out) noexcept {
    const auto n = non_negative_integer(v);
    if (!n || *n > std::numeric_limits<std::uint32_t>::max()) return false;
    out = static_cast<std::uint32_t>(*n);
    return true;
}

/// A non-negative integer of milliseconds.
inline bool read(const boost::json::value& v, std::chrono::milliseconds& out) noexcept {
    const auto n = non_negative_integer(v);
    if (!n || *n > static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max()))
        return false;
    out = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(*n));
    return true;
}

/// An integer in the range of int.
inline bool read(const boost::json::value& v, int& out) noexcept {
    const auto* i = v.if_int64();
    if (!i || *i < std::numeric_limits<int>::min() || *i > std::numeric_limits<int>::max()) return false;
    out = static_cast<int>(*i);
    return true;
}

inline bool read(const boost::json::value& v, boost::json::object& out) {
    const auto* o = v.if_object();
    if (o) out = *o;
    return o != nullptr;
}

// Moves a container out of a decoded document. `out` is move-constructed, not
// move-assigned: it then takes the document's storage (a large frame's is the
// BlockCache), where an assignment between different storages would copy every element.
template <class Container>
void adopt(Container& out, Container& from) noexcept {
    std::destroy_at(&out);
    std::construct_at(&out, std::move(from));
}

inline bool read(boost::json::value& v, boost::json::object& out) {
    auto* o = v.if_object();
    if (o) adopt(out, *o);
    return o != nullptr;
}

inline bool read(boost::json::value& v, boost::json::array& out) {
    auto* a = v.if_array();
    if (a) adopt(out, *a);
    return a != nullptr;
}

// ---- error messages ------------------------------------------------------------------------

/// The kind of a value with its article, for "got ..." in error messages: "null",
/// "a boolean", "an integer", "a negative integer", "a floating-point number", "a string",
/// "an array", "an object". Never the value itself, so nothing a peer or a misplaced secret
/// wrote is echoed.
inline std::string_view describe(const boost::json::value& v) noexcept {
    switch (v.kind()) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64: return v.get_int64() < 0 ? "a negative integer" : "an integer";
    case boost::json::kind::uint64: return "an integer";
    case boost::json::kind::double_: return "a floating-point number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
    }
    return "an unknown value";
}

/// ", got <what>" for the end of an error message: scalars as written, strings and
/// containers by kind only (describe), so that a misplaced secret is never echoed.
inline std::string got(const boost::json::value& v) {
    if (v.is_string() || v.is_structured()) return ", got " + std::string(describe(v));
    return ", got " + boost::json::serialize(v);
}

/// The path of member `key` of the object at `path`: "key" at the top (empty path), else
/// "path.key".
inline std::string member_path(std::string_view path, std::string_view key) {
    std::string out(path);
    if (!out.empty()) out += '.';
    return out.append(key);
}

/// The path of element `index` of the array at `path`: "path[index]".
inline std::string element_path(std::string_view path, std::size_t index) {
    return std::string(path).append("[").append(std::to_string(index)).append("]");
}

}  // namespace rpclb::detail::json_fields
