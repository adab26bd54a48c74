// The shared cookie keeps strangers out: a node with the wrong cookie never joins, in
// either direction of dialling, and a peer that forges its proof is refused.
#define BOOST_TEST_MODULE cookie
#include <boost/test/unit_test.hpp>

#include <boost/json/serialize.hpp>

#include "support/node.hpp"
#include "support/port.hpp"
#include "support/raw_peer.hpp"
#include "support/serving.hpp"

#include <rpclb/cluster_async.hpp>

#include <algorithm>
#include <future>
#include <memory>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;
namespace wire = rpclb::detail::wire;

namespace {

const std::string wrong_cookie = "not-the-cluster-cookie";

std::size_t log_count_in(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

bool lists(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

// For `duration`: members of w stay exactly `good`, the client never connects to
// `stranger`, and calls through w keep succeeding (one per poll).
void check_stranger_stays_out(rpclb::Cluster& client, const std::vector<std::string>& good,
                              const std::string& stranger, milliseconds duration) {
    check_keeps_serving(client, "w", good, duration, [&]() -> std::string {
        return lists(client.connected_nodes(), stranger) ? "the client connected to " + stranger : "";
    });
    const auto direct = client.call(stranger, "demo", "node", {}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(!direct.has_value(), stranger << " answered a call");
    BOOST_TEST(direct.error().code == rpclb::ErrorCode::service_unavailable);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cookie)

BOOST_FIXTURE_TEST_CASE(node_with_wrong_cookie_never_joins, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"}});
    auto client = start_client({a->address()});
    const auto good = sorted({a->name(), b->name()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", good));

    // It dials the cluster once: a's refusal is final.
    auto bad = start_node({.name = "bad", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                           .cookie_flag = wrong_cookie, .log_level = "info"});
    check_stranger_stays_out(*client, good, bad->name(), 1500ms);

    BOOST_TEST(eventually([&] { return bad->log_contains("cookie"); }, 3s),
               "the refused node did not log why it was refused");
    BOOST_TEST(bad->log_contains("wrong cookie: " + a->name()), "the log does not name the node that refused");
    BOOST_TEST(bad->process().running());
}

BOOST_FIXTURE_TEST_CASE(node_refuses_seed_with_wrong_cookie, Harness) {
    // This time a good node dials the stranger: the check runs on the good side.
    auto bad = start_node({.name = "bad", .balancers = {"w=round_robin"}, .cookie_flag = wrong_cookie});
    auto a = start_node({.name = "a", .seeds = {bad->address()}, .balancers = {"w=round_robin"}});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"}});
    auto client = start_client({a->address()});
    const auto good = sorted({a->name(), b->name()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", good));
    BOOST_TEST(eventually([&] { return a->log_contains("wrong cookie: " + bad->name()); }, 3s),
               "a did not report the failed cookie check");
    check_stranger_stays_out(*client, good, bad->name(), 1500ms);
}

BOOST_FIXTURE_TEST_CASE(forged_proof_is_refused_by_acceptor, Harness) {
    auto a = start_node({.name = "a"});

    // Speak the protocol as far as it goes without the cookie: take the node's Hello,
    // then answer with a proof made under the wrong cookie, and try a call at once. The
    // node must close without a Ready (which would carry its own proof).
    RawPeer raw(a->port());
    const wire::PeerInfo me{"forger@127.0.0.1", "inc-forger", "", true};
    const auto my_nonce = rpclb::detail::make_nonce();
    BOOST_TEST_REQUIRE(raw.send(wire::Hello{wire::protocol_version, me, my_nonce}));
    const auto text = raw.read(5s);
    BOOST_TEST_REQUIRE(text.has_value(), "no reply to hello: " << raw.last_error().message());
    auto frame = wire::decode(*text);
    BOOST_TEST_REQUIRE(frame.has_value(), *text);
    const auto* hello = std::get_if<wire::Hello>(&*frame);
    BOOST_TEST_REQUIRE(hello != nullptr, "expected the node's hello, got " << *text);
    // The dialer proves first: the node's Hello gives a stranger nothing to attack offline.
    BOOST_TEST(text->find("proof") == std::string::npos, "the node's hello carries a proof: " << *text);
    const auto forged = rpclb::detail::hmac_sha256_hex(
        wrong_cookie, "rpclb-dialer\n" + hello->nonce + "\n" + my_nonce + "\n" + me.node + "\n" + hello->peer.node);
    BOOST_TEST_REQUIRE(raw.send(wire::Auth{forged}));
    // May already fail: the node is allowed to hang up before reading it.
    raw.send(wire::Request{1, "demo", "node", {}, {}});

    std::vector<std::string> after_auth;
    BOOST_TEST(raw.wait_closed(3s, [&](const std::string& t) { after_auth.push_back(t); }),
               "the node kept a connection whose proof was forged");
    for (const auto& t : after_auth) {
        BOOST_TEST(t.find("\"ready\"") == std::string::npos, "the node accepted a forged proof: " << t);
        BOOST_TEST(t.find("\"res\"") == std::string::npos, "the node served an unauthenticated peer: " << t);
    }
    BOOST_TEST(eventually([&] { return a->log_contains("wrong cookie: forger@127.0.0.1"); }, 3s),
               "the node did not log the failed cookie check");

    // The node is fine and serves a proper client.
    auto client = start_client({a->address()});
    BOOST_TEST_REQUIRE(wait_for_connected(*client, {a->name()}));
    const auto r = client->call(a->name(), "demo", "node", {}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
    BOOST_TEST(r->as_string() == a->name());
}

// A refused cookie is final: the client dials that node once, counts one refusal, and a
// call that could only go through it fails at once, not after the no-route retries.
BOOST_FIXTURE_TEST_CASE(client_with_wrong_cookie_is_refused_once_and_fails_fast, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}});
    rpclb::ClusterOptions options;
    options.cookie = wrong_cookie;
    options.reconnect_interval = 100ms;
    auto stranger = start_client({a->address()}, options);
    BOOST_TEST_REQUIRE(eventually([&] { return stranger->stats().cookie_refusals == 1u; }, 5s),
                       "the client never reported the refused cookie");
    BOOST_TEST(stranger->stats().auth_failures == 1u);
    // Redials every 100 ms would have refused again by now.
    BOOST_TEST(consistently([&] { return stranger->stats().cookie_refusals == 1u; }, 600ms, 50ms),
               "the client dialled the refusing node again");
    BOOST_TEST(a->log_count("wrong cookie: " + stranger->name()) == 1u);
    BOOST_TEST(stranger->connected_nodes().empty());
    BOOST_TEST(stranger->cookie_refused_by().value_or("") == a->name());

    // The defaults would retry a balancer without members 5 times, 5 s apart.
    CallOptions through_w;
    through_w.load_balancer = "w";
    const auto t0 = steady_clock::now();
    const auto r = stranger->call("demo", "node", {}, through_w);
    BOOST_TEST((steady_clock::now() - t0 < 1s));
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(r.error().is(rpclb::Failure::cookie_refused));
    BOOST_TEST(r.error().message == "cookie refused by " + a->name() + " (the cookies differ)");
    BOOST_TEST(r.error().details.at("refused_by").as_string() == a->name());
    // A balancer's error: it names the balancer, not the calling node.
    BOOST_TEST(r.error().details.at("load_balancer").as_string() == "w");
    BOOST_TEST(!r.error().details.contains("node"), boost::json::serialize(r.error().to_json()));
    const auto direct = stranger->call(a->name(), "demo", "node", {}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(!direct.has_value());
    BOOST_TEST(direct.error().is(rpclb::Failure::cookie_refused));
}

// A call already waiting for a route when the last reachable node refuses the cookie fails
// within a second, not when its retry sleep ends.
BOOST_FIXTURE_TEST_CASE(waiting_call_fails_when_the_last_seed_refuses, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}});
    PortReservation later;  // b's port: nothing listens there yet
    rpclb::ClusterOptions options;
    options.cookie = wrong_cookie;
    options.reconnect_interval = 100ms;
    auto stranger = start_client({a->address(), later.address()}, options);
    BOOST_TEST_REQUIRE(eventually([&] { return stranger->stats().cookie_refusals == 1u; }, 5s));
    // A seed it may still reach: not shut out yet.
    BOOST_TEST(!stranger->cookie_refused_by().has_value());

    CallOptions through_w;
    through_w.load_balancer = "w";
    through_w.retry_sleep = 20s;  // far longer than the test may take
    std::promise<std::pair<rpclb::CallResult, steady_clock::time_point>> outcome;
    stranger->async_call("", "demo", "node", {}, through_w, [&](rpclb::CallResult r) {
        outcome.set_value({std::move(r), steady_clock::now()});
    });
    auto done = outcome.get_future();
    BOOST_TEST_REQUIRE((done.wait_for(500ms) == std::future_status::timeout),
                       "the call did not wait while a seed could still be reached");
    auto b = start_node({.name = "b", .balancers = {"w=round_robin"}, .listen = later.address()});
    BOOST_TEST_REQUIRE(eventually([&] { return stranger->stats().cookie_refusals == 2u; }, 5s));
    const auto refused_at = steady_clock::now();
    BOOST_TEST_REQUIRE((done.wait_for(2s) == std::future_status::ready), "the waiting call did not fail");
    auto [r, at] = done.get();
    BOOST_TEST((at - refused_at < 1s));
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().is(rpclb::Failure::cookie_refused), r.error().message);
    BOOST_TEST(r.error().message.find("cookie refused by") == 0u, r.error().message);
}

// rpclb-call against a node with another cookie: one error line naming the refusing node,
// no redialling, and an exit within a few seconds rather than retrying for the whole wait.
BOOST_FIXTURE_TEST_CASE(rpclb_call_with_wrong_cookie_exits_fast, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}});
    const auto t0 = steady_clock::now();
    Process call(bin_dir() / "rpclb-call",
                 {"--seed", a->address(), "--cookie", wrong_cookie, "--balancer", "w", "demo", "node"}, {},
                 dir() / "call.log");
    const auto status = call.wait_exit(Process::Clock::now() + 20s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-call still runs");
    BOOST_TEST((steady_clock::now() - t0 < 5s));
    BOOST_TEST(WEXITSTATUS(*status) == 1, describe_status(*status));
    const auto err = call.stderr_text();
    BOOST_TEST(err.find("cookie refused by " + a->name()) != std::string::npos, err);
    BOOST_TEST(log_count_in(err, "refused this node's cookie") == 1u, err);
    BOOST_TEST(err.find("no members registered") == std::string::npos, err);
    BOOST_TEST(a->log_count("wrong cookie: client") == 1u);
}

BOOST_FIXTURE_TEST_CASE(rpclb_call_without_cookie_exits_2, Harness) {
    auto a = start_node({.name = "a"});
    Process call(bin_dir() / "rpclb-call", {"--seed", a->address(), "--node", a->name(), "demo", "node"},
                 {{"RPCLB_COOKIE", ""}}, dir() / "call.log");
    const auto status = call.wait_exit(Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-call still runs");
    BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
    BOOST_TEST(call.stderr_text().find("rpclb-call: give --cookie or set RPCLB_COOKIE") == 0u, call.stderr_text());
}

BOOST_AUTO_TEST_SUITE_END()
