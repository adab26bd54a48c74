// Liveness through WebSocket keep-alive: a peer whose process is frozen (SIGSTOP) keeps
// its socket open but goes silent; it must leave every group within the idle timeout,
// and calls pending on it must fail then, not at their deadline.
#define BOOST_TEST_MODULE keepalive
#include "support/node.hpp"

#include <rpclb/cluster_async.hpp>

#include <boost/test/unit_test.hpp>

#include <csignal>
#include <future>
#include <string>
#include <string_view>

using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

// The details.reason of a call that the keep-alive's verdict failed (doc/architecture.md
// "Errors").
constexpr std::string_view keepalive_timeout = "no answer to probes (the peer is unresponsive)";

std::string reason_of(const rpclb::ErrorMessage& e) {
    const auto* v = e.details.if_contains("reason");
    return v && v->is_string() ? std::string(v->get_string()) : std::string("<missing>");
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(keepalive, Harness)

BOOST_AUTO_TEST_CASE(frozen_peer_leaves_after_idle_timeout_and_fails_pending_calls) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = {"--idle-timeout", "1000"}});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                         .extra_args = {"--idle-timeout", "1000"}});
    rpclb::ClusterOptions options;
    options.idle_timeout = 1000ms;
    auto client = start_client({a->address()}, options);
    BOOST_REQUIRE(wait_for_members(*client, "w", {"a@127.0.0.1", "b@127.0.0.1"}));

    std::promise<rpclb::CallResult> pending;
    rpclb::CallOptions call_options;
    call_options.timeout = 20s;
    BOOST_REQUIRE(b->process().freeze());
    const auto frozen = std::chrono::steady_clock::now();
    client->async_call("b@127.0.0.1", "demo", "echo", {1}, call_options,
                       [&](rpclb::CallResult r) { pending.set_value(std::move(r)); });

    BOOST_TEST(wait_for_members(*client, "w", {"a@127.0.0.1"}, 5s));
    const auto gone_after = std::chrono::steady_clock::now() - frozen;
    BOOST_TEST((gone_after >= 500ms));  // not before the peer actually went silent
    BOOST_TEST((gone_after < 3s));      // about the 1 s idle timeout, far from a minute

    auto future = pending.get_future();
    BOOST_REQUIRE((future.wait_for(2s) == std::future_status::ready));
    auto result = future.get();
    BOOST_REQUIRE(!result.has_value());
    BOOST_TEST((result.error().code == rpclb::ErrorCode::service_unavailable));
    BOOST_TEST(reason_of(result.error()) == keepalive_timeout);

    // The survivor keeps serving.
    call_options.timeout = 2s;
    call_options.load_balancer = "w";
    std::string peer;
    call_options.peer = &peer;
    BOOST_TEST(client->call("demo", "node", {}, call_options).has_value());
    BOOST_TEST(peer == "a@127.0.0.1");
    b->process().signal(SIGCONT);
}

// The frozen node, resumed after its members dropped it, says once that it was not
// running, blames no peer, and links again.
BOOST_AUTO_TEST_CASE(a_resumed_node_says_once_that_it_was_not_running_and_links_again) {
    auto a = start_node({.name = "a", .extra_args = {"--idle-timeout", "1000"}});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .extra_args = {"--idle-timeout", "1000"}});
    auto c = start_node({.name = "c", .seeds = {a->address()}, .extra_args = {"--idle-timeout", "1000"}});
    const auto linked = [&](Node& n, std::size_t lines) {
        return eventually([&] {
            const auto log = n.process().stderr_text();
            std::size_t count = 0;
            for (auto at = log.find("connected to "); at != std::string::npos; at = log.find("connected to ", at + 1))
                ++count;
            return count >= lines;
        }, 10s);
    };
    BOOST_REQUIRE(linked(*c, 2));  // a and b
    BOOST_REQUIRE(c->process().freeze());
    // a drops c from its view: the pause outlasted the idle timeout.
    BOOST_REQUIRE(eventually([&] { return a->process().stderr_text().find("lost c@127.0.0.1") != std::string::npos; }, 10s));
    c->process().signal(SIGCONT);
    BOOST_REQUIRE(linked(*c, 4));  // both again
    const auto log = c->process().stderr_text();
    std::size_t said = 0;
    for (auto at = log.find("this node was not running for at least "); at != std::string::npos;
         at = log.find("this node was not running for at least ", at + 1))
        ++said;
    BOOST_TEST(said == 1u, log);
    BOOST_TEST(log.find(std::string(keepalive_timeout)) == std::string::npos, log);
    BOOST_TEST(log.find("the link timed out while this node was not running") != std::string::npos, log);
}

