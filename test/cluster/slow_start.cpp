// Slow start: the ramp's formula; the options as JSON and their checks; then balancers on
// in-process nodes on 127.0.0.1, on an injected clock: a member that joins gets about
// f(t) of its fair share at several t, the first members get their full share at once, a
// member back from ejection ramps up too, and a pick with a key is exempt.
#define BOOST_TEST_MODULE slow_start
#include <boost/asio/ip/tcp.hpp>
#include <boost/test/unit_test.hpp>

#include "routing/balancer_impl.hpp"
#include "routing/slow_start.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/config.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/parse.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Strings = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

namespace {

// The injected clock: what the balancers under test read as now.
std::atomic<Clock::rep> fake_now{Clock::duration(1000h).count()};

Clock::time_point test_clock() noexcept { return Clock::time_point(Clock::duration(fake_now.load())); }

void advance(Clock::duration by) { fake_now.fetch_add(by.count()); }

rpclb::SlowStart ramp(std::chrono::milliseconds window, double aggression = 1.0, double min_percent = 10.0) {
    rpclb::SlowStart s;
    s.window = window;
    s.aggression = aggression;
    s.min_weight_percent = min_percent;
    return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(formula)

BOOST_AUTO_TEST_CASE(envoys_formula_with_its_floor) {
    using rpclb::detail::slow_start_factor;
    const auto linear = ramp(10s);
    BOOST_TEST(slow_start_factor(linear, 0s) == 0.1);  // the floor, min_weight_percent
    BOOST_TEST(slow_start_factor(linear, 500ms) == 0.1);
    BOOST_TEST(std::abs(slow_start_factor(linear, 2500ms) - 0.25) < 1e-9);
    BOOST_TEST(std::abs(slow_start_factor(linear, 5s) - 0.5) < 1e-9);
    BOOST_TEST(slow_start_factor(linear, 10s) == 1.0);
    BOOST_TEST(slow_start_factor(linear, 1h) == 1.0);
    // Aggression 2 ramps faster at first: (t / window)^(1/2).
    BOOST_TEST(std::abs(slow_start_factor(ramp(10s, 2.0), 2500ms) - 0.5) < 1e-9);
    BOOST_TEST(slow_start_factor(ramp(10s, 1.0, 0.0), 0s) == 0.0);
    BOOST_TEST(slow_start_factor(rpclb::SlowStart{}, 0s) == 1.0);  // off
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(options)

BOOST_AUTO_TEST_CASE(json_keys_in_a_balancer_config) {
    const auto parsed = rpclb::load_balancer_options_from_json(boost::json::parse(
        R"({"name": "w", "slow_start": {"window_ms": 30000, "aggression": 2.5, "min_weight_percent": 5}})"));
    BOOST_TEST_REQUIRE(parsed.has_value(), parsed.error().message);
    BOOST_TEST(parsed->slow_start.window.count() == 30000);
    BOOST_TEST(parsed->slow_start.aggression == 2.5);
    BOOST_TEST(parsed->slow_start.min_weight_percent == 5.0);
    const auto partial =
        rpclb::load_balancer_options_from_json(boost::json::parse(R"({"name": "w", "slow_start": {"window_ms": 1}})"));
    BOOST_TEST_REQUIRE(partial.has_value(), partial.error().message);
    BOOST_TEST(partial->slow_start.aggression == 1.0);  // the defaults
    BOOST_TEST(partial->slow_start.min_weight_percent == 10.0);
    BOOST_TEST(!rpclb::LoadBalancerOptions{}.slow_start.enabled());  // off by default
    // Written back under the same keys.
    const auto written = rpclb::to_json(*parsed);
    BOOST_TEST(written.at("slow_start").at("window_ms").to_number<int>() == 30000);
}

BOOST_AUTO_TEST_CASE(bad_json_is_named) {
    struct Case {
        const char* json;
        const char* field;
    };
    for (const auto& c : {Case{R"({"window_ms": -5})", "window_ms"}, Case{R"({"aggression": 0})", "aggression"},
                          Case{R"({"aggression": "fast"})", "aggression"},
                          Case{R"({"min_weight_percent": 101})", "min_weight_percent"},
                          Case{R"({"window": 5})", "window"}}) {
        const auto parsed = rpclb::load_balancer_options_from_json(
            boost::json::parse(std::string(R"({"name": "w", "slow_start": )") + c.json + "}"));
        BOOST_TEST_REQUIRE(!parsed.has_value(), c.json);
        BOOST_TEST(parsed.error().message.find(std::string("slow_start.") + c.field) != std::string::npos,
                   parsed.error().message);
    }
}

BOOST_AUTO_TEST_CASE(bad_options_fail_the_balancers_start_naming_the_option) {
    rpclb::Cluster node(rpclb::test::in_process_node_options("a@127.0.0.1"));
    node.start();
    struct Case {
        rpclb::SlowStart slow_start;
        const char* field;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (const auto& c : {Case{ramp(-1ms), "slow_start.window_ms"}, Case{ramp(1s, 0.0), "slow_start.aggression"},
                          Case{ramp(1s, -1.0), "slow_start.aggression"}, Case{ramp(1s, nan), "slow_start.aggression"},
                          Case{ramp(1s, inf), "slow_start.aggression"},
                          Case{ramp(1s, 1.0, -1.0), "slow_start.min_weight_percent"},
                          Case{ramp(1s, 1.0, 100.5), "slow_start.min_weight_percent"},
                          Case{ramp(1s, 1.0, nan), "slow_start.min_weight_percent"}}) {
        auto options = rpclb::test::balancer_options("w", "random");
        options.slow_start = c.slow_start;
        try {
            node.start_balancer(options);
            BOOST_ERROR("started with a bad " << c.field);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).find(c.field) != std::string::npos, e.what());
        }
    }
    node.stop();
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Nodes hosting balancer "w" with `algorithm` and `slow_start`; the picks are made by a@'s
// balancer, on the injected clock.
struct Nodes {
    Nodes(std::string algorithm, rpclb::SlowStart slow_start, rpclb::OutlierDetection outliers = {})
        : algorithm(std::move(algorithm)), slow_start(slow_start), outliers(outliers) {
        for (const char* name : {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}) add(name);
        if (!rpclb::test::wait_for_members(*nodes.front(), "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s))
            throw std::runtime_error("a did not see a, b and c in w");
        auto b = nodes.front()->balancer("w");
        if (!b) throw std::runtime_error(b.error().message);
        balancer = *b;
        rpclb::detail::BalancerAccess::set_clock(*balancer, &test_clock);
    }
    ~Nodes() {
        for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) (*it)->stop();
    }

    rpclb::Cluster& add(const std::string& name) {
        auto seeds = nodes.empty() ? Strings{} : Strings{address(*nodes.front())};
        nodes.push_back(std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(name, seeds)));
        auto& node = *nodes.back();
        node.start();
        auto options = rpclb::test::balancer_options("w", algorithm);
        options.slow_start = slow_start;
        options.outlier_detection = outliers;
        node.start_balancer(options);
        return node;
    }

    // The share of `count` picks (each released) that went to each member.
    std::map<std::string, double> shares(int count, const rpclb::PickOptions& options = {}) {
        std::map<std::string, double> out;
        for (int i = 0; i < count; ++i) {
            auto picked = balancer->pick(options);
            if (!picked) throw std::runtime_error(picked.error().message);
            out[picked->node()] += 1.0 / count;
            balancer->track(*picked);
            balancer->release(*picked, {});
        }
        return out;
    }

    std::string algorithm;
    rpclb::SlowStart slow_start;
    rpclb::OutlierDetection outliers;
    std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
    std::shared_ptr<rpclb::LoadBalancer> balancer;
};

// The share a member ramping at `f` gets among `others` members at their full share.
double expected_share(double f, int others) { return f / (f + others); }

}  // namespace

BOOST_AUTO_TEST_SUITE(in_a_cluster)

BOOST_AUTO_TEST_CASE(a_member_that_joins_gets_about_f_of_its_fair_share_the_first_members_all_of_theirs) {
    Nodes n("random", ramp(10s));
    // The members present when picking starts: a third each at once.
    auto first = n.shares(3000);
    for (const char* m : {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"})
        BOOST_TEST(std::abs(first[m] - 1.0 / 3) < 0.05, m << " got " << first[m]);
    n.add("d@127.0.0.1");
    BOOST_TEST_REQUIRE(rpclb::test::wait_for_members(
        *n.nodes.front(), "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1", "d@127.0.0.1"}, 10s));
    // d joined at the clock's "now"; its factor: 0.1 (the floor), 0.25, 0.5, 0.75, then 1.
    for (const auto& [at, f] : {std::pair{0ms, 0.1}, std::pair{2500ms, 0.25}, std::pair{2500ms, 0.5},
                                std::pair{2500ms, 0.75}, std::pair{2500ms, 1.0}}) {
        advance(at);
        const auto share = n.shares(6000)["d@127.0.0.1"];
        BOOST_TEST(std::abs(share - expected_share(f, 3)) < 0.03,
                   "at f = " << f << " d got " << share << ", expected " << expected_share(f, 3));
    }
}

BOOST_AUTO_TEST_CASE(other_algorithms_ramp_a_member_that_joins_and_counts_stay_exact) {
    // Picks released at once leave every count at 0, so least_connections would always
    // pick the first member, and peak_ewma, on picks released within microseconds, follows
    // noise: not tests of the ramp.
    for (const char* algorithm : {"round_robin", "power_of_two"}) {
        BOOST_TEST_CONTEXT(algorithm) {
            Nodes n(algorithm, ramp(10s));
            n.shares(300);
            n.add("d@127.0.0.1");
            BOOST_TEST_REQUIRE(rpclb::test::wait_for_members(
                *n.nodes.front(), "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1", "d@127.0.0.1"}, 10s));
            const auto early = n.shares(4000)["d@127.0.0.1"];  // f = 0.1
            // Rejected picks were released: nothing is left in flight.
            BOOST_TEST(n.balancer->in_flight() == 0);
            BOOST_TEST(n.balancer->in_flight_by_member().empty());
            advance(10s);
            const auto late = n.shares(4000)["d@127.0.0.1"];  // the ramp is over
            BOOST_TEST(late > 0.05, "d got " << late);
            BOOST_TEST(early < late / 2, "d got " << early << " at f = 0.1 and " << late << " at 1");
            if (std::string(algorithm) == "round_robin") {
                BOOST_TEST(std::abs(late - 0.25) < 0.01);
                BOOST_TEST(early < 0.10, "d got " << early);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(a_member_back_from_ejection_ramps_up) {
    rpclb::OutlierDetection outliers;
    outliers.base_ejection_time = 300ms;
    Nodes n("random", ramp(10s), outliers);
    n.shares(300);
    // b's calls time out, five in a row: ejected for 300 ms (of the real clock).
    rpclb::CallOutcome timeout;
    timeout.error = rpclb::ErrorCode::request_timeout;
    timeout.origin = rpclb::ErrorOrigin::local;
    for (int failures = 0; failures < 5;) {
        auto picked = n.balancer->pick();
        BOOST_TEST_REQUIRE(picked.has_value());
        n.balancer->track(*picked);
        const bool b = picked->node() == "b@127.0.0.1";
        n.balancer->release(*picked, b ? timeout : rpclb::CallOutcome{});
        failures += b;
    }
    BOOST_TEST_REQUIRE(n.balancer->ejected() == Strings{"b@127.0.0.1"});
    BOOST_TEST_REQUIRE(eventually([&] { return n.balancer->ejected().empty(); }, 10s));
    BOOST_TEST_REQUIRE(eventually([&] { return n.balancer->members()->nodes.size() == 3u; }, 10s));
    // Back at the floor: 0.1 / 2.1 of the picks, not a third.
    const auto early = n.shares(6000)["b@127.0.0.1"];
    BOOST_TEST(std::abs(early - expected_share(0.1, 2)) < 0.03, "b got " << early);
    advance(5s);
    const auto half = n.shares(6000)["b@127.0.0.1"];
    BOOST_TEST(std::abs(half - expected_share(0.5, 2)) < 0.03, "b got " << half);
    advance(5s);
    const auto full = n.shares(6000)["b@127.0.0.1"];
    BOOST_TEST(std::abs(full - 1.0 / 3) < 0.03, "b got " << full);
}

BOOST_AUTO_TEST_CASE(a_pick_with_a_key_is_exempt) {
    // random ignores the key, so keyed picks show the balancer's own choice: a ramping
    // member keeps its fair share under them.
    Nodes n("random", ramp(10s));
    n.shares(300);
    n.add("d@127.0.0.1");
    BOOST_TEST_REQUIRE(rpclb::test::wait_for_members(
        *n.nodes.front(), "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1", "d@127.0.0.1"}, 10s));
    rpclb::PickOptions keyed;
    keyed.key = "user-42";
    const auto with_key = n.shares(6000, keyed)["d@127.0.0.1"];
    BOOST_TEST(std::abs(with_key - 0.25) < 0.03, "d got " << with_key);
    const auto without = n.shares(6000)["d@127.0.0.1"];
    BOOST_TEST(std::abs(without - expected_share(0.1, 3)) < 0.03, "d got " << without);
}

BOOST_AUTO_TEST_CASE(a_routing_only_balancer_ramps_by_the_announced_options_but_not_its_first_snapshot) {
    Nodes n("random", ramp(10s));
    auto o = rpclb::test::in_process_node_options("client@127.0.0.1", {address(*n.nodes.front())});
    o.client = true;
    rpclb::Cluster client(o);
    client.start();
    BOOST_TEST_REQUIRE(
        rpclb::test::wait_for_members(client, "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s));
    auto balancer = client.balancer("w");
    BOOST_TEST_REQUIRE(balancer.has_value());
    rpclb::detail::BalancerAccess::set_clock(**balancer, &test_clock);
    BOOST_TEST((*balancer)->options().slow_start.window.count() == 10000);
    std::map<std::string, int> picks;
    for (int i = 0; i < 3000; ++i) ++picks[(*balancer)->select_node().value()];
    for (const char* m : {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"})
        BOOST_TEST(std::abs(picks[m] / 3000.0 - 1.0 / 3) < 0.05, m << " got " << picks[m]);
    n.add("d@127.0.0.1");
    BOOST_TEST_REQUIRE(rpclb::test::wait_for_members(
        client, "w", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1", "d@127.0.0.1"}, 10s));
    BOOST_TEST_REQUIRE(eventually([&] { return (*balancer)->members()->nodes.size() == 4u; }, 10s));
    int d = 0;
    for (int i = 0; i < 6000; ++i) d += (*balancer)->select_node().value() == "d@127.0.0.1";
    BOOST_TEST(std::abs(d / 6000.0 - expected_share(0.1, 3)) < 0.03, "d got " << d << " of 6000");
    client.stop();
}

BOOST_AUTO_TEST_SUITE_END()
