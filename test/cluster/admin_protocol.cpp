// The admin protocol without I/O (src/admin/protocol.hpp): request parsing and checking,
// answers, the token comparison, event filters; the admin section of the config file; the
// AdminServer's refusal of an unprotected non-loopback address.
#define BOOST_TEST_MODULE admin_protocol
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "../../src/admin/protocol.hpp"

#include <rpclb/admin.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/config.hpp>
#include <rpclb/error.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

using namespace rpclb::admin;
namespace json = boost::json;

namespace {

// Parses `text` and returns the error, which the test expects.
Error expect_error(std::string_view text, Request& r) {
    auto e = parse_request(text, r);
    BOOST_TEST_REQUIRE(e.has_value(), "accepted: " << text);
    return *e;
}

Error expect_error(std::string_view text) {
    Request r;
    return expect_error(text, r);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(admin_protocol)

BOOST_AUTO_TEST_CASE(parse_reads_id_token_cmd_node_and_fields) {
    Request r;
    const auto e = parse_request(R"({"id":7,"token":"t","cmd":"log_level","node":"b@h","level":"debug"})", r);
    BOOST_TEST_REQUIRE(!e.has_value(), e->message);
    BOOST_TEST(r.id == json::value(7));
    BOOST_TEST(r.token.value() == "t");
    BOOST_TEST(r.cmd == "log_level");
    BOOST_TEST(r.node == "b@h");
    BOOST_TEST(r.body.at("level") == "debug");

    BOOST_TEST(!parse_request(R"({"id":"abc","cmd":"nodes"})", r).has_value());
    BOOST_TEST(r.id == json::value("abc"));
    BOOST_TEST(!r.token.has_value());
    BOOST_TEST(r.node.empty());
}

BOOST_AUTO_TEST_CASE(every_listed_command_parses) {
    for (const auto name : command_names()) {
        json::object req{{"id", 1},         {"cmd", name},       {"name", "w"},
                         {"level", "info"}, {"subscription", 3}, {"algorithm", "random"},
                         {"algorithm_opts", json::object{}}};
        Request r;
        const auto e = parse_request(json::serialize(req), r);
        BOOST_TEST(!e.has_value(), name << ": " << (e ? e->message : ""));
    }
}

BOOST_AUTO_TEST_CASE(malformed_requests_get_bad_request) {
    Request r;
    auto e = expect_error("{not json", r);
    BOOST_TEST(e.code == code::bad_request);
    BOOST_TEST(e.message.find("not JSON") != std::string::npos);
    BOOST_TEST(r.id.is_null());

    BOOST_TEST(expect_error("[1,2]").message.find("JSON object") != std::string::npos);
    BOOST_TEST(expect_error(R"({"cmd":"nodes"})").message.find("\"id\" is missing") != std::string::npos);
    BOOST_TEST(expect_error(R"({"id":[1],"cmd":"nodes"})").message.find("\"id\" must be") != std::string::npos);
    // 1e400 parses as infinity, which an answer could not echo as JSON.
    BOOST_TEST(expect_error(R"({"id":1e400,"cmd":"nodes"})").message.find("finite") != std::string::npos);
    // Infinity anywhere else in the request (options that are
    // echoed in answers and forwarded to peers) is refused as well, keeping the id.
    auto inf = expect_error(R"({"id":3,"cmd":"balancer_set_options","name":"w","algorithm_opts":{"w":1e400}})", r);
    BOOST_TEST(inf.code == code::bad_request);
    BOOST_TEST(inf.message == "a number in the request is too large for a double");
    BOOST_TEST(r.id == 3);
    BOOST_TEST(expect_error(R"({"id":1})").message.find("\"cmd\" is missing") != std::string::npos);
    BOOST_TEST(expect_error(R"({"id":1,"cmd":5})").message.find("\"cmd\" must be a string") != std::string::npos);
    BOOST_TEST(expect_error(R"({"id":1,"cmd":"nodes","node":5})").message.find("\"node\"") != std::string::npos);
    BOOST_TEST(expect_error(R"({"id":1,"cmd":"nodes","token":false})").message.find("\"token\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unknown_command_keeps_the_id) {
    Request r;
    const auto e = expect_error(R"({"id":42,"cmd":"reboot"})", r);
    BOOST_TEST(e.code == code::unknown_command);
    BOOST_TEST(e.message.find("reboot") != std::string::npos);
    BOOST_TEST(r.id == json::value(42));
}

BOOST_AUTO_TEST_CASE(missing_or_mistyped_fields_are_named) {
    auto e = expect_error(R"({"id":1,"cmd":"balancer_stop"})");
    BOOST_TEST(e.code == code::bad_request);
    BOOST_TEST(e.message == "balancer_stop: field \"name\" is missing");
    e = expect_error(R"({"id":1,"cmd":"log_level","level":3})");
    BOOST_TEST(e.message == "log_level: field \"level\" must be a string, got an integer");
    e = expect_error(R"({"id":1,"cmd":"unsubscribe","subscription":-1})");
    BOOST_TEST(e.message.find("non-negative integer") != std::string::npos);
    e = expect_error(R"({"id":1,"cmd":"balancer_start","name":"w","algorithm_opts":[]})");
    BOOST_TEST(e.message.find("algorithm_opts") != std::string::npos);
    e = expect_error(R"({"id":1,"cmd":"balancer_set_algorithm","name":"w"})");
    BOOST_TEST(e.message == "balancer_set_algorithm: field \"algorithm\" is missing");
    e = expect_error(R"({"id":1,"cmd":"balancer_set_options","name":"w"})");
    BOOST_TEST(e.message == "balancer_set_options: field \"algorithm_opts\" is missing");
    e = expect_error(R"({"id":1,"cmd":"balancer_set_options","name":"w","algorithm_opts":"x"})");
    BOOST_TEST(e.message == "balancer_set_options: field \"algorithm_opts\" must be an object, got a string");
}

BOOST_AUTO_TEST_CASE(answers_carry_the_id) {
    const auto ok = answer(json::value(3), json::object{{"x", 1}});
    BOOST_TEST(json::serialize(ok) == R"({"id":3,"result":{"x":1}})");
    const auto err = error_answer(json::value("a"), {"not_found", "no such balancer"});
    BOOST_TEST(json::serialize(err) == R"({"id":"a","error":{"code":"not_found","message":"no such balancer"}})");
}

BOOST_AUTO_TEST_CASE(token_matches_only_the_same_token) {
    BOOST_TEST(token_matches("s3cret", "s3cret"));
    BOOST_TEST(!token_matches("s3cret", "s3cres"));
    BOOST_TEST(!token_matches("s3cret", "s3cre"));
    BOOST_TEST(!token_matches("s3cret", "s3cret "));
    BOOST_TEST(!token_matches("s3cret", ""));
    BOOST_TEST(token_matches("", ""));
}

BOOST_AUTO_TEST_CASE(glob_matches_whole_names) {
    BOOST_TEST(glob_match("rpc.*", "rpc.stop"));
    BOOST_TEST(glob_match("*", "anything.at.all"));
    BOOST_TEST(glob_match("*.end", "drain.end"));
    BOOST_TEST(glob_match("membership.j?in", "membership.join"));
    BOOST_TEST(glob_match("*poll*", "least_cpu.poll.remote_error"));
    BOOST_TEST(!glob_match("rpc.*", "xrpc.stop"));
    BOOST_TEST(!glob_match("rpc", "rpc.stop"));
    BOOST_TEST(!glob_match("drain.?", "drain.end"));
    BOOST_TEST(glob_match("", ""));
    BOOST_TEST(!glob_match("", "x"));
}

BOOST_AUTO_TEST_CASE(event_set_selects_by_pattern) {
    using rpclb::EventName;
    const auto rpc = event_set({"rpc.*"});
    BOOST_TEST(rpc.count() == 5u);  // rpc.start, .stop, .exception, .attempt, .span
    BOOST_TEST(rpc.test(static_cast<std::size_t>(EventName::rpc_exception)));
    BOOST_TEST(!rpc.test(static_cast<std::size_t>(EventName::node_selected)));
    BOOST_TEST(event_set({}).all());
    BOOST_TEST(event_set({"drain.begin", "plugin.*"}).count() == 3u);
    BOOST_TEST(event_set({"nothing"}).none());
}

BOOST_AUTO_TEST_CASE(filter_applies_events_balancer_and_node) {
    EventFilter f;
    auto body = json::parse(R"({"filter":{"events":["rpc.stop"],"load_balancer":"w"}})").as_object();
    BOOST_TEST_REQUIRE(!parse_filter(body, f).has_value());
    rpclb::Event stop{.name = rpclb::EventName::rpc_stop, .load_balancer = "w"};
    BOOST_TEST(f.accepts(stop));
    stop.load_balancer = "v";
    BOOST_TEST(!f.accepts(stop));
    BOOST_TEST(!f.accepts(rpclb::Event{.name = rpclb::EventName::rpc_start, .load_balancer = "w"}));

    BOOST_TEST_REQUIRE(!parse_filter(json::object{}, f).has_value());
    BOOST_TEST(f.accepts(rpclb::Event{.name = rpclb::EventName::plugin_loaded}));

    const auto error = [&](std::string_view text) {
        auto e = parse_filter(json::parse(text).as_object(), f);
        BOOST_TEST_REQUIRE(e.has_value(), text);
        BOOST_TEST(e->code == code::bad_request);
        return e->message;
    };
    BOOST_TEST(error(R"({"filter":{"events":[]}})").find("empty") != std::string::npos);
    BOOST_TEST(error(R"({"filter":{"events":["nope.*"]}})").find("matches no event") != std::string::npos);
    BOOST_TEST(error(R"({"filter":{"events":"rpc.*"}})").find("array of strings") != std::string::npos);
    BOOST_TEST(error(R"({"filter":{"node":1}})").find("filter.node") != std::string::npos);
    BOOST_TEST(error(R"({"filter":{"nodes":"a"}})").find("unknown filter field \"nodes\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(events_become_json_with_their_fields) {
    const rpclb::Event e{.name = rpclb::EventName::rpc_stop,
                         .duration = std::chrono::microseconds(1500),
                         .type = "call",
                         .node = "a@h",
                         .module = "demo",
                         .function = "echo",
                         .load_balancer = "w",
                         .status = "ok"};
    const auto j = event_to_json(e);
    BOOST_TEST(j.at("event") == "rpc.stop");
    BOOST_TEST(j.at("duration_ms").as_double() == 1.5);
    BOOST_TEST(j.at("load_balancer") == "w");
    BOOST_TEST(j.at("status") == "ok");
    BOOST_TEST(!j.contains("reason"));  // empty fields are left out
    const auto d = event_to_json(rpclb::Event{.name = rpclb::EventName::drain_begin, .in_flight = 4, .load_balancer = "w"});
    BOOST_TEST(d.at("in_flight") == 4);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(admin_config)

BOOST_AUTO_TEST_CASE(config_admin_section_round_trips_and_hides_the_token) {
    const auto c = rpclb::node_config_from_json(json::parse(
        R"({"admin": {"listen": "127.0.0.1:9100", "token": "tok", "max_subscribers": 4, "forward_timeout_ms": 5000}})"));
    BOOST_TEST_REQUIRE(c.has_value(), c.error().message);
    BOOST_TEST(c->admin.listen == "127.0.0.1:9100");
    BOOST_TEST(c->admin.token == "tok");
    BOOST_TEST(c->admin.max_subscribers == 4u);
    BOOST_TEST(c->admin.subscriber_queue == rpclb::AdminOptions{}.subscriber_queue);
    BOOST_TEST(c->admin.forward_timeout.count() == 5000);
    const auto back = rpclb::node_config_from_json(rpclb::to_json(*c, rpclb::Secrets::include));
    BOOST_TEST_REQUIRE(back.has_value());
    BOOST_TEST(back->admin.token == "tok");
    BOOST_TEST(!rpclb::to_json(*c, rpclb::Secrets::omit).at("admin").as_object().contains("token"));
}

BOOST_AUTO_TEST_CASE(config_admin_section_errors_name_the_field) {
    auto c = rpclb::node_config_from_json(json::parse(R"({"admin": {"listn": "x"}})"));
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().details.at("field") == "admin.listn");
    c = rpclb::node_config_from_json(json::parse(R"({"admin": {"max_subscribers": 0}})"));
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().details.at("field") == "admin.max_subscribers");
    c = rpclb::node_config_from_json(json::parse(R"({"admin": "127.0.0.1:1"})"));
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().details.at("field") == "admin");
}

// The servers here are constructed, never started: the address is checked, nothing binds
// (so 0.0.0.0 below opens no port).
BOOST_AUTO_TEST_CASE(non_loopback_address_without_token_is_refused) {
    rpclb::ClusterOptions o;
    o.name = "a@127.0.0.1";
    o.cookie = "c";
    rpclb::Cluster cluster(o);
    BOOST_CHECK_EXCEPTION(rpclb::AdminServer(cluster, {.listen = "0.0.0.0:0"}), std::invalid_argument,
                          [](const std::invalid_argument& e) {
                              return std::string(e.what()).find("not a loopback address") != std::string::npos;
                          });
    BOOST_CHECK_THROW(rpclb::AdminServer(cluster, {.listen = "nowhere:1"}), std::invalid_argument);
    BOOST_CHECK_THROW(rpclb::AdminServer(cluster, {.listen = "127.0.0.1:1", .max_subscribers = 0}),
                      std::invalid_argument);
    BOOST_CHECK_NO_THROW(rpclb::AdminServer(cluster, {.listen = "0.0.0.0:0", .token = "t"}));
    BOOST_CHECK_NO_THROW(rpclb::AdminServer(cluster, {.listen = "127.0.0.1:0"}));
    BOOST_CHECK_NO_THROW(rpclb::AdminServer(cluster, {.listen = "[::1]:0"}));
}

BOOST_AUTO_TEST_SUITE_END()
