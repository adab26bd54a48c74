// A rolling restart under continuous load loses no call (doc/explanation/
// draining-and-retries.md, predecessor-compatibility §10.7): three rpclb-node processes
// host balancer `workers`; a client keeps calling through it from several threads while
// each node in turn is stopped with SIGTERM (it leaves, refuses new work with `draining`,
// drains, says bye) and started again.
#define BOOST_TEST_MODULE rolling_restart
#include <boost/test/unit_test.hpp>

#include "support/load.hpp"
#include "support/node.hpp"

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

constexpr int load_threads = 16;

bool is_member(rpclb::Cluster& client, const std::string& node) {
    auto members = client.get_members("workers");
    return members && std::find(members->begin(), members->end(), node) != members->end();
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(rolling_restart, Harness)

BOOST_AUTO_TEST_CASE(restarting_every_node_in_turn_under_load_loses_no_call) {
    std::map<std::string, std::unique_ptr<Node>> nodes;
    const std::vector<std::string> names{"a", "b", "c"};
    nodes["a"] = start_node({.name = "a", .balancers = {"workers=round_robin"}});
    nodes["b"] = start_node({.name = "b", .seeds = {nodes["a"]->address()}, .balancers = {"workers=round_robin"}});
    nodes["c"] = start_node({.name = "c", .seeds = {nodes["a"]->address()}, .balancers = {"workers=round_robin"}});
    auto client = start_client({nodes["a"]->address(), nodes["b"]->address(), nodes["c"]->address()});
    BOOST_REQUIRE(wait_for_members(*client, "workers", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s));

    // Even threads: instant calls, many on the wire at SIGTERM; odd threads: 3 ms calls,
    // running on the node when SIGTERM comes.
    CallLoad load(*client, "workers", load_threads, [](rpclb::Cluster& c, int i, const rpclb::CallOptions& o) {
        return i % 2 == 0 ? c.call("demo", "node", {}, o) : c.call("demo", "sleep", {3}, o);
    });
    for (const auto& name : names) {
        const auto full = name + "@127.0.0.1";
        // Let calls flow to the node before it goes.
        const auto before = load.served_by(full);
        BOOST_REQUIRE(eventually([&] { return load.served_by(full) >= before + 20; }, 10s));

        auto& node = nodes[name];
        BOOST_REQUIRE(node->process().signal(SIGTERM));
        const auto status = node->process().wait_exit(Process::Clock::now() + 30s);
        BOOST_REQUIRE_MESSAGE(status.has_value(), name << " did not exit after SIGTERM");
        BOOST_TEST(*status == 0, name << " exited with " << *status);
        BOOST_REQUIRE(eventually([&] { return !is_member(*client, full); }, 5s));

        // Back under the same name (a new incarnation), seeded from a live node.
        const auto& seed = nodes[name == "a" ? "b" : "a"];
        node = start_node({.name = name, .seeds = {seed->address()}, .balancers = {"workers=round_robin"}});
        BOOST_REQUIRE_MESSAGE(eventually([&] { return is_member(*client, full); }, 10s),
                              full << " did not rejoin workers");
        const auto rejoined = load.served_by(full);
        BOOST_REQUIRE_MESSAGE(eventually([&] { return load.served_by(full) >= rejoined + 20; }, 10s),
                              full << " serves no calls after its restart");
    }
    load.finish();

    const auto errors = load.errors();
    BOOST_TEST(errors.empty(), errors.size() << " of " << load.total() << " calls failed; first: "
                                             << (errors.empty() ? "" : errors.front()));
    BOOST_TEST_MESSAGE(load.total() << " calls, " << errors.size() << " errors");
    BOOST_TEST(load.total() > 300u);
}

BOOST_AUTO_TEST_SUITE_END()
