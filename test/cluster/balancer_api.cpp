// The selection API of a balancer end to end, on three in-process nodes on 127.0.0.1:
// select_nodes with and without a key (hash_ring's replica walk; the random sample of the
// algorithms without choose_nodes), and every algorithm plugin run as a balancer with
// select_node, a load-balanced call and cast, and get_members (predecessor-compatibility §7
// case 100, here with all eight plugins and three members).
#define BOOST_TEST_MODULE balancer_api
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Strings = std::vector<std::string>;

namespace {

rpclb::ClusterOptions node_options(std::string name, std::vector<std::string> seeds = {}) {
    return rpclb::test::in_process_node_options(std::move(name), std::move(seeds));
}

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Three connected nodes a, b, c. Each answers t.whoami with its name and counts the
// t.record casts it runs.
struct Trio {
    Trio() {
        for (const char* name : {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}) {
            auto seeds = nodes.empty() ? Strings{} : Strings{address(*nodes.front())};
            nodes.push_back(std::make_unique<rpclb::Cluster>(node_options(name, seeds)));
            auto& node = *nodes.back();
            auto* recorded = &records[nodes.size() - 1];
            node.register_function("t", "whoami", [name = node.name()](const boost::json::array&) -> rpclb::CallResult {
                return boost::json::value(name);
            });
            node.register_function("t", "record", [recorded](const boost::json::array&) -> rpclb::CallResult {
                recorded->fetch_add(1);
                return nullptr;
            });
            node.start();
        }
        if (!eventually([&] {
                return std::all_of(nodes.begin(), nodes.end(), [](auto& n) { return n->connected_nodes().size() == 2; });
            }, 5s))
            throw std::runtime_error("a, b and c did not connect");
    }

    rpclb::Cluster& a() { return *nodes[0]; }
    Strings names() const { return {nodes[0]->name(), nodes[1]->name(), nodes[2]->name()}; }
    int records_total() const { return records[0].load() + records[1].load() + records[2].load(); }

    // Starts `options` on every node; returns a's balancer once it picks among all three.
    std::shared_ptr<rpclb::LoadBalancer> start_everywhere(const rpclb::LoadBalancerOptions& options) {
        std::shared_ptr<rpclb::LoadBalancer> on_a;
        for (auto& n : nodes) {
            auto b = n->start_balancer(options);
            if (!on_a) on_a = b;
        }
        const auto all = names();
        if (!eventually([&] { return on_a->members()->nodes == all; }, 5s))
            throw std::runtime_error("a's balancer " + options.name + " did not see all three members");
        return on_a;
    }

