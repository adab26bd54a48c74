// A node that gives up its name (an older live process holds it) ends the run without any
// handler of the application's: StopSignal waits end, run_until_signalled stops the node
// and returns, pending readiness waits fail, and Cluster::name_taken says why.
#define BOOST_TEST_MODULE name_loss
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/stop_signal.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/wait.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <string>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

rpclb::ClusterOptions options(std::string name) {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.listen = "127.0.0.1:0";
    o.cookie = "name-loss-cookie";
    o.reconnect_interval = 100ms;
    return o;
}

// Node `a`, and `x@127.0.0.1` connected to it; make_second() builds a newer process of x
// seeded with a, which a refuses, and which gives the name up after 2 × 600 ms of that.
struct HeldName {
    HeldName() : a(options("a@127.0.0.1")) {
        a.start();
        auto ox = options("x@127.0.0.1");
        ox.seeds = {address()};
        holder = std::make_unique<rpclb::Cluster>(ox);
        holder->start();
        BOOST_TEST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1; }, 5s));
    }
    std::string address() const { return "127.0.0.1:" + std::to_string(a.listen_endpoint()->port()); }
    std::unique_ptr<rpclb::Cluster> make_second() const {
        auto ox = options("x@127.0.0.1");
        ox.seeds = {address()};
        ox.idle_timeout = 600ms;
        return std::make_unique<rpclb::Cluster>(ox);
    }

    rpclb::Cluster a;
    std::unique_ptr<rpclb::Cluster> holder;
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(name_loss, HeldName)

BOOST_AUTO_TEST_CASE(run_until_signalled_returns_when_the_node_gives_up_its_name) {
    rpclb::StopSignal stop_signal;
    auto second = make_second();
    second->start();
    BOOST_TEST(!second->name_taken().has_value());
    auto run = std::async(std::launch::async, [&] { return rpclb::run_until_signalled(*second, stop_signal); });
    const bool returned = run.wait_for(10s) == std::future_status::ready;
    if (!returned) stop_signal.request_stop();  // end the run, so the test can report
    BOOST_TEST_REQUIRE(returned, "run_until_signalled still runs 10 s after the node started");
    BOOST_TEST(run.get() == 0);
    const auto why = second->name_taken();
    BOOST_TEST_REQUIRE(why.has_value());
    BOOST_TEST(why->find("refused this node's name") != std::string::npos, *why);
    // The node was stopped: a call from it fails, and the holder keeps the name.
    BOOST_TEST(!second->call("a@127.0.0.1", "m", "f").has_value());
    BOOST_TEST(a.connected_nodes() == std::vector<std::string>{"x@127.0.0.1"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_stop_signal_wait_and_a_readiness_wait_end_when_the_name_is_given_up) {
    rpclb::StopSignal stop_signal;
    auto second = make_second();
    second->start();
    // Waits for members of a balancer nobody hosts: only the name loss can end it early.
    auto ready = second->async_wait_for_members("w", 1, 30s, boost::asio::use_future);
    const auto t0 = std::chrono::steady_clock::now();
    const auto got = stop_signal.wait_for(10s);
    BOOST_TEST_REQUIRE(got.has_value(), "the StopSignal wait did not end within 10 s");
    BOOST_TEST(*got == 0);
    BOOST_TEST(second->name_taken().has_value());
    BOOST_TEST_REQUIRE((ready.wait_for(2s) == std::future_status::ready), "the readiness wait goes on");
    const auto result = ready.get();
    BOOST_TEST_REQUIRE(!result.has_value());
    BOOST_TEST(result.error().is(rpclb::Failure::name_taken), result.error().message);
    BOOST_TEST(result.error().message.find("this node gave up its name: ") == 0u, result.error().message);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 12s));
    // A wait started after the loss fails at once, as does run_until_signalled with a
    // StopSignal made after it.
    const auto late = second->wait_for_members("w", 1, 30s);
    BOOST_TEST_REQUIRE(!late.has_value());
    BOOST_TEST(late.error().is(rpclb::Failure::name_taken));
    BOOST_TEST(rpclb::run_until_signalled(*second) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
