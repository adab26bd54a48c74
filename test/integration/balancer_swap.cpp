// Changing a balancer's algorithm and options while it serves, with real processes: three
// rpclb-node host `w` (round_robin) with admin listeners, an in-process client keeps calls
// running through it, and rpclb-admin (plus one raw WebSocket request) changes it to
// hash_ring, then to weighted_round_robin with weights, then its weights. No call may fail,
// and the client must route with the new algorithm (doc/how-to/operate-a-cluster.md).
#define BOOST_TEST_MODULE balancer_swap
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"
#include "support/load.hpp"

#include <rpclb/load_balancer.hpp>

#include <map>
#include <set>

using namespace std::chrono_literals;
using namespace rpclb::test;
namespace json = boost::json;

namespace {

// The algorithm and options each node's `w` has now, from `balancers --json`.
std::map<std::string, std::string> algorithms_of_w(AdminCluster3& cluster) {
    auto r = cluster.admin({"--json", "balancers"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    std::map<std::string, std::string> by_node;
    const auto answers = r.json();
    for (const auto& answer : answers.as_array()) {
        if (answer.as_object().contains("error")) continue;  // the client: no admin listener
        for (const auto& b : answer.at("balancers").as_array())
            if (b.at("name") == "w")
                by_node[std::string(answer.at("node").as_string())] =
                    std::string(b.at("algorithm").as_string()) + " " + json::serialize(b.at("algorithm_opts"));
    }
    return by_node;
}

// True once the client's routing-only `w` runs `algorithm` with `opts`.
bool client_follows(rpclb::Cluster& client, const std::string& algorithm, const json::object& opts) {
    return eventually([&] {
        auto b = client.balancer("w");
        return b && (*b)->algorithm_name() == algorithm && (*b)->algorithm_options() == opts;
    }, 5s);
}

// The node serving demo.node for `key` through `w`.
std::string served(rpclb::Cluster& client, const std::string& key) {
    auto r = client.call("demo", "node", boost::json::array{}, {.load_balancer = "w", .key = key});
    BOOST_TEST_REQUIRE(r.has_value(), (r ? "" : r.error().message));
    return std::string(r->as_string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(balancer_swap)

BOOST_FIXTURE_TEST_CASE(algorithm_and_options_change_under_load_without_a_lost_call, AdminCluster3) {
    const std::vector<std::string> names{a->name(), b->name(), c->name()};
    CallLoad load(*client, "w", 6, [](rpclb::Cluster& cl, int thread, const rpclb::CallOptions& o) {
        auto keyed = o;
        keyed.key = "load-" + std::to_string(thread);
        return cl.call("demo", "node", {}, keyed);
    });
    const auto calls_after = [&](std::size_t more) {
        const auto target = load.total() + more;
        return eventually([&] { return load.total() >= target; }, 10s);
    };
    BOOST_TEST_REQUIRE(calls_after(200));

    // round_robin -> hash_ring on every node hosting w.
    auto r = admin({"balancer", "set-algorithm", "w", "hash_ring", "--options", R"({"weight":64})"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    for (const auto& n : names) BOOST_TEST(r.out.find(n) != std::string::npos, n);
    BOOST_TEST(r.out.find("round_robin {}") != std::string::npos, r.out);
    BOOST_TEST(r.out.find("hash_ring {\"weight\":64}") != std::string::npos, r.out);
    for (const auto& [node, now] : algorithms_of_w(*this)) BOOST_TEST(now == "hash_ring {\"weight\":64}", node);
    BOOST_TEST_REQUIRE(client_follows(*client, "hash_ring", {{"weight", 64}}));
    BOOST_TEST_REQUIRE(calls_after(200));

    // Keyed calls stick: the same key always lands on the same member, and keys spread.
    std::set<std::string> owners;
    for (int k = 0; k < 24; ++k) {
        const auto key = "user-" + std::to_string(k);
        const auto first = served(*client, key);
        owners.insert(first);
        for (int again = 0; again < 4; ++again) BOOST_TEST(served(*client, key) == first, key);
    }
    BOOST_TEST(owners.size() >= 2u);

    // Refused changes change nothing: bad options (the algorithm's own message), an
    // unknown algorithm, a balancer no node hosts, and a bad command line.
    r = admin({"balancer", "set-options", "w", R"({"weight":0})"});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.out.find("bad_request: balancer w: algorithm hash_ring init failed: hash_ring: option weight") !=
                   std::string::npos,
               slurp(r));
    BOOST_TEST(r.err.find("3 of 3 nodes refused the change") != std::string::npos, slurp(r));
    r = admin({"--json", "balancer", "set-algorithm", "w", "no_such_algorithm"});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.json().as_array().size() == 3u);
    BOOST_TEST(r.out.find("not_found: no plugin for algorithm no_such_algorithm") != std::string::npos, slurp(r));
    r = admin({"balancer", "set-options", "nobody", "{}"});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("no node hosts balancer \"nobody\"") != std::string::npos, slurp(r));
    r = admin({"balancer", "set-options", "w", "[1]"});
    BOOST_TEST(r.status == 2, slurp(r));
    r = admin({"balancer", "set-algorithm", "w"});
    BOOST_TEST(r.status == 2, slurp(r));
    for (const auto& [node, now] : algorithms_of_w(*this)) BOOST_TEST(now == "hash_ring {\"weight\":64}", node);

    // hash_ring -> weighted_round_robin, all weight on a; then the weights move to b.
    const json::object on_a{{"weights", {{a->name(), 1}, {b->name(), 0}, {c->name(), 0}}}};
    r = admin({"balancer", "set-algorithm", "w", "weighted_round_robin", "--options", json::serialize(on_a)});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST_REQUIRE(client_follows(*client, "weighted_round_robin", on_a));
    BOOST_TEST_REQUIRE(calls_after(100));
    for (int i = 0; i < 10; ++i) BOOST_TEST(served(*client, "any") == a->name());

    const json::object on_b{{"weights", {{a->name(), 0}, {b->name(), 1}, {c->name(), 0}}}};
    r = admin({"--json", "balancer", "set-options", "w", json::serialize(on_b)});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.json().as_array().size() == 3u);
    BOOST_TEST_REQUIRE(client_follows(*client, "weighted_round_robin", on_b));
    BOOST_TEST_REQUIRE(calls_after(100));
    for (int i = 0; i < 10; ++i) BOOST_TEST(served(*client, "any") == b->name());

    // --node changes one node only; the command itself over a raw WebSocket, forwarded.
    r = admin({"balancer", "set-algorithm", "w", "round_robin", "--node", c->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    auto now = algorithms_of_w(*this);
    BOOST_TEST(now[c->name()] == "round_robin {}");
    BOOST_TEST(now[a->name()] == "weighted_round_robin " + json::serialize(on_b));
    AdminSocket socket(admin_address(*a), admin_token);
    auto answer = socket.ask(R"({"id":7,"cmd":"balancer_set_algorithm","node":")" + b->name() +
                             R"(","name":"w","algorithm":"round_robin"})");
    BOOST_TEST_REQUIRE(error_code_of(answer).empty(), json::serialize(answer));
    BOOST_TEST(answer.at("result").at("node").as_string() == b->name());
    BOOST_TEST(answer.at("result").at("previous").at("algorithm") == "weighted_round_robin");
    answer = socket.ask(R"({"id":8,"cmd":"balancer_set_options","name":"w","algorithm_opts":{"weights":3}})");
    BOOST_TEST(error_code_of(answer) == "bad_request", json::serialize(answer));
    answer = socket.ask(R"({"id":9,"cmd":"balancer_set_options","name":"nobody","algorithm_opts":{}})");
    BOOST_TEST(error_code_of(answer) == "not_found", json::serialize(answer));
    BOOST_TEST_REQUIRE(calls_after(100));

    load.finish();
    BOOST_TEST(load.errors().empty(), (load.errors().empty() ? "" : load.errors().front()));
    for (const auto& n : names) BOOST_TEST(load.served_by(n) > 0u, n);
}

BOOST_AUTO_TEST_SUITE_END()
