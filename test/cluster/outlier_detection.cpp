// Outlier ejection: the detector's rules on an injected clock, then a balancer on three
// in-process nodes on 127.0.0.1 that ejects a member whose calls fail and takes it back;
// and peak_ewma, fed by the calls' latencies, avoiding a member 20 ms slower.
#define BOOST_TEST_MODULE outlier_detection
#include <boost/test/unit_test.hpp>

#include "routing/outlier_detector.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Detector = rpclb::detail::OutlierDetector;
using rpclb::detail::OutlierChange;
using Strings = std::vector<std::string>;

namespace {

rpclb::CallOutcome failed(rpclb::ErrorCode code, rpclb::ErrorOrigin origin) {
    rpclb::CallOutcome outcome;
    outcome.error = code;
    outcome.origin = origin;
    return outcome;
}

const auto local_timeout = failed(rpclb::ErrorCode::request_timeout, rpclb::ErrorOrigin::local);
const auto remote_500 = failed(rpclb::ErrorCode::internal_server_error, rpclb::ErrorOrigin::remote);
const auto remote_404 = failed(rpclb::ErrorCode::not_found, rpclb::ErrorOrigin::remote);
const rpclb::CallOutcome ok{};

const Strings abcd{"a", "b", "c", "d"};

}  // namespace

BOOST_AUTO_TEST_SUITE(detector)

BOOST_AUTO_TEST_CASE(consecutive_failures_eject_for_base_time_times_ejections) {
    rpclb::OutlierDetection options;
    Detector d(options);
    auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 4; ++i) BOOST_TEST(d.record("b", local_timeout, now).empty());
    auto change = d.record("b", local_timeout, now);
    BOOST_TEST_REQUIRE(change.ejected.size() == 1u);
    BOOST_TEST(change.ejected[0].node == "b");
    BOOST_TEST(change.ejected[0].reason == "consecutive_local_failures");
    BOOST_TEST(change.ejected[0].duration.count() == 30'000);
    BOOST_TEST(d.ejected() == Strings{"b"});
    BOOST_TEST(d.expire(now + 29s).empty());
    BOOST_TEST(d.expire(now + 30s).returned == Strings{"b"});
    BOOST_TEST(d.ejected().empty());
    // The second ejection lasts twice as long.
    for (int i = 0; i < 5; ++i) change = d.record("b", remote_500, now + 31s);
    BOOST_TEST_REQUIRE(change.ejected.size() == 1u);
    BOOST_TEST(change.ejected[0].reason == "consecutive_remote_failures");
    BOOST_TEST(change.ejected[0].duration.count() == 60'000);
}

BOOST_AUTO_TEST_CASE(local_and_remote_failures_are_counted_apart_and_a_success_resets_them) {
    Detector d(rpclb::OutlierDetection{});
    const auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 4; ++i) {
        d.record("a", local_timeout, now);
        d.record("a", remote_500, now);
    }
    BOOST_TEST(d.ejected().empty());  // 4 and 4, not 8
    d.record("a", ok, now);
    for (int i = 0; i < 4; ++i) d.record("a", local_timeout, now);
    BOOST_TEST(d.ejected().empty());  // the success started the streak again
    for (int i = 0; i < 10; ++i) d.record("a", remote_404, now);  // the caller's error, not the member's
    BOOST_TEST(d.ejected().empty());
}

BOOST_AUTO_TEST_CASE(cap_refuses_and_counts_panic_ejects_nobody) {
    Detector d(rpclb::OutlierDetection{});
    const auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 5; ++i) d.record("a", local_timeout, now);
    for (int i = 0; i < 5; ++i) d.record("b", local_timeout, now);
    BOOST_TEST((d.ejected() == Strings{"a", "b"}));  // 50 % of 4
    BOOST_TEST(d.refused() == 0u);
    for (int i = 0; i < 5; ++i) d.record("c", local_timeout, now);
    BOOST_TEST(d.refused() == 1u);
    // Three of four failing: fewer than 50 % healthy, so nobody is ejected.
    BOOST_TEST(d.ejected().empty());
    d.expire(now + 30s);
    BOOST_TEST(d.ejected().empty());
}

BOOST_AUTO_TEST_CASE(failure_percentage_over_an_interval) {
    rpclb::OutlierDetection options;
    options.consecutive_local_failures = options.consecutive_remote_failures = 0;
    options.failure_percentage = 50;
    options.minimum_requests = 10;
    Detector d(options);
    const auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 20; ++i) d.record("c", i % 2 ? remote_500 : ok, now + 1s);
    BOOST_TEST(d.ejected().empty());  // judged when the next interval starts
    const auto change = d.record("c", ok, now + 11s);
    BOOST_TEST_REQUIRE(change.ejected.size() == 1u);
    BOOST_TEST(change.ejected[0].reason == "failure_percentage");
}

