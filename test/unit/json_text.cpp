// The wire's JSON writer (src/transport/json_text.hpp) writes exactly what Boost.JSON's
// serializer writes, for every kind of value, escape and nesting depth.
#define BOOST_TEST_MODULE json_text
#include <boost/test/unit_test.hpp>

#include "../../src/transport/json_text.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <string>

namespace json = boost::json;
using rpclb::detail::wire::append_json;
using rpclb::detail::wire::append_json_string;
using rpclb::detail::wire::first_escape;

namespace {

std::string written(const json::value& v) {
    std::string out;
    append_json(out, v);
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_kind_of_value_is_written_as_the_serializer_writes_it) {
    const char* texts[] = {
        "null", "true", "false", "0", "-1", "9223372036854775807", "-9223372036854775808",
        "18446744073709551615", "1.5", "-0.0", "1e300", "2.2250738585072014e-308", "\"\"",
        "[]", "{}", "[1,\"a\",[null,{}],{\"k\":[true,false]}]", "{\"a\":{\"b\":{\"c\":\"d\"}},\"\\n\":1}",
        "\"caf\\u00e9 \xe2\x82\xac \\ud83d\\ude00\"",
    };
    for (const char* text : texts) {
        const auto v = json::parse(text);
        BOOST_TEST(written(v) == json::serialize(v), text);
    }
}

BOOST_AUTO_TEST_CASE(every_byte_is_escaped_as_the_serializer_escapes_it) {
    // Each byte value, at each position of an eight-byte word and across word edges.
    for (int c = 0; c < 256; ++c) {
        for (std::size_t at = 0; at < 20; ++at) {
            std::string s(23, 'x');
            s[at] = static_cast<char>(c);
            const json::value v = json::string(s);
            std::string out;
            append_json_string(out, s);
            BOOST_TEST_REQUIRE(out == json::serialize(v), "byte " << c << " at " << at);
        }
    }
}

BOOST_AUTO_TEST_CASE(first_escape_finds_the_first_byte_to_escape) {
    BOOST_TEST(first_escape("") == 0u);
    BOOST_TEST(first_escape(std::string(100, 'a')) == 100u);
    BOOST_TEST(first_escape(std::string(64, 'a') + "\"") == 64u);
    BOOST_TEST(first_escape("abc\\") == 3u);
    BOOST_TEST(first_escape(std::string(9, 'a') + '\x1f' + "\"") == 9u);
    // Bytes above 0x7f (UTF-8) and DEL need no escape, and do not hide one after them.
    BOOST_TEST(first_escape("\xff\xfe\x80\x7f\xc3\xa9\x01") == 6u);
    BOOST_TEST(first_escape("\x20\x21\x23\x5b\x5d\x7e") == 6u);
}

// The scan works in blocks (64 and 16 bytes with SSE2, 8 without): put each byte value at
// every offset across two blocks and check against a byte-at-a-time reference, with
// clean bytes on both sides, including the high ones a signed compare would misread.
BOOST_AUTO_TEST_CASE(first_escape_agrees_with_a_byte_at_a_time_scan_at_every_offset) {
    const auto reference = [](std::string_view s) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            const auto c = static_cast<unsigned char>(s[i]);
            if (c < 0x20 || c == '"' || c == '\\') return i;
        }
        return s.size();
    };
    for (int c = 0; c < 256; ++c) {
        for (std::size_t length : {1u, 15u, 16u, 17u, 63u, 64u, 65u, 130u}) {
            for (std::size_t at = 0; at < length; ++at) {
                std::string s(length, '\x80');
                for (std::size_t i = 0; i < length; ++i) s[i] = static_cast<char>(0x20 + (i * 37) % 0xdf);
                for (auto& b : s)
                    if (b == '"' || b == '\\') b = 'a';
                s[at] = static_cast<char>(c);
                BOOST_TEST_REQUIRE(first_escape(s) == reference(s), "byte " << c << " at " << at << " of " << length);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(deep_nesting_and_long_strings_are_written_whole) {
    std::string deep;
    for (int i = 0; i < 300; ++i) deep += "[{\"k\":";
    deep += "1";
    for (int i = 0; i < 300; ++i) deep += "}]";
    json::parse_options o;
    o.max_depth = 1000;
    const auto v = json::parse(deep, {}, o);
    BOOST_TEST(written(v) == json::serialize(v));

    std::string big(1 << 20, 'x');
    big[12345] = '"';
    big[(1 << 20) - 1] = '\n';
    const json::value s(json::array{1, big});
    BOOST_TEST(written(s) == json::serialize(s));
}
