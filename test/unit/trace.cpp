// W3C traceparent read and written (W3C Trace Context Level 1 §3.2), and how a request
// frame carries it: never a reason to refuse the frame.
#define BOOST_TEST_MODULE trace
#include <boost/test/unit_test.hpp>

#include <rpclb/trace.hpp>
#include <rpclb/detail/wire.hpp>

#include <boost/json/serialize.hpp>

#include <set>
#include <string>
#include <vector>

namespace wire = rpclb::detail::wire;

namespace {

// The example of W3C Trace Context §3.2.2.
const std::string example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string with_version(std::string_view version) { return std::string(version) + example.substr(2); }

}  // namespace

BOOST_AUTO_TEST_SUITE(traceparent)

BOOST_AUTO_TEST_CASE(parse_reads_version_00) {
    const auto p = rpclb::parse_traceparent(example);
    BOOST_REQUIRE(p);
    BOOST_TEST(rpclb::to_hex(p->trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(rpclb::to_hex(p->parent_id) == "00f067aa0ba902b7");
    BOOST_TEST(p->flags == 1);
    BOOST_TEST(p->sampled());
    BOOST_TEST(!rpclb::parse_traceparent(example.substr(0, 53) + "00")->sampled());
}

BOOST_AUTO_TEST_CASE(format_round_trips) {
    const auto p = rpclb::parse_traceparent(example);
    BOOST_REQUIRE(p);
    BOOST_TEST(rpclb::to_traceparent(*p) == example);
}

BOOST_AUTO_TEST_CASE(parse_refuses_version_ff) {
    BOOST_TEST(!rpclb::parse_traceparent(with_version("ff")).has_value());
}

BOOST_AUTO_TEST_CASE(parse_reads_future_versions_by_their_first_fields) {
    // §3.2.4: a higher version is read as version 00, whatever follows a '-'.
    const auto later = rpclb::parse_traceparent(with_version("cc"));
    BOOST_REQUIRE(later);
    BOOST_TEST(rpclb::to_hex(later->trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(rpclb::parse_traceparent(with_version("cc") + "-what-comes-next").has_value());
    // ...but not when its fields run on without the '-'; version 00 may not grow at all.
    BOOST_TEST(!rpclb::parse_traceparent(with_version("cc") + "x").has_value());
    BOOST_TEST(!rpclb::parse_traceparent(example + "-00").has_value());
}

BOOST_AUTO_TEST_CASE(parse_refuses_uppercase_hex) {
    BOOST_TEST(!rpclb::parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent(with_version("0A")).has_value());
}

BOOST_AUTO_TEST_CASE(parse_refuses_all_zero_ids) {
    BOOST_TEST(!rpclb::parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").has_value());
}

BOOST_AUTO_TEST_CASE(parse_refuses_wrong_length_separators_and_non_hex) {
    BOOST_TEST(!rpclb::parse_traceparent("").has_value());
    BOOST_TEST(!rpclb::parse_traceparent(example.substr(0, 54)).has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01").has_value());
    BOOST_TEST(!rpclb::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x").has_value());
}

BOOST_AUTO_TEST_CASE(new_trace_draws_nonzero_distinct_ids) {
    std::set<std::string> traces;
    for (int i = 0; i < 100; ++i) {
        const auto t = rpclb::new_trace(i % 2 == 0);
        BOOST_TEST(t.sampled() == (i % 2 == 0));
        BOOST_TEST((t.parent_span_id == rpclb::SpanId{}));
        BOOST_TEST((t.span_id != rpclb::SpanId{}));
        traces.insert(rpclb::to_hex(t.trace_id));
    }
    BOOST_TEST(traces.size() == 100u);
}

BOOST_AUTO_TEST_CASE(scope_sets_the_context_and_restores_the_outer_one) {
    BOOST_TEST(!rpclb::current_trace().has_value());
    {
        const rpclb::TraceScope outer(example);
        BOOST_TEST(outer.continued());
        auto seen = rpclb::current_trace();
        BOOST_REQUIRE(seen);
        BOOST_TEST(rpclb::to_hex(seen->span_id) == "00f067aa0ba902b7");
        {
            const rpclb::TraceScope inner(rpclb::new_trace(false));
            BOOST_TEST(rpclb::to_hex(rpclb::current_trace()->trace_id) != "4bf92f3577b34da6a3ce929d0e0e4736");
        }
        BOOST_TEST(rpclb::to_hex(rpclb::current_trace()->trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736");
    }
    BOOST_TEST(!rpclb::current_trace().has_value());
    const rpclb::TraceScope bad("00-xyz");
    BOOST_TEST(!bad.continued());
    BOOST_TEST((rpclb::current_trace()->trace_id != rpclb::TraceId{}));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_CASE(parse_reads_every_hex_digit_in_every_place_and_nothing_else) {
    // Each character of the ids and flags, replaced by each of the 256 byte values: read
    // when it is a lowercase hex digit, with its value; refused otherwise.
    const auto digit = [](int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const auto original = *rpclb::parse_traceparent(example);
    for (std::size_t place = 3; place < example.size(); ++place) {
        if (place == 35 || place == 52) continue;  // the separators
        for (int c = 0; c < 256; ++c) {
            std::string text = example;
            text[place] = static_cast<char>(c);
            const auto p = rpclb::parse_traceparent(text);
            if (digit(c) < 0) {
                BOOST_TEST(!p.has_value(), "place " << place << " byte " << c);
                continue;
            }
            BOOST_REQUIRE_MESSAGE(p.has_value(), "place " << place << " byte " << c);
            BOOST_TEST(rpclb::to_traceparent(*p) == text);
            auto expected = original;
            std::uint8_t* byte = place < 35 ? &expected.trace_id[(place - 3) / 2]
                               : place < 52 ? &expected.parent_id[(place - 36) / 2]
                                            : &expected.flags;
            const bool high = (place < 35 ? place - 3 : place < 52 ? place - 36 : place - 53) % 2 == 0;
            *byte = static_cast<std::uint8_t>(high ? (*byte & 0x0f) | digit(c) << 4 : (*byte & 0xf0) | digit(c));
            BOOST_TEST((*p == expected), "place " << place << " byte " << c);
        }
    }
}

BOOST_AUTO_TEST_CASE(written_ids_match_a_byte_by_byte_formatter) {
    std::uint32_t state = 12345;  // a fixed sequence of ids: every byte value many times
    const auto next = [&state] { return static_cast<std::uint8_t>((state = state * 1664525u + 1013904223u) >> 24); };
    for (int i = 0; i < 1000; ++i) {
        rpclb::TraceParent p;
        for (auto& b : p.trace_id) b = next();
        for (auto& b : p.parent_id) b = next();
        p.flags = next();
        p.trace_id[0] |= 1;
        p.parent_id[0] |= 1;
        std::string expected = "00-";
        const auto hex = [&expected](std::uint8_t b) { expected += "0123456789abcdef"[b >> 4]; expected += "0123456789abcdef"[b & 15]; };
        for (auto b : p.trace_id) hex(b);
        expected += '-';
        for (auto b : p.parent_id) hex(b);
        expected += '-';
        hex(p.flags);
        BOOST_TEST(rpclb::to_traceparent(p) == expected);
        BOOST_TEST(rpclb::to_hex(p.trace_id) == expected.substr(3, 32));
        BOOST_TEST(rpclb::to_hex(p.parent_id) == expected.substr(36, 16));
        BOOST_TEST((rpclb::parse_traceparent(expected) == p));
    }
}


BOOST_AUTO_TEST_SUITE(request_frame)

BOOST_AUTO_TEST_CASE(request_carries_traceparent_and_tracestate) {
    wire::Request r{7, "m", "f", {}, ""};
    r.trace = *rpclb::parse_traceparent(example);
    r.trace_read = wire::TraceRead::valid;
    r.tracestate = "congo=t61rcWkgMzE";
    const auto text = wire::encode(r);
    BOOST_TEST(text.find("\"tp\":\"" + example + "\"") != std::string::npos);
    auto decoded = wire::decode(text);
    BOOST_REQUIRE(decoded);
    const auto& back = std::get<wire::Request>(*decoded);
    BOOST_TEST((back.trace_read == wire::TraceRead::valid));
    BOOST_TEST((back.trace == r.trace));
    BOOST_TEST(back.tracestate == "congo=t61rcWkgMzE");
}

BOOST_AUTO_TEST_CASE(request_without_traceparent_decodes_as_absent) {
    auto decoded = wire::decode(R"({"t":"req","id":1,"m":"m","f":"f","a":[]})");
    BOOST_REQUIRE(decoded);
    BOOST_TEST((std::get<wire::Request>(*decoded).trace_read == wire::TraceRead::absent));
    BOOST_TEST(wire::encode(std::get<wire::Request>(*decoded)).find("tp") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(malformed_traceparent_leaves_the_frame_valid) {
    const std::vector<std::string> bad{R"("01-zz")", "17",
                                       R"("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")",
                                       "\"" + std::string(300, 'a') + "\""};
    for (const auto& tp : bad) {
        auto decoded = wire::decode(R"({"t":"req","id":1,"m":"m","f":"f","a":[],"tp":)" + tp + R"(,"ts":"a=b"})");
        BOOST_REQUIRE(decoded);
        const auto& r = std::get<wire::Request>(*decoded);
        BOOST_TEST((r.trace_read == wire::TraceRead::malformed), tp);
        BOOST_TEST(r.tracestate.empty());  // ignored without a valid traceparent (§3.3)
    }
}

BOOST_AUTO_TEST_CASE(tracestate_is_read_wherever_it_stands) {
    const std::string tp = R"("tp":")" + example + "\"";
    for (const std::string members : {R"("lb":"x","to":5,)" + tp + R"(,"ts":"a=b")", R"("ts":"a=b",)" + tp,
                                      R"("lb":"",)" + tp + R"(,"ts":"a=b")", tp + R"(,"later":1,"ts":"a=b")"}) {
        auto decoded = wire::decode(R"({"t":"req","id":1,"m":"m","f":"f","a":[],)" + members + "}");
        BOOST_REQUIRE(decoded);
        const auto& r = std::get<wire::Request>(*decoded);
        BOOST_TEST((r.trace_read == wire::TraceRead::valid), members);
        BOOST_TEST(r.tracestate == "a=b", members);
    }
}

BOOST_AUTO_TEST_CASE(cast_carries_traceparent_and_tracestate_like_a_request) {
    wire::Cast c{"m", "f", {}, "lb"};
    c.trace = *rpclb::parse_traceparent(example);
    c.trace_read = wire::TraceRead::valid;
    c.tracestate = "congo=t61rcWkgMzE";
    auto decoded = wire::decode(wire::encode(c));
    BOOST_REQUIRE(decoded);
    const auto& back = std::get<wire::Cast>(*decoded);
    BOOST_TEST((back.trace_read == wire::TraceRead::valid));
    BOOST_TEST((back.trace == c.trace));
    BOOST_TEST(back.tracestate == "congo=t61rcWkgMzE");
    BOOST_TEST(back.load_balancer == "lb");
    // A malformed one leaves the cast valid; none at all reads as absent.
    auto bad = wire::decode(R"({"t":"cast","m":"m","f":"f","a":[],"tp":"00-zz"})");
    BOOST_REQUIRE(bad);
    BOOST_TEST((std::get<wire::Cast>(*bad).trace_read == wire::TraceRead::malformed));
    auto none = wire::decode(R"({"t":"cast","m":"m","f":"f","a":[]})");
    BOOST_REQUIRE(none);
    BOOST_TEST((std::get<wire::Cast>(*none).trace_read == wire::TraceRead::absent));
}

// The parser reads a top-level string "tp" as it goes (src/transport/frame_parser.hpp):
// the frame around it must read as if it were in the document.
BOOST_AUTO_TEST_CASE(traceparent_is_read_in_any_place_and_spelling) {
    const auto expected = *rpclb::parse_traceparent(example);
    const std::string escaped_value = "\\u0030" + example.substr(1);  // \u0030 is '0'
    for (const std::string frame : {
             R"({"tp":")" + example + R"(","t":"req","id":1,"m":"m","f":"f","a":[],"lb":"x"})",
             R"({"t":"req","id":1,"tp":")" + example + R"(","m":"m","f":"f","a":[],"lb":"x"})",
             R"({"t":"req","id":1,"m":"m","f":"f","a":[],"lb":"x","t\u0070":")" + example + "\"}",
             R"({"t":"req","id":1,"m":"m","f":"f","a":[],"lb":"x","tp":")" + escaped_value + "\"}",
             R"({"t":"req","id":1,"m":"m","f":"f","tp":"00-zz","a":[],"lb":"x","tp":")" + example + "\"}"}) {
        auto decoded = wire::decode(frame);
        BOOST_REQUIRE_MESSAGE(decoded, frame);
        const auto& r = std::get<wire::Request>(*decoded);
        BOOST_TEST((r.trace_read == wire::TraceRead::valid), frame);
        BOOST_TEST((r.trace == expected), frame);
        BOOST_TEST(r.id == 1u);
        BOOST_TEST(r.module == "m");
        BOOST_TEST(r.load_balancer == "x", frame);
    }
}

BOOST_AUTO_TEST_CASE(traceparent_of_another_kind_is_malformed_and_the_rest_is_read) {
    for (const std::string tp : {"null", "true", "1.5", "[]", R"({"tp":"x"})", R"(["00-"])"}) {
        auto decoded =
            wire::decode(R"({"t":"req","id":3,"m":"m","tp":)" + tp + R"(,"f":"f","a":[1],"lb":"x","ts":"a=b"})");
        BOOST_REQUIRE_MESSAGE(decoded, tp);
        const auto& r = std::get<wire::Request>(*decoded);
        BOOST_TEST((r.trace_read == wire::TraceRead::malformed), tp);
        BOOST_TEST(r.tracestate.empty());
        BOOST_TEST(r.load_balancer == "x");
        BOOST_TEST(boost::json::serialize(r.args) == "[1]");
    }
}

BOOST_AUTO_TEST_CASE(traceparent_inside_the_arguments_stays_an_argument) {
    const std::string nested = R"([{"tp":")" + example + R"(","n":[{"tp":"x"}]},"tp"])";
    auto decoded = wire::decode(R"({"t":"req","id":1,"m":"m","f":"f","a":)" + nested + "}");
    BOOST_REQUIRE(decoded);
    const auto& r = std::get<wire::Request>(*decoded);
    BOOST_TEST((r.trace_read == wire::TraceRead::absent));
    BOOST_TEST(boost::json::serialize(r.args) == nested);
}

BOOST_AUTO_TEST_CASE(traceparent_of_a_large_frame_is_read_too) {
    // Over the size up to which each thread keeps its parser: a parser of its own.
    wire::Request r{9, "m", "f", {boost::json::string(200 * 1024, 'x')}, ""};
    r.trace = *rpclb::parse_traceparent(example);
    r.trace_read = wire::TraceRead::valid;
    auto decoded = wire::decode(wire::encode(r));
    BOOST_REQUIRE(decoded);
    const auto& back = std::get<wire::Request>(*decoded);
    BOOST_TEST((back.trace_read == wire::TraceRead::valid));
    BOOST_TEST((back.trace == r.trace));
    BOOST_TEST(back.args.at(0).as_string().size() == 200u * 1024);
}

BOOST_AUTO_TEST_CASE(frame_after_a_broken_one_reads_its_own_traceparent) {
    // The thread's parser is reused: nothing of a frame that failed may leak into the next.
    BOOST_TEST(!wire::decode(R"({"t":"req","id":1,"tp":")" + example + R"(","m":)").has_value());
    auto decoded = wire::decode(R"({"t":"req","id":2,"m":"m","f":"f","a":[]})");
    BOOST_REQUIRE(decoded);
    BOOST_TEST((std::get<wire::Request>(*decoded).trace_read == wire::TraceRead::absent));
    // Nor of one whose "tp" ended up in an answer, where it means nothing.
    BOOST_TEST(wire::decode(R"({"t":"res","id":4,"ok":1,"tp":")" + example + "\"}").has_value());
    decoded = wire::decode(R"({"t":"req","id":5,"m":"m","f":"f","a":[],"tp":17})");
    BOOST_REQUIRE(decoded);
    BOOST_TEST((std::get<wire::Request>(*decoded).trace_read == wire::TraceRead::malformed));
}

BOOST_AUTO_TEST_CASE(oversize_tracestate_is_dropped) {
    auto decoded = wire::decode(R"({"t":"req","id":1,"m":"m","f":"f","a":[],"tp":")" + example + R"(","ts":")" +
                                std::string(rpclb::max_tracestate_size + 1, 'a') + "\"}");
    BOOST_REQUIRE(decoded);
    const auto& r = std::get<wire::Request>(*decoded);
    BOOST_TEST((r.trace_read == wire::TraceRead::valid));
    BOOST_TEST(r.tracestate.empty());
}

BOOST_AUTO_TEST_SUITE_END()
