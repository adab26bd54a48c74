#define BOOST_TEST_MODULE wire
#include <boost/test/unit_test.hpp>

#include <rpclb/detail/deadline.hpp>
#include <rpclb/detail/wire.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace json = boost::json;
namespace proto = rpclb::detail::wire;  // "wire" names the test suite

namespace {

// Field-by-field equality of frames (the frame structs have no operator==).
bool same(const proto::Hello& a, const proto::Hello& b) {
    return a.version == b.version && a.peer == b.peer && a.nonce == b.nonce && a.cancel == b.cancel &&
           a.pieces == b.pieces;
}
bool same(const proto::Auth& a, const proto::Auth& b) { return a.proof == b.proof; }
bool same(const proto::Ready& a, const proto::Ready& b) { return a.proof == b.proof; }
bool same(const proto::Nodes& a, const proto::Nodes& b) { return a.nodes == b.nodes; }
bool same(const proto::GroupSync& a, const proto::GroupSync& b) { return a.groups == b.groups; }
bool same(const proto::GroupJoin& a, const proto::GroupJoin& b) {
    return a.group == b.group && a.meta == b.meta;
}
bool same(const proto::GroupLeave& a, const proto::GroupLeave& b) { return a.group == b.group; }
bool same(const proto::Request& a, const proto::Request& b) {
    return a.id == b.id && a.module == b.module && a.function == b.function && a.args == b.args &&
           a.load_balancer == b.load_balancer && a.timeout_ms == b.timeout_ms;
}
bool same(const proto::Cast& a, const proto::Cast& b) {
    return a.module == b.module && a.function == b.function && a.args == b.args &&
           a.load_balancer == b.load_balancer;
}
bool same(const proto::Response& a, const proto::Response& b) {
    return a.id == b.id && a.result == b.result;
}
bool same(const proto::Bye& a, const proto::Bye& b) { return a.reply == b.reply; }
bool same(const proto::Cancel& a, const proto::Cancel& b) { return a.id == b.id; }
bool same(const proto::Probe& a, const proto::Probe& b) {
    return a.kind == b.kind && a.seq == b.seq && a.node == b.node;
}
bool same(const proto::MemberState& a, const proto::MemberState& b) {
    return a.state == b.state && a.node == b.node && a.incarnation == b.incarnation && a.version == b.version;
}

bool same(const proto::Frame& a, const proto::Frame& b) {
    if (a.index() != b.index()) return false;
    return std::visit(
        [&](const auto& fa) { return same(fa, std::get<std::decay_t<decltype(fa)>>(b)); }, a);
}

proto::PeerInfo peer(std::string node, std::string listen, bool client = false) {
    return proto::PeerInfo{std::move(node), "inc-" + listen, std::move(listen), client};
}

std::vector<proto::Frame> one_of_each() {
    std::vector<proto::Frame> frames;
    frames.emplace_back(proto::Hello{1, peer("a@h", "127.0.0.1:4000"), "00ff"});
    frames.emplace_back(proto::Hello{1, peer("b@h", ""), "abcd"});
    frames.emplace_back(proto::Auth{"cafe"});
    frames.emplace_back(proto::Ready{"beef"});
    frames.emplace_back(proto::Ready{std::string(64, 'f')});
    frames.emplace_back(proto::Nodes{{peer("a@h", "h:1"), peer("c@h", "", true)}});
    frames.emplace_back(proto::Nodes{});
    frames.emplace_back(proto::GroupSync{
        {{"workers", json::object{{"algorithm", "round_robin"}, {"algorithm_opts", json::object{}}}},
         {"other", json::object{}}}});
    frames.emplace_back(proto::GroupJoin{"workers", json::object{{"algorithm", "random"}}});
    frames.emplace_back(proto::GroupLeave{"workers"});
    frames.emplace_back(proto::Request{42, "math", "add", json::array{1, 2.5, "x", nullptr}, ""});
    frames.emplace_back(proto::Request{std::numeric_limits<std::uint64_t>::max(), "m\"od\n",
                                      "f\u00e9", json::array{json::object{{"k", true}}}, "workers"});
    frames.emplace_back(proto::Request{43, "m", "f", json::array{1}, "", 5000});
    frames.emplace_back(proto::Request{44, "m", "f", json::array{}, "workers", 0});
    frames.emplace_back(proto::Cast{"log", "info", json::array{"hello"}, ""});
    frames.emplace_back(proto::Cast{"log", "info", json::array{}, "workers"});
    frames.emplace_back(proto::Response{7, rpclb::CallResult(json::value{{"sum", 3}})});
    frames.emplace_back(proto::Response{8, rpclb::CallResult(json::value(nullptr))});
    frames.emplace_back(proto::Response{
        9, rpclb::CallResult(boost::system::in_place_error,
                             rpclb::call_error(rpclb::ErrorCode::not_found, "no such function",
                                               "b@h", "math", "sub"))});
    frames.emplace_back(proto::Bye{});
    frames.emplace_back(proto::Bye{true});
    frames.emplace_back(proto::Cancel{42});
    proto::Hello cancels{1, peer("c@h", "127.0.0.1:4001"), "00ff"};
    cancels.cancel = true;
    frames.emplace_back(cancels);
    proto::Hello pieces{1, peer("d@h", "127.0.0.1:4002"), "00ff"};
    pieces.pieces = true;
    frames.emplace_back(pieces);
    frames.emplace_back(proto::Probe{proto::ProbeKind::ping, 1, ""});
    frames.emplace_back(proto::Probe{proto::ProbeKind::ping_req, 2, "c@h"});
    frames.emplace_back(proto::Probe{proto::ProbeKind::ack, std::numeric_limits<std::uint64_t>::max(), ""});
    frames.emplace_back(proto::Probe{proto::ProbeKind::nack, 3, ""});
    frames.emplace_back(proto::MemberState{proto::MemberHealth::alive, "a@h", "inc-1", 0});
    frames.emplace_back(proto::MemberState{proto::MemberHealth::suspect, "a@h", "inc-1", 7});
    frames.emplace_back(proto::MemberState{proto::MemberHealth::dead, "a@h", "inc-1", 8});
    return frames;
}

proto::DecodeError decode_error(std::string_view text, std::size_t max_size = proto::default_max_message_size) {
    auto r = proto::decode(text, max_size);
    BOOST_TEST_REQUIRE(r.has_error(), "expected a decode error for " << text);
    return r.error();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wire)

BOOST_AUTO_TEST_CASE(round_trip_each_frame_type) {
    const auto frames = one_of_each();
    std::vector<bool> seen(std::variant_size_v<proto::Frame>, false);
    for (const auto& frame : frames) {
        const auto text = proto::encode(frame);
        auto decoded = proto::decode(text);
        BOOST_TEST_REQUIRE(decoded.has_value(), text << ": " << decoded.error().message);
        BOOST_TEST(same(frame, *decoded), "round trip changed " << text);
        seen[frame.index()] = true;
    }
    for (std::size_t i = 0; i < seen.size(); ++i) BOOST_TEST(seen[i], "no frame of index " << i);
}

BOOST_AUTO_TEST_CASE(probe_and_member_frames_refuse_unknown_words) {
    auto e = decode_error(R"({"t":"probe","k":"poke","seq":1})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(e.message.find("\"k\" has an unknown value \"poke\"") != std::string::npos, e.message);
    e = decode_error(R"({"t":"member","state":"zombie","node":"a","inc":"i","v":0})");
    BOOST_TEST(e.message.find("\"state\" has an unknown value") != std::string::npos, e.message);
    BOOST_TEST(proto::encode(proto::Probe{proto::ProbeKind::ping_req, 5, "b@h"}) ==
               R"({"t":"probe","k":"ping_req","seq":5,"node":"b@h"})");
}

