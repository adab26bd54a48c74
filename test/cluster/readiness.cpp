// The readiness waits, Cluster::wait_for_members and Cluster::wait_for_node, between
// in-process nodes on 127.0.0.1: they end as soon as what they wait for holds, and fail at
// once, naming who refused, when no node lets this one in, instead of waiting out their
// timeout.
#define BOOST_TEST_MODULE readiness
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/port.hpp"
#include "support/wait.hpp"

#include <chrono>
#include <future>
#include <string>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

using Clock = std::chrono::steady_clock;

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

}  // namespace

BOOST_AUTO_TEST_SUITE(readiness)

BOOST_AUTO_TEST_CASE(a_wait_fails_at_once_when_every_seed_refuses_the_cookie) {
    // b dials a's port before a listens, so its wait is under way when a refuses it.
    rpclb::test::PortReservation port;
    auto ob = rpclb::test::in_process_node_options("b@127.0.0.1", {port.address()});
    ob.cookie = "another-cookie";
    ob.client = true;
    rpclb::Cluster b(ob);
    b.start();
    auto early = b.async_wait_for_members("w", 1, 20s, boost::asio::use_future);
    BOOST_TEST_REQUIRE((early.wait_for(200ms) == std::future_status::timeout), "the wait ended before a refused b");
    auto oa = rpclb::test::in_process_node_options("a@127.0.0.1");
    oa.listen = port.address();
    rpclb::Cluster a(oa);
    a.start();
    a.start_balancer(rpclb::test::balancer_options("w", "round_robin"));
    BOOST_TEST_REQUIRE((early.wait_for(5s) == std::future_status::ready), "the wait goes on after the refusal");
    const auto result = early.get();
    BOOST_TEST_REQUIRE(!result.has_value());
    const auto& e = result.error();
    BOOST_TEST(e.is(rpclb::Failure::cookie_refused), e.message);
    BOOST_TEST(e.code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(e.message == "cookie refused by a@127.0.0.1 (the cookies differ)");
    BOOST_TEST(e.details.at("refused_by") == "a@127.0.0.1");
    BOOST_TEST(e.details.at("load_balancer") == "w");
    BOOST_TEST(e.details.at("node") == "b@127.0.0.1");
    // Started after it: fails at once, and so does a wait for the node itself.
    const auto t1 = Clock::now();
    const auto late = b.wait_for_members("w", 1, 20s);
    BOOST_TEST_REQUIRE(!late.has_value());
    BOOST_TEST(late.error().is(rpclb::Failure::cookie_refused));
    const auto node = b.wait_for_node("a@127.0.0.1", 20s);
    BOOST_TEST_REQUIRE(!node.has_value());
    BOOST_TEST(node.error().is(rpclb::Failure::cookie_refused));
    BOOST_TEST(node.error().message == "cookie refused by a@127.0.0.1 (the cookies differ)");
    BOOST_TEST(node.error().details.at("peer") == "a@127.0.0.1");
    BOOST_TEST((Clock::now() - t1 < 1s));
}

BOOST_AUTO_TEST_CASE(wait_for_node_returns_once_connected_and_times_out_naming_the_node) {
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    rpclb::Cluster b(rpclb::test::in_process_node_options("b@127.0.0.1", {address(a)}));
    BOOST_TEST(b.wait_for_node("a@127.0.0.1", 1s).error().message == "node not started");
    b.start();
    const auto r = b.wait_for_node("a@127.0.0.1", 5s);
    BOOST_TEST(r.has_value(), (r ? std::string() : r.error().message));
    BOOST_TEST(b.connected_nodes() == std::vector<std::string>{"a@127.0.0.1"}, boost::test_tools::per_element());
    BOOST_TEST(b.wait_for_node("b@127.0.0.1", 0ms).has_value());  // itself
    const auto t0 = Clock::now();
    const auto missing = b.wait_for_node("nobody@127.0.0.1", 200ms);
    BOOST_TEST((Clock::now() - t0 >= 200ms));
    BOOST_TEST_REQUIRE(!missing.has_value());
    BOOST_TEST(missing.error().is(rpclb::Failure::timeout));
    BOOST_TEST(missing.error().message == "nobody@127.0.0.1 is not connected after 200 ms");
    BOOST_TEST(missing.error().details.at("peer") == "nobody@127.0.0.1");
    // A wait under way ends when the node stops.
    auto pending = std::async(std::launch::async, [&] { return b.wait_for_node("nobody@127.0.0.1", 20s); });
    BOOST_REQUIRE((pending.wait_for(100ms) == std::future_status::timeout));
    b.stop();
    BOOST_TEST_REQUIRE((pending.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(pending.get().error().is(rpclb::Failure::node_stopping));
}

BOOST_AUTO_TEST_CASE(a_wait_goes_on_while_one_seed_may_still_let_the_node_in) {
    // a refuses b's cookie; c, with b's cookie, is not up yet when b starts.
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    auto oc = rpclb::test::in_process_node_options("c@127.0.0.1");
    oc.cookie = "another-cookie";
    rpclb::test::PortReservation port;
    oc.listen = port.address();  // c binds it later; until then dials to it are refused
    auto ob = rpclb::test::in_process_node_options("b@127.0.0.1", {address(a), oc.listen});
    ob.cookie = "another-cookie";
    ob.client = true;
    rpclb::Cluster b(ob);
    b.start();
    auto wait = b.async_wait_for_members("w", 1, 20s, boost::asio::use_future);
    BOOST_REQUIRE(eventually([&] { return b.stats().cookie_refusals == 1; }, 5s));
    BOOST_TEST((wait.wait_for(300ms) == std::future_status::timeout), "the wait ended while c could still answer");
    rpclb::Cluster c(oc);
    c.start();
    c.start_balancer(rpclb::test::balancer_options("w", "round_robin"));
    BOOST_TEST_REQUIRE((wait.wait_for(10s) == std::future_status::ready));
    const auto result = wait.get();
    BOOST_TEST(result.has_value(), (result ? std::string() : result.error().message));
}

BOOST_AUTO_TEST_SUITE_END()
