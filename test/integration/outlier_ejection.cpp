// Outlier ejection with real processes: of three members of a round_robin balancer one is
// frozen (SIGSTOP, its links kept open by a long idle timeout, so it stays a member). A
// client's calls to it time out; after five in a row the client's balancer ejects it, and
// the calls after that all go to the two others.
#define BOOST_TEST_MODULE outlier_ejection
#include "support/node.hpp"

#include <boost/test/unit_test.hpp>

#include <csignal>
#include <string>

using namespace std::chrono_literals;
using namespace rpclb::test;

BOOST_FIXTURE_TEST_SUITE(outlier_ejection, Harness)

BOOST_AUTO_TEST_CASE(a_frozen_member_is_ejected_after_five_timeouts) {
    const std::vector<std::string> slow_links{"--idle-timeout", "30000"};
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = slow_links});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"}, .extra_args = slow_links});
    auto c = start_node({.name = "c", .seeds = {a->address()}, .balancers = {"w=round_robin"}, .extra_args = slow_links});
    rpclb::ClusterOptions options;
    options.idle_timeout = 30000ms;
    auto client = start_client({a->address()}, options);
    BOOST_REQUIRE(wait_for_members(*client, "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s));

    BOOST_REQUIRE(c->process().freeze());
    rpclb::CallOptions call;
    call.load_balancer = "w";
    call.timeout = 200ms;
    int timeouts = 0;
    std::string peer;
    call.peer = &peer;
    for (int i = 0; i < 60; ++i) {
        auto r = client->call("demo", "node", {}, call);
        if (!r) {
            BOOST_TEST((r.error().code == rpclb::ErrorCode::request_timeout), r.error().message);
            ++timeouts;
        }
    }
    // Without ejection a third of the 60 calls, 20, would have waited for their deadline.
    BOOST_TEST(timeouts == 5);
    auto balancer = client->balancer("w");
    BOOST_REQUIRE(balancer.has_value());
    BOOST_TEST(((*balancer)->ejected() == std::vector<std::string>{"c@127.0.0.1"}));
    BOOST_TEST(wait_for_members(*client, "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 1s));  // still a member
    c->process().signal(SIGCONT);
}

BOOST_AUTO_TEST_SUITE_END()