BOOST_AUTO_TEST_CASE(encode_writes_compact_json_with_documented_members) {
    BOOST_TEST(proto::encode(proto::Ready{"beef"}) == R"({"t":"ready","proof":"beef"})");
    BOOST_TEST(proto::encode(proto::Ready{}) == R"({"t":"ready","proof":""})");
    BOOST_TEST(proto::encode(proto::Auth{"cafe"}) == R"({"t":"auth","proof":"cafe"})");
    BOOST_TEST(proto::encode(proto::Request{5, "m", "f", json::array{1, "two"}, ""}) ==
               R"({"t":"req","id":5,"m":"m","f":"f","a":[1,"two"]})");
    BOOST_TEST(proto::encode(proto::Request{5, "m", "f", json::array{1}, "w", 250}) ==
               R"({"t":"req","id":5,"m":"m","f":"f","a":[1],"lb":"w","to":250})");
    BOOST_TEST(proto::encode(proto::Cast{"m", "f", json::array{}, "lb1"}) ==
               R"({"t":"cast","m":"m","f":"f","a":[],"lb":"lb1"})");
    BOOST_TEST(proto::encode(proto::Hello{1, proto::PeerInfo{"a@h", "i", "h:1", false}, "n"}) ==
               R"({"t":"hello","v":1,"node":"a@h","inc":"i","listen":"h:1","client":false,"nonce":"n"})");
    BOOST_TEST(proto::encode(proto::Nodes{{proto::PeerInfo{"a@h", "i", "", true}}}) ==
               R"({"t":"nodes","nodes":[{"node":"a@h","inc":"i","listen":"","client":true}]})");
    BOOST_TEST(proto::encode(proto::GroupSync{{{"g", json::object{{"k", 1}}}, {"h", {}}}}) ==
               R"({"t":"gsync","groups":[{"group":"g","meta":{"k":1}},{"group":"h","meta":{}}]})");
    BOOST_TEST(proto::encode(proto::Bye{}) == R"({"t":"bye"})");
    BOOST_TEST(proto::encode(proto::Bye{true}) == R"({"t":"bye","reply":true})");
    BOOST_TEST(proto::encode(proto::Cancel{7}) == R"({"t":"cancel","id":7})");
    BOOST_TEST(proto::encode(proto::Response{3, rpclb::CallResult(json::value(true))}) ==
               R"({"t":"res","id":3,"ok":true})");
}

