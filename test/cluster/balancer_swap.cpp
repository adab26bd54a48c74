// LoadBalancer::set_algorithm / set_options on in-process nodes on 127.0.0.1: a refused
// change keeps the old algorithm, an accepted one is announced to the other nodes (and a
// client's routing-only balancer follows it), the old instance's per-member counters are
// released, and picks running during swaps never fail.
#define BOOST_TEST_MODULE balancer_swap
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/object.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Nodes a and b, both hosting balancer `name` with `algorithm`, and a client c routing
// through it.
struct Pair {
    Pair(const std::string& name, const std::string& algorithm, boost::json::object opts = {}) {
        a.start();
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("b@127.0.0.1", {address(a)}));
        b->start();
        auto client_options = rpclb::test::in_process_node_options("c@127.0.0.1", {address(a)});
        client_options.client = true;
        client = std::make_unique<rpclb::Cluster>(client_options);
        client->start();
        on_a = a.start_balancer(rpclb::test::balancer_options(name, algorithm, opts));
        on_b = b->start_balancer(rpclb::test::balancer_options(name, algorithm, opts));
        const std::vector<std::string> both{a.name(), b->name()};
        if (!eventually([&] { return on_a->members()->nodes == both && on_b->members()->nodes == both; }, 5s))
            throw std::runtime_error("a and b did not both join " + name);
        if (!eventually([&] { return client->connected_nodes().size() == 2; }, 5s))
            throw std::runtime_error("the client did not connect to a and b");
    }
    ~Pair() {
        client->stop();
        b->stop();
        a.stop();
    }

    rpclb::Cluster a{rpclb::test::in_process_node_options("a@127.0.0.1")};
    std::unique_ptr<rpclb::Cluster> b;
    std::unique_ptr<rpclb::Cluster> client;
    std::shared_ptr<rpclb::LoadBalancer> on_a;
    std::shared_ptr<rpclb::LoadBalancer> on_b;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(balancer_swap)