BOOST_AUTO_TEST_CASE(a_failing_member_that_leaves_and_comes_back_starts_afresh) {
    // Most often a restarted process: it must not be shut out for an ejection it did not earn.
    Detector d(rpclb::OutlierDetection{});
    const auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 5; ++i) d.record("a", local_timeout, now);
    BOOST_TEST(d.ejected() == Strings{"a"});
    BOOST_TEST(!d.set_members({"b", "c", "d"}, now).empty());
    BOOST_TEST(d.ejected().empty());
    d.set_members(abcd, now + 10s);
    BOOST_TEST(d.ejected().empty());
    OutlierChange change;
    for (int i = 0; i < 5; ++i) change = d.record("a", local_timeout, now + 11s);
    BOOST_TEST_REQUIRE(change.ejected.size() == 1u);
    BOOST_TEST(change.ejected[0].duration.count() == 30'000);  // a first ejection again
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_healthy_is_forgotten) {
    Detector d(rpclb::OutlierDetection{});
    const auto now = Detector::Clock::time_point{} + 1h;
    d.set_members(abcd, now);
    for (int i = 0; i < 4; ++i) d.record("a", local_timeout, now);
    d.set_members({"b", "c", "d"}, now);
    d.set_members(abcd, now);
    BOOST_TEST(d.record("a", local_timeout, now).empty());  // the streak started again
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Three nodes serving t.work, and a client routing through balancer "w". `behave` says
// what each node's handler does.
struct Trio {
    explicit Trio(const std::string& algorithm,
                  std::function<rpclb::CallResult(const std::string&)> behave) {
        for (const char* name : {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}) {
            auto seeds = nodes.empty() ? Strings{} : Strings{address(*nodes.front())};
            nodes.push_back(std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(name, seeds)));
            auto& node = *nodes.back();
            node.register_function("t", "work", [name = node.name(), behave](const boost::json::array&) {
                return behave(name);
            });
            node.start();
            node.start_balancer(rpclb::test::balancer_options("w", algorithm));
        }
        auto o = rpclb::test::in_process_node_options("client@127.0.0.1", {address(*nodes.front())});
        o.client = true;
        client = std::make_unique<rpclb::Cluster>(o);
        client->start();
        if (!rpclb::test::wait_for_members(*client, "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s))
            throw std::runtime_error("the client did not see a, b and c in w");
    }
    ~Trio() {
        client->stop();
        for (auto& n : nodes) n->stop();
    }

    rpclb::CallResult call() {
        rpclb::CallOptions o;
        o.load_balancer = "w";
        o.timeout = 2s;
        return client->call("t", "work", {}, o);
    }

    std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
    std::unique_ptr<rpclb::Cluster> client;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(in_a_cluster)

BOOST_AUTO_TEST_CASE(a_failing_member_is_ejected_with_an_event_and_picked_no_more) {
    Trio trio("round_robin", [](const std::string& name) -> rpclb::CallResult {
        if (name == "b@127.0.0.1")
            return rpclb::ErrorMessage{rpclb::ErrorCode::internal_server_error, "b is broken", {}};
        return boost::json::value(name);
    });
    std::mutex mutex;
    Strings ejected_events;
    rpclb::TelemetryBus::ScopedConnection subscription = trio.client->telemetry().connect([&](const rpclb::Event& e) {
        if (e.name != rpclb::EventName::member_ejected) return;
        std::lock_guard lock(mutex);
        ejected_events.push_back(std::string(e.node));
    });
    int failures = 0;
    for (int i = 0; i < 30; ++i) failures += !trio.call().has_value();
    // Round robin sends every third call to b: its fifth failure ejects it.
    BOOST_TEST(failures == 5);
    auto balancer = trio.client->balancer("w");
    BOOST_TEST_REQUIRE(balancer.has_value());
    BOOST_TEST((*balancer)->ejected() == Strings{"b@127.0.0.1"});
    {
        std::lock_guard lock(mutex);
        BOOST_TEST(ejected_events == Strings{"b@127.0.0.1"});
    }
    for (int i = 0; i < 30; ++i) BOOST_TEST(trio.call().has_value());
}

BOOST_AUTO_TEST_CASE(peak_ewma_sends_under_a_tenth_of_the_calls_to_a_member_20_ms_slower) {
    Trio trio("peak_ewma", [](const std::string& name) -> rpclb::CallResult {
        if (name == "c@127.0.0.1") std::this_thread::sleep_for(20ms);  // c is the slower member
        return boost::json::value(name);
    });
    std::mutex mutex;
    std::map<std::string, int> calls;
    {
        std::vector<std::jthread> callers;
        for (int t = 0; t < 4; ++t)
            callers.emplace_back([&] {
                for (int i = 0; i < 100; ++i) {
                    auto r = trio.call();
                    std::lock_guard lock(mutex);
                    ++calls[r ? std::string(r->as_string()) : "error"];
                }
            });
    }
    BOOST_TEST(calls["error"] == 0);
    BOOST_TEST(calls["c@127.0.0.1"] < 40, "c got " << calls["c@127.0.0.1"] << " of 400");
}

BOOST_AUTO_TEST_SUITE_END()
