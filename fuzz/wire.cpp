// libFuzzer target for the frame codec (src/transport/wire.cpp): any text either decodes or is
// refused with a DecodeError, never crashes; a frame that decodes encodes to text that
// decodes to the same frame (compared through a second encoding, as JSON values).
//
// Numbers are compared with a relative tolerance of 1e-15: Boost.JSON 1.81 does not round
// every long decimal to the nearest double, so a number with more digits than a double
// holds may move by one unit in the last place between the first and the second decoding
// (unit.wire, long_decimal_numbers_survive_a_round_trip_within_a_rounding_step).
#include <rpclb/detail/wire.hpp>

#include <boost/json/parse.hpp>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <string_view>

namespace wire = rpclb::detail::wire;

namespace {

[[noreturn]] void fail(const char* what, std::string_view a, std::string_view b) {
    std::fprintf(stderr, "fuzz_wire: %s\n  first:  %.*s\n  second: %.*s\n", what, static_cast<int>(a.size()),
                 a.data(), static_cast<int>(b.size()), b.data());
    std::abort();
}

// Equal JSON values, doubles within a relative 1e-15.
bool same(const boost::json::value& a, const boost::json::value& b) {
    if (a.is_double() || b.is_double()) {
        if (!a.is_number() || !b.is_number()) return false;
        const double x = a.to_number<double>(), y = b.to_number<double>();
        return x == y || std::fabs(x - y) <= 1e-15 * std::max(std::fabs(x), std::fabs(y));
    }
    if (a.kind() != b.kind()) return false;
    if (a.is_array()) {
        const auto &p = a.get_array(), &q = b.get_array();
        if (p.size() != q.size()) return false;
        for (std::size_t i = 0; i < p.size(); ++i)
            if (!same(p[i], q[i])) return false;
        return true;
    }
    if (a.is_object()) {
        const auto &p = a.get_object(), &q = b.get_object();
        if (p.size() != q.size()) return false;
        for (const auto& [key, v] : p) {
            const auto* w = q.if_contains(key);
            if (!w || !same(v, *w)) return false;
        }
        return true;
    }
    return a == b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)wire::peek_frame_id(text, "req");
    (void)wire::peek_frame_id(text, "res");
    // A small limit exercises the size check on the same inputs.
    (void)wire::decode(text, 64);
    auto decoded = wire::decode(text);
    if (!decoded) {
        if (decoded.error().message.empty()) fail("decode error without a message", text, "");
        return 0;
    }
    const auto encoded = wire::encode(*decoded);
    auto again = wire::decode(encoded);
    if (!again) fail("encode() wrote a frame decode() refuses", text, encoded);
    if (wire::type_name(*again) != wire::type_name(*decoded)) fail("frame type changed", text, encoded);
    const auto reencoded = wire::encode(*again);
    if (reencoded != encoded && !same(boost::json::parse(encoded), boost::json::parse(reencoded)))
        fail("encode(decode(encode(f))) != encode(f)", encoded, reencoded);
    return 0;
}