BOOST_AUTO_TEST_CASE(unknown_algorithm_is_refused_and_the_old_one_kept) {
    Pair p("swap_unknown", "round_robin");
    auto changed = p.on_a->set_algorithm("no_such_algorithm");
    BOOST_REQUIRE(!changed);
    BOOST_TEST(changed.error().code == rpclb::ErrorCode::not_found);
    BOOST_TEST(changed.error().message.find("no_such_algorithm") != std::string::npos);
    BOOST_TEST(changed.error().details.at("load_balancer").as_string() == "swap_unknown");
    BOOST_TEST(p.on_a->algorithm_name() == "round_robin");
    BOOST_TEST(p.on_a->select_node().has_value());
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_with_the_algorithms_message) {
    Pair p("swap_bad", "round_robin");
    auto changed = p.on_a->set_algorithm("hash_ring", {{"weight", 0}});
    BOOST_REQUIRE(!changed);
    BOOST_TEST(changed.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(changed.error().message.find("hash_ring: option weight must be an integer in 1..4096") !=
               std::string::npos);
    auto options = p.on_a->set_options({{"bogus", 1}});
    BOOST_REQUIRE(!options);
    BOOST_TEST(options.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(options.error().message.find("round_robin: unknown option \"bogus\"") != std::string::npos);
    BOOST_TEST(p.on_a->algorithm_name() == "round_robin");
    BOOST_TEST(p.on_a->algorithm_options().empty());
    BOOST_TEST(p.on_a->announcement().at("algorithm").as_string() == "round_robin");
    BOOST_TEST(p.on_a->select_node().has_value());
}

BOOST_AUTO_TEST_CASE(algorithm_with_services_is_refused) {
    Pair p("swap_services", "round_robin");
    auto changed = p.on_a->set_algorithm("least_cpu");
    BOOST_REQUIRE(!changed);
    BOOST_TEST(changed.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(changed.error().message.find("runs services") != std::string::npos);
    BOOST_TEST(p.on_a->algorithm_name() == "round_robin");
}

BOOST_AUTO_TEST_CASE(swap_publishes_announces_and_the_client_follows) {
    Pair p("swap_follow", "round_robin");
    // The client routes through it first: a routing-only balancer built from round_robin.
    auto routed = p.client->balancer("swap_follow");
    BOOST_REQUIRE(routed.has_value());
    BOOST_TEST((*routed)->algorithm_name() == "round_robin");

    const boost::json::object opts{{"weight", 64}};
    BOOST_REQUIRE(p.on_a->set_algorithm("hash_ring", opts).has_value());
    BOOST_REQUIRE(p.on_b->set_algorithm("hash_ring", opts).has_value());
    BOOST_TEST(p.on_a->algorithm_name() == "hash_ring");
    BOOST_TEST(p.on_a->options().algorithm == "hash_ring");
    BOOST_TEST(p.on_a->options().algorithm_opts == opts);
    // The members stay the same through the swap.
    BOOST_TEST(p.on_a->members()->nodes.size() == 2u);
    BOOST_TEST(eventually([&] {
        auto meta = p.b->groups().announcement("swap_follow", p.a.name());
        return meta && meta->at("algorithm").as_string() == "hash_ring";
    }, 5s));
    BOOST_TEST(eventually([&] {
        return (*routed)->algorithm_name() == "hash_ring" && (*routed)->algorithm_options() == opts;
    }, 5s));

    // hash_ring: the same key always gives the same member, on every node.
    for (int k = 0; k < 20; ++k) {
        const std::string key = "key-" + std::to_string(k);
        const auto first = p.on_a->select_node({.key = key});
        BOOST_REQUIRE(first.has_value());
        for (int again = 0; again < 5; ++again) {
            BOOST_TEST(*p.on_a->select_node({.key = key}) == *first);
            BOOST_TEST(*(*routed)->select_node({.key = key}) == *first);
        }
    }
}

BOOST_AUTO_TEST_CASE(swap_keeps_the_members_calls_in_flight) {
    Pair p("swap_counters", "least_connections");
    // Picks without releases: the balancer counts them in flight on their members.
    std::vector<std::string> picked;
    for (int i = 0; i < 6; ++i) picked.push_back(p.on_a->select_node().value());
    const auto total = [&] {
        std::int64_t sum = 0;
        for (const auto& [node, calls] : p.on_a->in_flight_by_member()) sum += calls;
        return sum;
    };
    BOOST_TEST(total() == 6);
    // least_connections spread them: three each.
    BOOST_TEST(p.on_a->members()->in_flight(0) == 3);

    BOOST_REQUIRE(p.on_a->set_algorithm("round_robin").has_value());
    BOOST_TEST(total() == 6);  // the counts are the balancer's, not the algorithm's
    for (const auto& node : picked) p.on_a->release_node(node);
    BOOST_TEST(total() == 0);
    p.on_a->release_node(picked[0]);  // one release too many: nothing below zero
    BOOST_TEST(p.on_a->members()->in_flight(0) == 0);
    BOOST_TEST(p.on_a->members()->in_flight(1) == 0);
}

BOOST_AUTO_TEST_CASE(a_restart_gives_a_fresh_instance_initialised_again) {
    Pair p("restart_fresh", "weighted_round_robin", {{"weights", {{"a@127.0.0.1", 3}}}});
    const auto before = p.on_a->algorithm().snapshot_owner();
    p.on_a->stop();
    p.on_a->start();
    BOOST_TEST(p.on_a->algorithm().snapshot_owner() != before);
    // init ran again, with the same options: a gets three picks in four.
    BOOST_REQUIRE(eventually([&] { return p.on_a->members()->nodes.size() == 2; }, 5s));
    int on_a = 0;
    for (int i = 0; i < 400; ++i) {
        const auto node = p.on_a->select_node().value();
        on_a += node == "a@127.0.0.1";
        p.on_a->release_node(node);
    }
    BOOST_TEST(on_a == 300);
}

BOOST_AUTO_TEST_CASE(a_pick_made_before_a_swap_stays_valid) {
    Pair p("swap_held", "round_robin");
    auto picked = p.on_a->pick();
    BOOST_REQUIRE(picked.has_value());
    const auto node = picked->node();
    BOOST_REQUIRE(p.on_a->set_algorithm("hash_ring").has_value());
    BOOST_REQUIRE(p.on_a->set_algorithm("random").has_value());
    BOOST_TEST(picked->node() == node);
    BOOST_TEST(picked->members->nodes.size() == 2u);
    p.on_a->release_node(picked->node());
}

BOOST_AUTO_TEST_CASE(a_new_announcement_reaches_only_announcement_monitors) {
    rpclb::Groups g{"a@h"};
    int monitored = 0, announced = 0, observed = 0;
    g.monitor("w", [&](const std::string&, rpclb::NodeChange, const std::vector<std::string>&) { ++monitored; });
    g.monitor_announcements("w", [&](const std::string&, rpclb::NodeChange change,
                                     const std::vector<std::string>& nodes) {
        BOOST_TEST((change == rpclb::NodeChange::joined));
        BOOST_TEST(nodes == std::vector<std::string>{"a@h"});
        ++announced;
    });
    g.set_observer([&](const std::string&, rpclb::NodeChange, const std::vector<std::string>&) { ++observed; });
    g.join("w", {{"algorithm", "round_robin"}});
    const auto before = g.members("w");
    BOOST_TEST(monitored == 1);
    BOOST_TEST(observed == 1);
    BOOST_TEST(announced == 0);
    g.join("w", {{"algorithm", "round_robin"}});  // the same: nothing to tell
    BOOST_TEST(announced == 0);
    g.join("w", {{"algorithm", "hash_ring"}});
    BOOST_TEST(announced == 1);
    BOOST_TEST(monitored == 1);
    BOOST_TEST(observed == 1);
    BOOST_TEST(g.members("w") == before);  // the same snapshot: no membership changed
    BOOST_TEST(g.announcement("w", "a@h")->at("algorithm").as_string() == "hash_ring");
}

BOOST_AUTO_TEST_CASE(picks_never_fail_while_the_algorithm_changes) {
    Pair p("swap_busy", "round_robin");
    std::atomic<bool> stop{false};
    std::atomic<long> picks{0}, failures{0};
    std::vector<std::thread> pickers;
    for (int t = 0; t < 3; ++t)
        pickers.emplace_back([&, t] {
            const std::string key = "k" + std::to_string(t);
            while (!stop) {
                auto r = p.on_a->select_node({.key = key});
                if (r) p.on_a->release_node(*r);
                (r ? picks : failures).fetch_add(1);
            }
        });
    const std::vector<std::pair<std::string, boost::json::object>> steps{
        {"hash_ring", {}},
        {"weighted_round_robin", {{"weights", {{"a@127.0.0.1", 3}, {"b@127.0.0.1", 1}}}}},
        {"least_connections", {}},
        {"power_of_two", {}},
        {"round_robin", {}},
    };
    for (int round = 0; round < 20; ++round)
        for (const auto& [algorithm, opts] : steps) BOOST_REQUIRE(p.on_a->set_algorithm(algorithm, opts).has_value());
    stop = true;
    for (auto& t : pickers) t.join();
    BOOST_TEST(failures.load() == 0);
    BOOST_TEST(picks.load() > 0);
    BOOST_TEST(p.on_a->algorithm_name() == "round_robin");
}

BOOST_AUTO_TEST_SUITE_END()