BOOST_AUTO_TEST_CASE(encode_escapes_strings) {
    const auto text = proto::encode(proto::GroupLeave{"a\"b\\c\n"});
    BOOST_TEST(text == R"({"t":"gleave","group":"a\"b\\c\n"})");
    BOOST_TEST(json::parse(text).at("group").as_string() == "a\"b\\c\n");
}

BOOST_AUTO_TEST_CASE(encode_handles_arguments_larger_than_initial_buffer) {
    json::array args;
    for (int i = 0; i < 20000; ++i) args.emplace_back("item-" + std::to_string(i));
    const proto::Request req{1, "m", "f", args, ""};
    const auto text = proto::encode(req);
    BOOST_TEST(json::parse(text).at("a") == json::value(args));
    auto decoded = proto::decode(text);
    BOOST_TEST_REQUIRE(decoded.has_value());
    BOOST_TEST(same(*decoded, proto::Frame(req)));
}

BOOST_AUTO_TEST_CASE(type_name_matches_encoded_type_member) {
    for (const auto& frame : one_of_each()) {
        const auto doc = json::parse(proto::encode(frame));
        BOOST_TEST(doc.at("t").as_string() == proto::type_name(frame));
    }
    BOOST_TEST(proto::type_name(proto::Request{}) == "req");
    BOOST_TEST(proto::type_name(proto::GroupSync{}) == "gsync");
    BOOST_TEST(proto::type_name(proto::Response{}) == "res");
}

BOOST_AUTO_TEST_CASE(decode_error_kinds_have_names) {
    BOOST_TEST(proto::to_string(proto::DecodeErrorKind::too_large) == "too_large");
    BOOST_TEST(proto::to_string(proto::DecodeErrorKind::bad_json) == "bad_json");
    BOOST_TEST(proto::to_string(proto::DecodeErrorKind::bad_shape) == "bad_shape");
    BOOST_TEST(proto::to_string(proto::DecodeErrorKind::unknown_type) == "unknown_type");
}

