// Back-pressure: a peer that stops reading (SIGSTOP, with an idle timeout long enough that
// it is not declared gone) must not grow the sender's memory without bound. The send
// queue of each connection is bounded in bytes; calls past the bound fail at once with
// service_unavailable "overloaded", and the node keeps serving its other peers.
#define BOOST_TEST_MODULE back_pressure
#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster_async.hpp>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <csignal>
#include <fstream>
#include <string>

using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

// This process's resident set, in KiB (VmRSS of /proc/self/status).
long rss_kib() {
    std::ifstream status("/proc/self/status");
    std::string key;
    long value = 0;
    while (status >> key) {
        if (key == "VmRSS:") {
            status >> value;
            return value;
        }
        status.ignore(4096, '\n');
    }
    return -1;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(back_pressure, Harness)

BOOST_AUTO_TEST_CASE(a_stopped_peer_bounds_the_send_queue_and_others_keep_being_served) {
    const std::vector<std::string> slow = {"--idle-timeout", "120000"};
    auto a = start_node({.name = "a", .extra_args = slow});
    auto b = start_node({.name = "b", .seeds = {a->address()}, .extra_args = slow});
    rpclb::ClusterOptions options;
    options.idle_timeout = 120s;
    options.max_send_queue_bytes = 32u << 20;
    auto client = start_client({a->address()}, options);
    BOOST_REQUIRE(wait_for_connected(*client, {"a@127.0.0.1", "b@127.0.0.1"}));

    BOOST_TEST_REQUIRE(b->process().freeze());
    const boost::json::array args{std::string(1u << 20, 'x')};  // 1 MiB of JSON per call
    const long rss_before = rss_kib();
    long rss_peak = rss_before;
    std::atomic<int> overloaded{0};
    std::atomic<int> other_errors{0};
    std::atomic<int> answered{0};
    rpclb::CallOptions call_options;
    call_options.timeout = 60s;
    constexpr int calls = 1024;  // 1 GiB pushed at the stopped peer
    for (int i = 0; i < calls; ++i) {
        client->async_call("b@127.0.0.1", "demo", "echo", args, call_options, [&](rpclb::CallResult r) {
            if (r) {
                answered.fetch_add(1);
            } else if (r.error().is(rpclb::Failure::overloaded) &&
                       r.error().code == rpclb::ErrorCode::service_unavailable &&
                       r.error().message == "overloaded") {
                overloaded.fetch_add(1);
            } else {
                other_errors.fetch_add(1);
            }
        });
        if (i % 64 == 0) rss_peak = std::max(rss_peak, rss_kib());
    }
    rss_peak = std::max(rss_peak, rss_kib());
    // Refusals are immediate: most calls failed already, while the peer is still stopped.
    BOOST_TEST(eventually([&] { return overloaded.load() >= calls - 64; }, 10s));
    BOOST_TEST(client->stats().overloaded >= static_cast<std::uint64_t>(overloaded.load()));
    BOOST_TEST(other_errors.load() == 0);
    BOOST_TEST((rss_peak - rss_before) < 256 * 1024, "RSS grew by " << (rss_peak - rss_before) << " KiB");

    // The node keeps serving its other peers meanwhile.
    rpclb::CallOptions quick;
    quick.timeout = 5s;
    auto echoed = client->call("a@127.0.0.1", "demo", "echo", {1, "abc"}, quick);
    BOOST_REQUIRE(echoed.has_value());
    BOOST_TEST(echoed.value() == (boost::json::array{1, "abc"}));

    // Once the peer reads again, every call that was queued is answered.
    BOOST_TEST_REQUIRE(b->process().signal(SIGCONT));
    BOOST_TEST(eventually([&] { return answered.load() + overloaded.load() == calls; }, 60s));
    BOOST_TEST(answered.load() > 0);
    BOOST_TEST_MESSAGE("answered " << answered.load() << ", overloaded " << overloaded.load() << ", RSS growth "
                                   << (rss_peak - rss_before) << " KiB");
    BOOST_TEST(other_errors.load() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