BOOST_AUTO_TEST_CASE(a_blocking_call_waiting_in_its_callers_socket_fails_when_the_frozen_peer_leaves) {
    // A blocking call on a call channel waits in poll(2) on the caller's own thread
    // (doc/architecture.md, "Call channels"). The frozen peer keeps the channel's socket
    // open, so only the loss of the mesh link can end that wait: it must, at once.
    auto b = start_node({.name = "b", .extra_args = {"--idle-timeout", "1000"}});
    rpclb::ClusterOptions options;
    options.idle_timeout = 1000ms;
    auto client = start_client({b->address()}, options);
    BOOST_REQUIRE(eventually([&] { return client->connected_nodes().size() == 1; }, 5s));
    rpclb::CallOptions call_options;
    call_options.timeout = 20s;
    BOOST_REQUIRE(eventually([&] { return client->call("b@127.0.0.1", "demo", "echo", {1}, call_options).has_value(); }, 5s));
    BOOST_REQUIRE(client->stats().channel_calls >= 1u);  // the channel is open and pooled

    BOOST_REQUIRE(b->process().freeze());
    const auto frozen = std::chrono::steady_clock::now();
    auto waiting = std::async(std::launch::async, [&] {
        return client->call("b@127.0.0.1", "demo", "echo", {2}, call_options);
    });
    BOOST_REQUIRE((waiting.wait_for(6s) == std::future_status::ready));
    const auto failed_after = std::chrono::steady_clock::now() - frozen;
    auto result = waiting.get();
    BOOST_REQUIRE(!result.has_value());
    BOOST_TEST((result.error().code == rpclb::ErrorCode::service_unavailable), result.error().message);
    BOOST_TEST((failed_after < 4s));  // the 1 s idle timeout and a margin, not the 20 s deadline
    // The channel failed because the mesh link was lost: the call names the link's reason.
    BOOST_TEST(reason_of(result.error()) == keepalive_timeout);
    b->process().signal(SIGCONT);
}

BOOST_AUTO_TEST_CASE(blocking_calls_to_a_frozen_peer_each_end_by_their_deadline) {
    // Each timed-out call leaves its request unread in the frozen peer's socket. A blocking
    // write from the caller's thread would wait without a deadline once the buffers are
    // full; the call channel must write in place only while nothing is queued, and every
    // call must still end by its deadline. Long idle timeouts: the link is not lost here.
    auto b = start_node({.name = "b", .extra_args = {"--idle-timeout", "30000"}});
    rpclb::ClusterOptions options;
    options.idle_timeout = 30000ms;
    auto client = start_client({b->address()}, options);
    BOOST_REQUIRE(eventually([&] { return client->connected_nodes().size() == 1; }, 5s));
    BOOST_REQUIRE(eventually([&] { return client->call("b@127.0.0.1", "demo", "echo", {1}).has_value(); }, 5s));

    BOOST_REQUIRE(b->process().freeze());
    rpclb::CallOptions call_options;
    call_options.timeout = 5ms;
    const std::string payload(7000, 'x');  // under the in-place limit, so only the queue check saves it
    auto calls = std::async(std::launch::async, [&] {
        int late = 0;
        for (int i = 0; i < 900; ++i) {  // 6.3 MB: more than loopback's 4 MiB send buffer
            const auto start = std::chrono::steady_clock::now();
            auto r = client->call("b@127.0.0.1", "demo", "echo", {payload}, call_options);
            if (r.has_value() || std::chrono::steady_clock::now() - start > 1s) ++late;
        }
        return late;
    });
    const bool ended = calls.wait_for(20s) == std::future_status::ready;
    b->process().signal(SIGCONT);  // also frees a call stuck in a write, so the test can end
    BOOST_TEST(ended);
    BOOST_TEST(calls.get() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