BOOST_AUTO_TEST_CASE(decode_rejects_invalid_json) {
    for (std::string_view text : {"", "{", R"({"t":"ready",})", "not json", R"({"t":"ready"} x)"}) {
        const auto e = decode_error(text);
        BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_json), "for " << text);
        BOOST_TEST(!e.message.empty());
        BOOST_TEST(!e.request_id.has_value());
    }
}

BOOST_AUTO_TEST_CASE(decode_rejects_non_object) {
    for (std::string_view text : {"[]", "1", R"("req")", "null", R"([{"t":"ready"}])"}) {
        const auto e = decode_error(text);
        BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_json), "for " << text);
        BOOST_TEST(e.message.find("object") != std::string::npos, e.message);
    }
}

BOOST_AUTO_TEST_CASE(decode_rejects_oversize_without_parsing) {
    // Invalid JSON over the limit reports too_large, not bad_json: the size check comes
    // before the parser sees the text.
    const std::string garbage(101, '{');
    const auto e = decode_error(garbage, 100);
    BOOST_TEST((e.kind == proto::DecodeErrorKind::too_large));
    BOOST_TEST(e.message.find("101") != std::string::npos, e.message);

    const std::string ready = R"({"t":"ready","proof":"ab"})";
    BOOST_TEST(proto::decode(ready, ready.size()).has_value());
    BOOST_TEST((decode_error(ready, ready.size() - 1).kind == proto::DecodeErrorKind::too_large));
}

BOOST_AUTO_TEST_CASE(decode_reports_request_id_of_oversize_request) {
    // An oversize request from a peer with a larger limit is answered, not left to time out:
    // the id is read from the frame's head without parsing the rest.
    proto::Request request{42, "m", "f", {std::string(200, 'x')}, {}};
    const auto text = proto::encode(request);
    const auto e = decode_error(text, 100);
    BOOST_TEST((e.kind == proto::DecodeErrorKind::too_large));
    BOOST_REQUIRE(e.request_id.has_value());
    BOOST_TEST(*e.request_id == 42u);
    BOOST_TEST(!decode_error(std::string(R"({"t":"cast","id":7,)") + std::string(200, ' '), 100).request_id);
}