    std::array<std::atomic<int>, 3> records{};
    std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
};

rpclb::LoadBalancerOptions balancer(std::string name, std::string algorithm, boost::json::object opts = {}) {
    rpclb::LoadBalancerOptions o;
    o.name = std::move(name);
    o.algorithm = std::move(algorithm);
    o.algorithm_opts = std::move(opts);
    o.drain_timeout = 2s;
    return o;
}

rpclb::PickOptions with_key(const std::string& key) { return rpclb::PickOptions{.key = key}; }

bool distinct(Strings nodes) {
    std::sort(nodes.begin(), nodes.end());
    return std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end();
}

bool all_members(const Strings& nodes, const Strings& members) {
    return std::all_of(nodes.begin(), nodes.end(), [&](const std::string& n) {
        return std::find(members.begin(), members.end(), n) != members.end();
    });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(select_nodes)

BOOST_AUTO_TEST_CASE(hash_ring_select_nodes_with_a_key_starts_at_the_keys_owner_and_is_stable) {
    Trio t;
    const auto ring = t.start_everywhere(balancer("api_ring", "hash_ring"));
    const auto members = t.names();
    std::set<std::string> owners;
    for (int i = 1; i <= 30; ++i) {
        const auto key = "user:" + std::to_string(i);
        BOOST_TEST_CONTEXT("key " << key) {
            const auto owner = ring->select_node(with_key(key));
            BOOST_TEST_REQUIRE(owner.has_value());
            owners.insert(*owner);
            for (const std::size_t count : {1u, 2u, 3u, 5u}) {
                BOOST_TEST_CONTEXT("count " << count) {
                    const auto replicas = ring->select_nodes(count, with_key(key));
                    BOOST_TEST_REQUIRE(replicas.has_value(), (replicas ? "" : replicas.error().message));
                    BOOST_TEST(replicas->size() == std::min<std::size_t>(count, members.size()));
                    BOOST_TEST(replicas->front() == *owner);
                    BOOST_TEST(distinct(*replicas));
                    BOOST_TEST(all_members(*replicas, members));
                    // The same key gives the same list, every time.
                    for (int again = 0; again < 3; ++again)
                        BOOST_TEST(ring->select_nodes(count, with_key(key)).value() == *replicas,
                                   boost::test_tools::per_element());
                }
            }
        }
    }
    // The key matters: 30 keys don't all land on one node.
    BOOST_TEST(owners.size() > 1u);
}

BOOST_AUTO_TEST_CASE(select_nodes_of_an_algorithm_without_choose_nodes_is_a_random_sample_of_distinct_members) {
    Trio t;
    const auto rr = t.start_everywhere(balancer("api_rr", "round_robin"));
    const auto members = t.names();
    std::set<std::string> firsts;
    for (int i = 0; i < 300 && firsts.size() < members.size(); ++i) {
        for (const std::size_t count : {1u, 2u, 3u, 7u}) {
            const auto sample = rr->select_nodes(count, with_key("ignored"));
            BOOST_TEST_REQUIRE(sample.has_value(), (sample ? "" : sample.error().message));
            BOOST_TEST_REQUIRE(sample->size() == std::min<std::size_t>(count, members.size()));
            BOOST_TEST_REQUIRE(distinct(*sample));
            BOOST_TEST_REQUIRE(all_members(*sample, members));
            if (count == 1) firsts.insert(sample->front());
        }
    }
    // Random: every member comes first sometimes (a miss in 300 draws is about 1e-52).
    BOOST_TEST(firsts.size() == members.size());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(every_algorithm)

// predecessor-compatibility §7 case 100 (and 101 for call_direct), through real balancers
// on three nodes.
BOOST_AUTO_TEST_CASE(every_algorithm_selects_calls_casts_and_lists_members_as_a_balancer) {
    Trio t;
    const auto members = t.names();
    boost::json::object weights;
    for (const auto& n : members) weights[n] = 1;
    const std::vector<rpclb::LoadBalancerOptions> balancers{
        balancer("e2e_random", "random"),
        balancer("e2e_round_robin", "round_robin"),
        balancer("e2e_weighted_round_robin", "weighted_round_robin", {{"weights", weights}}),
        balancer("e2e_least_connections", "least_connections"),
        balancer("e2e_power_of_two", "power_of_two"),
        balancer("e2e_hash_ring", "hash_ring"),
        balancer("e2e_least_cpu", "least_cpu", {{"poll_interval", 100}, {"poll_startup_jitter", 0}}),
        balancer("e2e_call_direct", "call_direct"),
    };
    for (const auto& options : balancers) {
        BOOST_TEST_CONTEXT("algorithm " << options.algorithm) {
            t.start_everywhere(options);
            const bool direct = options.algorithm == "call_direct";
            auto& a = t.a();

            BOOST_TEST(a.get_members(options.name).value() == members, boost::test_tools::per_element());

            const auto picked = a.select_node(options.name, with_key("k"));
            BOOST_TEST_REQUIRE(picked.has_value(), (picked ? "" : picked.error().message));
            BOOST_TEST(all_members({*picked}, members));
            if (direct) BOOST_TEST(*picked == a.name());

            rpclb::CallOptions through;
            through.load_balancer = options.name;
            through.timeout = 5s;
            through.retry = false;
            const auto called = a.call("t", "whoami", {}, through);
            BOOST_TEST_REQUIRE(called.has_value(), (called ? "" : called.error().message));
            BOOST_TEST(all_members({std::string(called->as_string())}, members));
            if (direct) BOOST_TEST(called->as_string() == a.name());

            const auto before = t.records_total();
            const auto a_before = t.records[0].load();
            const auto cast = a.cast(a.name(), "t", "record", {}, through);  // the node is ignored
            BOOST_TEST_REQUIRE(cast.has_value(), (cast ? "" : cast.error().message));
            BOOST_TEST(eventually([&] { return t.records_total() == before + 1; }, 5s));
            if (direct) BOOST_TEST(t.records[0].load() == a_before + 1);

            BOOST_TEST(a.stop_balancer(options.name));
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
