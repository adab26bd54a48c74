// libFuzzer target for the frame codec (src/transport/wire.cpp): any text either decodes or is
// refused with a DecodeError, never crashes; a frame that decodes encodes to text that
// decodes to the same frame (compared through a second encoding, as JSON values).
// Numbers are compared within a rounding step (json_same.hpp).
#include "json_same.hpp"

#include <rpclb/detail/wire.hpp>

#include <boost/json/parse.hpp>

#include <cstdint>
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
    if (reencoded != encoded && !rpclb::fuzz::same(boost::json::parse(encoded), boost::json::parse(reencoded)))
        fail("encode(decode(encode(f))) != encode(f)", encoded, reencoded);
    return 0;
}