BOOST_AUTO_TEST_CASE(decode_rejects_unknown_type) {
    const auto e = decode_error(R"({"t":"bogus","id":1})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::unknown_type));
    BOOST_TEST(e.message.find("bogus") != std::string::npos, e.message);

    // A peer-chosen type name is cut short in the message.
    const auto long_e = decode_error(R"({"t":")" + std::string(10000, 'x') + R"("})");
    BOOST_TEST((long_e.kind == proto::DecodeErrorKind::unknown_type));
    BOOST_TEST(long_e.message.size() < 200u);
}

BOOST_AUTO_TEST_CASE(decode_rejects_missing_type) {
    BOOST_TEST((decode_error(R"({"id":1,"m":"a"})").kind == proto::DecodeErrorKind::unknown_type));
    BOOST_TEST((decode_error("{}").kind == proto::DecodeErrorKind::unknown_type));
}

BOOST_AUTO_TEST_CASE(decode_rejects_non_string_type) {
    const auto e = decode_error(R"({"t":7})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::unknown_type));
    BOOST_TEST(e.message.find("\"t\"") != std::string::npos, e.message);
}

BOOST_AUTO_TEST_CASE(decode_rejects_mistyped_member_naming_type_and_member) {
    const auto e = decode_error(R"({"t":"req","id":1,"m":5,"f":"f","a":[]})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(e.message == R"("req" frame: member "m" must be a string (got an integer))");

    const auto args = decode_error(R"({"t":"cast","m":"m","f":"f","a":{}})");
    BOOST_TEST((args.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(args.message == R"("cast" frame: member "a" must be an array (got an object))");

    const auto lb = decode_error(R"({"t":"cast","m":"m","f":"f","a":[],"lb":1})");
    BOOST_TEST(lb.message.find(R"(member "lb")") != std::string::npos, lb.message);

    const auto client = decode_error(
        R"({"t":"hello","v":1,"node":"a","inc":"i","listen":"","client":"no","nonce":"n"})");
    BOOST_TEST(client.message.find(R"("hello" frame: member "client")") != std::string::npos,
               client.message);

    const auto proof = decode_error(R"({"t":"ready","proof":null})");
    BOOST_TEST(proof.message == R"("ready" frame: member "proof" must be a string (got null))");

    const auto meta = decode_error(R"({"t":"gjoin","group":"g","meta":[]})");
    BOOST_TEST(meta.message.find(R"("gjoin" frame: member "meta")") != std::string::npos, meta.message);
}

BOOST_AUTO_TEST_CASE(hello_carries_no_proof_and_ignores_one) {
    // Hello has no "proof" member any more; one sent by an older peer, of any type, is
    // ignored like any unknown member.
    const auto text = proto::encode(proto::Hello{1, peer("a@h", ""), "00ff"});
    BOOST_TEST(text.find("proof") == std::string::npos, text);
    for (const auto* extra : {R"("beef")", "null", "3"}) {
        const auto with_proof =
            std::string(R"({"t":"hello","v":1,"node":"a","inc":"i","listen":"","client":false,"nonce":"n","proof":)") +
            extra + "}";
        auto decoded = proto::decode(with_proof);
        BOOST_TEST_REQUIRE(decoded.has_value(), with_proof << ": " << decoded.error().message);
        const auto* hello = std::get_if<proto::Hello>(&*decoded);
        BOOST_TEST_REQUIRE(hello != nullptr);
        BOOST_TEST(hello->nonce == "n");
        BOOST_TEST(proto::encode(*hello).find("proof") == std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(decode_rejects_missing_member_naming_type_and_member) {
    const auto e = decode_error(R"({"t":"req","id":1,"m":"m","a":[]})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(e.message == R"("req" frame: member "f" must be a string (missing))");

    const auto auth = decode_error(R"({"t":"auth"})");
    BOOST_TEST(auth.message == R"("auth" frame: member "proof" must be a string (missing))");

    // Ready carries the acceptor's proof; without it the frame is malformed.
    const auto ready = decode_error(R"({"t":"ready"})");
    BOOST_TEST((ready.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(ready.message == R"("ready" frame: member "proof" must be a string (missing))");

    const auto hello = decode_error(R"({"t":"hello","v":1,"node":"a","listen":"","client":false,"nonce":"n"})");
    BOOST_TEST(hello.message.find(R"(member "inc")") != std::string::npos, hello.message);
}

BOOST_AUTO_TEST_CASE(decode_reports_nested_member_path) {
    const auto e = decode_error(
        R"({"t":"nodes","nodes":[{"node":"a","inc":"i","listen":"","client":false},{"node":"b","listen":"","client":false}]})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(e.message == R"("nodes" frame: member "nodes[1].inc" must be a string (missing))");

    const auto elem = decode_error(R"({"t":"gsync","groups":[{"group":"g","meta":{}},3]})");
    BOOST_TEST(elem.message == R"("gsync" frame: member "groups[1]" must be an object (got an integer))");

    const auto meta = decode_error(R"({"t":"gsync","groups":[{"group":"g","meta":"x"}]})");
    BOOST_TEST(meta.message.find(R"(member "groups[0].meta")") != std::string::npos, meta.message);
}

BOOST_AUTO_TEST_CASE(decode_reports_request_id_of_malformed_request) {
    const auto e = decode_error(R"({"t":"req","id":77,"m":"m","f":"f"})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST_REQUIRE(e.request_id.has_value());
    BOOST_TEST(*e.request_id == 77u);

    const auto big = decode_error(R"({"t":"req","id":18446744073709551615,"m":1})");
    BOOST_TEST_REQUIRE(big.request_id.has_value());
    BOOST_TEST(*big.request_id == std::numeric_limits<std::uint64_t>::max());
}

BOOST_AUTO_TEST_CASE(decode_omits_request_id_when_unreadable) {
    for (std::string_view text : {R"({"t":"req","id":-1,"m":"m","f":"f","a":[]})",
                                  R"({"t":"req","id":1.5,"m":"m","f":"f","a":[]})",
                                  R"({"t":"req","id":"1","m":"m","f":"f","a":[]})",
                                  R"({"t":"req","m":"m","f":"f","a":[]})"}) {
        const auto e = decode_error(text);
        BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape), text);
        BOOST_TEST(!e.request_id.has_value(), text);
        BOOST_TEST(e.message.find(R"("req" frame: member "id")") != std::string::npos, e.message);
    }
    // Only "req" frames carry a request id to answer.
    BOOST_TEST(!decode_error(R"({"t":"res","id":5})").request_id.has_value());
}

BOOST_AUTO_TEST_CASE(decode_accepts_absent_load_balancer_and_unknown_members) {
    auto r = proto::decode(R"({"t":"req","id":3,"m":"m","f":"f","a":[1],"extra":{"x":1}})");
    BOOST_TEST_REQUIRE(r.has_value());
    const auto& req = std::get<proto::Request>(*r);
    BOOST_TEST(req.id == 3u);
    BOOST_TEST(req.load_balancer.empty());
    BOOST_TEST(req.args == json::array{1});
}

BOOST_AUTO_TEST_CASE(decode_rejects_out_of_range_version) {
    const auto e = decode_error(
        R"({"t":"hello","v":4294967296,"node":"a","inc":"i","listen":"","client":false,"nonce":"n"})");
    BOOST_TEST((e.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(e.message.find(R"(member "v")") != std::string::npos, e.message);

    // Another in-range version decodes; refusing it is the handshake's job.
    auto other = proto::decode(
        R"({"t":"hello","v":2,"node":"a","inc":"i","listen":"","client":false,"nonce":"n"})");
    BOOST_TEST_REQUIRE(other.has_value());
    BOOST_TEST(std::get<proto::Hello>(*other).version == 2);
}

BOOST_AUTO_TEST_CASE(response_error_round_trips_error_message) {
    auto error = rpclb::call_error(rpclb::ErrorCode::service_unavailable, "node down", "b@h",
                                   "math", "add");
    error.details["extra"] = json::array{1, 2};
    const proto::Frame frame = proto::Response{12, rpclb::CallResult(boost::system::in_place_error, error)};
    const auto text = proto::encode(frame);
    BOOST_TEST(json::parse(text).at("err") == error.to_json());

    auto decoded = proto::decode(text);
    BOOST_TEST_REQUIRE(decoded.has_value());
    const auto& res = std::get<proto::Response>(*decoded);
    BOOST_TEST(res.id == 12u);
    BOOST_TEST_REQUIRE(res.result.has_error());
    BOOST_TEST((res.result.error() == error));
}

BOOST_AUTO_TEST_CASE(response_rejects_ambiguous_or_bad_result) {
    const auto both = decode_error(
        R"({"t":"res","id":1,"ok":1,"err":{"code":"not_found","message":"m","details":{}}})");
    BOOST_TEST((both.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(both.message.find("\"res\" frame") != std::string::npos, both.message);

    BOOST_TEST((decode_error(R"({"t":"res","id":1})").kind == proto::DecodeErrorKind::bad_shape));

    const auto bad_code = decode_error(R"({"t":"res","id":1,"err":{"code":"teapot","message":"m"}})");
    BOOST_TEST((bad_code.kind == proto::DecodeErrorKind::bad_shape));
    BOOST_TEST(bad_code.message.find(R"(member "err")") != std::string::npos, bad_code.message);
}

BOOST_AUTO_TEST_CASE(result_value_throws_runtime_error_with_message) {
    auto r = proto::decode(R"({"t":"nope"})");
    BOOST_CHECK_EXCEPTION(r.value(), std::runtime_error, [](const std::runtime_error& e) {
        return std::string(e.what()).find("nope") != std::string::npos;
    });
}

// Boost.JSON 1.81 does not round every long decimal to the nearest
// double, so a number with more digits than a double holds can come back one unit in the
// last place away after decode, encode, decode. The frame still decodes, and the value
// stays within a rounding step; exactness is not promised beyond a double's precision.
BOOST_AUTO_TEST_CASE(long_decimal_numbers_survive_a_round_trip_within_a_rounding_step) {
    const std::string text = R"({"t":"res","id":7,"ok":[2,33300000000000000000000003]})";
    auto first = proto::decode(text);
    BOOST_TEST_REQUIRE(first.has_value(), first.error().message);
    const auto encoded = proto::encode(*first);
    auto second = proto::decode(encoded);
    BOOST_TEST_REQUIRE(second.has_value(), encoded);
    const auto& a = std::get<proto::Response>(*first).result;
    const auto& b = std::get<proto::Response>(*second).result;
    BOOST_TEST_REQUIRE((a.has_value() && b.has_value()));
    const double x = a->as_array().at(1).to_number<double>();
    const double y = b->as_array().at(1).to_number<double>();
    BOOST_TEST(std::abs(x - 3.33e25) <= 1e-15 * 3.33e25);
    BOOST_TEST(std::abs(x - y) <= 1e-15 * x);
    BOOST_TEST(a->as_array().at(0) == b->as_array().at(0));
}

// Boost.JSON 1.81 reads a number too large for a double as infinity, which encode() would
// write as `Infinity`, text no peer can decode (a handler echoing such an argument would
// make its answer unreadable). The decoder refuses it; the answer to such a request is
// bad_request, like any malformed request.
BOOST_AUTO_TEST_CASE(numbers_too_large_for_a_double_are_refused) {
    for (const auto& number :
         std::vector<std::string>{"1e999", "-1e400", "200000000357144652139e102277", std::string(400, '9')}) {
        BOOST_TEST_CONTEXT(number) {
            const auto text = R"({"t":"req","id":5,"m":"demo","f":"echo","a":[)" + number + "]}";
            const auto r = proto::decode(text);
            BOOST_TEST_REQUIRE(!r.has_value());
            BOOST_TEST((r.error().kind == proto::DecodeErrorKind::bad_json));
            BOOST_TEST(r.error().message == "invalid JSON: a number is too large for a double");
            BOOST_TEST((proto::peek_frame_id(text, "req") == std::optional<std::uint64_t>(5)));
        }
    }
    // The largest doubles, exponents and long digit runs that fit are fine.
    for (const auto& number :
         std::vector<std::string>{"1.7976931348623157e308", "-1e308", "1e-400", "0.5E3", std::string(300, '7')}) {
        BOOST_TEST_CONTEXT(number) {
            const auto r = proto::decode(R"({"t":"res","id":1,"ok":{"x":[)" + number + "]}}");
            BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
            BOOST_TEST_REQUIRE(proto::decode(proto::encode(*r)).has_value());
        }
    }
}

// ---- the load an answer reports ("ld") --------------------------------------------------

proto::Response decode_response(std::string_view text) {
    auto decoded = proto::decode(text);
    BOOST_TEST_REQUIRE(decoded.has_value(), (decoded ? "" : decoded.error().message));
    BOOST_TEST_REQUIRE(std::holds_alternative<proto::Response>(*decoded));
    return std::get<proto::Response>(std::move(*decoded));
}

BOOST_AUTO_TEST_CASE(response_load_round_trips_in_a_few_bytes) {
    const proto::Load load{250, 3, 0.75};
    const auto text = proto::encode(proto::Response{7, json::value(true), load});
    BOOST_TEST(text == R"({"t":"res","id":7,"ok":true,"ld":[250,3,0.75]})");
    const auto res = decode_response(text);
    BOOST_TEST_REQUIRE(res.load.has_value());
    BOOST_TEST((*res.load == load));
    BOOST_TEST(res.load_problem.empty());

    // No application number: two numbers.
    const auto bare = proto::encode(proto::Response{8, json::value(1), proto::Load{1000, 0, 0.0}});
    BOOST_TEST(bare == R"({"t":"res","id":8,"ok":1,"ld":[1000,0]})");
    BOOST_TEST((*decode_response(bare).load == proto::Load{1000, 0, 0.0}));
}

BOOST_AUTO_TEST_CASE(response_without_load_is_read_as_before) {
    // What a peer of an earlier version sends, and what a Response without a load writes.
    const auto text = proto::encode(proto::Response{9, json::value(true)});
    BOOST_TEST(text == R"({"t":"res","id":9,"ok":true})");
    const auto res = decode_response(text);
    BOOST_TEST(!res.load.has_value());
    BOOST_TEST(res.load_problem.empty());
}

BOOST_AUTO_TEST_CASE(response_with_malformed_load_keeps_its_result) {
    // Each is a garbage report: the answer still decodes, with no load and a reason.
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"("high")", "must be an array"},
        {R"([1])", "2 or 3"},
        {R"([1,2,3,4])", "2 or 3"},
        {R"([1001,0])", "busy"},
        {R"([-1,0])", "busy"},
        {R"([0.5,0])", "busy"},
        {R"([10,-2])", "queue"},
        {R"([10,4294967296])", "queue"},
        {R"([10,0,-1])", "application"},
        {R"([10,0,1e10])", "application"},
        {R"([10,0,"x"])", "application"},
        {R"([10,0,1e999])", "too large for a double"},  // parsed as infinity
    };
    for (const auto& [ld, mentions] : cases) {
        const auto res = decode_response(R"({"t":"res","id":4,"ok":"fine","ld":)" + ld + "}");
        BOOST_TEST(res.id == 4u);
        BOOST_TEST_REQUIRE(res.result.has_value(), ld);
        BOOST_TEST(*res.result == json::value("fine"));
        BOOST_TEST(!res.load.has_value(), ld);
        BOOST_TEST(res.load_problem.find(mentions) != std::string::npos, ld << ": " << res.load_problem);
    }
    // A non-finite number elsewhere is still a bad frame.
    BOOST_TEST((decode_error(R"({"t":"res","id":4,"ok":1e999,"ld":[1,1]})").kind ==
                proto::DecodeErrorKind::bad_json));
    BOOST_TEST((decode_error(R"({"t":"res","id":4,"ok":1e999,"ld":[1,1e999]})").kind ==
                proto::DecodeErrorKind::bad_json));
}

BOOST_AUTO_TEST_CASE(load_pong_round_trips_and_refuses_garbage) {
    const proto::Load load{125, 40, 2.5};
    const auto text = proto::encode_load_pong(load);
    BOOST_TEST(text == "load 125 40 2.5");
    const auto back = proto::decode_load_pong(text);
    BOOST_TEST_REQUIRE(back.has_value());
    BOOST_TEST_REQUIRE(back->has_value());
    BOOST_TEST((**back == load));
    BOOST_TEST((**proto::decode_load_pong("load 0 0") == proto::Load{}));

    // Not a load pong at all (a probe's pong, or anything else): no answer.
    BOOST_TEST(!proto::decode_load_pong("probe 12").has_value());
    BOOST_TEST(!proto::decode_load_pong("").has_value());
    for (std::string_view bad : {"load ", "load 1001 0", "load 5", "load 5 x", "load 5 1 nan", "load 5 1 inf",
                                 "load 5 1 -3", "load 5 1 2e9", "load 5 1 2 3", "load 5  1"}) {
        const auto r = proto::decode_load_pong(bad);
        BOOST_TEST_REQUIRE(r.has_value(), bad);
        BOOST_TEST(!r->has_value(), bad);
    }
}

// A request carries the time left to its call's deadline, rounded up to the millisecond,
// and the serving node reads back the same deadline (or none, for a call without one).
BOOST_AUTO_TEST_CASE(a_deadline_travels_as_the_milliseconds_left_and_is_read_back) {
    using namespace std::chrono;
    using rpclb::detail::deadline_after;
    using rpclb::detail::wire_timeout_ms;
    const auto now = steady_clock::now();
    BOOST_TEST(wire_timeout_ms(now - 1ms, now) == 0u);
    BOOST_TEST(wire_timeout_ms(now, now) == 0u);
    BOOST_TEST(wire_timeout_ms(now + 1500us, now) == 2u);
    BOOST_TEST(wire_timeout_ms(now + 250ms, now) == 250u);
    BOOST_TEST((deadline_after(now, wire_timeout_ms(now + 250ms, now)) == now + 250ms));
    BOOST_TEST((deadline_after(now, wire_timeout_ms(steady_clock::time_point::max(), now)) ==
                steady_clock::time_point::max()));
}

BOOST_AUTO_TEST_SUITE_END()

