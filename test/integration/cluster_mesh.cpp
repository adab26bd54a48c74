// Membership across real rpclb-node processes: the full mesh through one seed, and how
// fast a lost node leaves (closed socket, silent peer, graceful stop, restart).
#define BOOST_TEST_MODULE cluster_mesh
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <rpclb/cluster_async.hpp>

#include <boost/asio/use_future.hpp>

#include <atomic>
#include <csignal>
#include <future>
#include <map>
#include <memory>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;
using rpclb::NodeChange;

namespace {

// Three nodes hosting balancer "w", b and c seeded with a only, and a client seeded with
// a only; returns once the client sees the whole cluster.
struct ThreeNodes : Harness {
    explicit ThreeNodes(std::vector<std::string> extra_args = {}, rpclb::ClusterOptions client_options = {}) {
        a = start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = extra_args});
        b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                        .extra_args = extra_args});
        c = start_node({.name = "c", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                        .extra_args = extra_args});
        client = start_client({a->address()}, std::move(client_options));
        if (!wait_for_connected(*client, all()) || !wait_for_members(*client, "w", all()))
            throw std::runtime_error("the client did not meet the three nodes within 5 s");
    }

    std::vector<std::string> all() const { return sorted({a->name(), b->name(), c->name()}); }

    // Whether every node has reported a connection to both others within `timeout`. The
    // client's view completes before the node-to-node links may (b dials c only after a
    // told it about c), and the nodes' own views are visible only in their logs.
    bool node_mesh_complete(milliseconds timeout = 5s) {
        return eventually(
            [&] {
                for (const auto* x : {a.get(), b.get(), c.get()})
                    for (const auto* y : {a.get(), b.get(), c.get()})
                        if (x != y && !x->log_contains("connected to " + y->name() + " incarnation")) return false;
                return true;
            },
            timeout);
    }

    std::unique_ptr<Node> a, b, c;
    std::unique_ptr<rpclb::Cluster> client;
};

// Records when `node` left `group` as seen by `cluster` (monitor callback), shared so the
// callback may outlive the test body's locals.
struct LeaveClock {
    LeaveClock(rpclb::Cluster& cluster, const std::string& group, std::string node)
        : cluster_(cluster), at_(std::make_shared<std::atomic<steady_clock::rep>>(0)) {
        id_ = cluster.groups().monitor(
            group, [at = at_, node = std::move(node)](const std::string&, NodeChange change,
                                                      const std::vector<std::string>& nodes) {
                if (change == NodeChange::left && std::find(nodes.begin(), nodes.end(), node) != nodes.end())
                    at->store(steady_clock::now().time_since_epoch().count());
            });
    }
    ~LeaveClock() { cluster_.groups().demonitor(id_); }
    // When the notification came. Monitors run after the change is visible to readers
    // (groups.hpp), so a caller that has just seen the member go waits a little for it.
    std::optional<steady_clock::time_point> at() const {
        eventually([&] { return at_->load() != 0; }, 1s);
        const auto v = at_->load();
        if (v == 0) return std::nullopt;
        return steady_clock::time_point(steady_clock::duration(v));
    }

private:
    rpclb::Cluster& cluster_;
    std::shared_ptr<std::atomic<steady_clock::rep>> at_;
    std::uint64_t id_ = 0;
};

// Whatever is left of `limit` since `start` (zero when it has passed).
milliseconds remaining(steady_clock::time_point start, milliseconds limit) {
    const auto left = duration_cast<milliseconds>(start + limit - steady_clock::now());
    return std::max(left, milliseconds(0));
}

// A routed call's node, checked to be the node the call reports as its peer.
std::string routed_node(rpclb::Cluster& client, const std::string& balancer) {
    std::string peer;
    CallOptions options;
    options.load_balancer = balancer;
    options.timeout = 2s;
    options.peer = &peer;
    auto r = client.call("demo", "node", {}, options);
    BOOST_TEST_REQUIRE(r.has_value(), "call through " << balancer << " failed: " << r.error().message);
    BOOST_TEST_REQUIRE(r->is_string());
    BOOST_TEST(std::string(r->get_string()) == peer);
    return std::string(r->get_string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cluster_mesh)

BOOST_FIXTURE_TEST_CASE(full_mesh_forms_through_one_seed, ThreeNodes) {
    // The client met b and c although it only knows a: gossip reached it.
    BOOST_TEST(client->connected_nodes() == all(), boost::test_tools::per_element());
    const auto members = client->get_members("w");
    BOOST_TEST_REQUIRE(members.has_value());
    BOOST_TEST(sorted(*members) == all(), boost::test_tools::per_element());

    // Each node answers a direct call, as itself.
    for (const auto* node : {a.get(), b.get(), c.get()}) {
        std::string peer;
        CallOptions options;
        options.timeout = 2s;
        options.peer = &peer;
        const auto r = client->call(node->name(), "demo", "node", {}, options);
        BOOST_TEST_REQUIRE(r.has_value(), node->name() << ": " << r.error().message);
        BOOST_TEST(r->as_string() == node->name());
        BOOST_TEST(peer == node->name());
    }

    // Node-to-node links: b and c were only given a, so each must have connected to the
    // other through gossip. The nodes' own views are visible only in their logs.
    for (const auto* x : {a.get(), b.get(), c.get()})
        for (const auto* y : {a.get(), b.get(), c.get()})
            if (x != y)
                BOOST_TEST(eventually([&] { return x->log_contains("connected to " + y->name() + " incarnation"); },
                                      5s),
                           x->name() << " never reported a connection to " << y->name());
    // The client is a hidden node: connected to every node, but never a member.
    for (const auto* x : {a.get(), b.get(), c.get()})
        BOOST_TEST(eventually([&] { return x->log_contains("connected to " + client->name() + " (client)"); }, 5s),
                   x->name() << " never reported the client");
}

BOOST_FIXTURE_TEST_CASE(killed_node_leaves_group_within_one_second, ThreeNodes) {
    BOOST_TEST_REQUIRE(node_mesh_complete(), "the nodes did not form a full mesh");
    LeaveClock left(*client, "w", c->name());
    const auto killed_at = steady_clock::now();
    const int status = c->process().kill();
    BOOST_TEST(WIFSIGNALED(status));

    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", {a->name(), b->name()}, 3s),
                       "the client still lists the killed node in w");
    const auto observed = left.at();
    BOOST_TEST_REQUIRE(observed.has_value(), "no 'left' notification for the killed node");
    const auto took = duration_cast<milliseconds>(*observed - killed_at);
    BOOST_TEST_MESSAGE("killed node left the client's view after " << took.count() << " ms");
    BOOST_TEST(took.count() < 1000);
    BOOST_TEST(client->connected_nodes() == sorted({a->name(), b->name()}), boost::test_tools::per_element());

    // Survivors lost it too (their view shows only in their logs), in the same second.
    for (const auto* survivor : {a.get(), b.get()})
        BOOST_TEST(eventually([&] { return survivor->log_contains("lost " + c->name()); },
                              remaining(killed_at, 1000ms)),
                   survivor->name() << " did not report losing " << c->name() << " within 1 s");

    // Load-balanced calls keep working and go only to the survivors.
    std::map<std::string, int> per_node;
    for (int i = 0; i < 20; ++i) ++per_node[routed_node(*client, "w")];
    BOOST_TEST(per_node.size() == 2u);
    BOOST_TEST(per_node.count(c->name()) == 0u);
}

// An idempotent call whose member is SIGKILLed while it runs there goes once more, to a
// member the algorithm picks then (a retry, within the balancer's budget); a call not
// marked idempotent fails with noconnection, since it may have run.
BOOST_FIXTURE_TEST_CASE(an_idempotent_call_whose_member_dies_under_it_is_sent_again, ThreeNodes) {
    auto balancer = client->balancer("w").value();
    const auto run_and_kill_its_member = [&](bool idempotent) {
        CallOptions o;
        o.load_balancer = "w";
        o.timeout = 10s;
        o.idempotent = idempotent;
        auto answer = client->async_call("demo", "sleep", {1500}, o, boost::asio::use_future);
        std::string busy;
        BOOST_TEST_REQUIRE(eventually(
                               [&] {
                                   for (const auto& [member, calls] : balancer->in_flight_by_member())
                                       if (calls > 0) busy = member;
                                   return !busy.empty();
                               },
                               5s),
                           "the call never went out");
        for (auto* n : {a.get(), b.get(), c.get()})
            if (n->name() == busy) BOOST_TEST(WIFSIGNALED(n->process().kill()));
        BOOST_TEST_REQUIRE((answer.wait_for(10s) == std::future_status::ready), "the call never ended");
        return std::pair{answer.get(), busy};
    };
    const auto [retried, first] = run_and_kill_its_member(true);
    BOOST_TEST_REQUIRE(retried.has_value(), retried.error().message);
    BOOST_TEST(retried->as_string() != first);  // answered by the member it went to next
    BOOST_TEST(balancer->hedge_stats().retries == 1u);

    const auto [failed, second] = run_and_kill_its_member(false);
    BOOST_TEST_REQUIRE(failed.has_error());
    BOOST_TEST(failed.error().is(rpclb::Failure::no_connection), failed.error().message);
    BOOST_TEST(balancer->hedge_stats().retries == 1u);
}

namespace {
struct ThreeIdleNodes : ThreeNodes {
    static rpclb::ClusterOptions client_options() {
        rpclb::ClusterOptions o;
        o.idle_timeout = 1000ms;
        return o;
    }
    ThreeIdleNodes() : ThreeNodes({"--idle-timeout", "1000"}, client_options()) {}
};
}  // namespace

BOOST_FIXTURE_TEST_CASE(silent_node_leaves_after_idle_timeout, ThreeIdleNodes) {
    BOOST_TEST_REQUIRE(node_mesh_complete(), "the nodes did not form a full mesh");
    // Idle but healthy peers stay: keep-alive pings carry the connection across several
    // idle timeouts without any other traffic.
    BOOST_TEST_REQUIRE(consistently([&] { return members_of(*client, "w") == all(); }, 2500ms),
                       "an idle but healthy node was dropped: keep-alive pings are not working");

    // A stopped process keeps its sockets open but answers nothing.
    LeaveClock left(*client, "w", c->name());
    const auto stopped_at = steady_clock::now();
    BOOST_TEST_REQUIRE(c->process().freeze());
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", {a->name(), b->name()}, 5s),
                       "a silent node was never dropped");
    const auto observed = left.at();
    BOOST_TEST_REQUIRE(observed.has_value());
    const auto took = duration_cast<milliseconds>(*observed - stopped_at);
    BOOST_TEST_MESSAGE("silent node left after " << took.count() << " ms (idle timeout 1000 ms)");
    BOOST_TEST(took.count() < 2500);
    for (const auto* survivor : {a.get(), b.get()})
        BOOST_TEST(eventually([&] { return survivor->log_contains("lost " + c->name()); },
                              remaining(stopped_at, 2500ms)),
                   survivor->name() << " did not drop the silent node");
}

BOOST_FIXTURE_TEST_CASE(terminated_node_leaves_group_and_exits_zero, ThreeNodes) {
    BOOST_TEST_REQUIRE(c->process().signal(SIGTERM));
    const auto status = c->process().wait_exit(10s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-node did not exit within 10 s of SIGTERM");
    BOOST_TEST(WIFEXITED(*status), describe_status(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 0, describe_status(*status));
    BOOST_TEST(wait_for_members(*client, "w", {a->name(), b->name()}, 2s));
    BOOST_TEST(wait_for_connected(*client, {a->name(), b->name()}, 2s));
    BOOST_TEST(c->log_contains("got SIGTERM"));
}

BOOST_FIXTURE_TEST_CASE(restarted_node_rejoins_under_same_name, ThreeNodes) {
    BOOST_TEST_REQUIRE(node_mesh_complete(), "the nodes did not form a full mesh");
    c->process().kill();
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", {a->name(), b->name()}, 3s));

    // Same name, new process (new incarnation, new port), seeded with b this time.
    auto c_again = start_node({.name = c->name(), .seeds = {b->address()}, .balancers = {"w=round_robin"}});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", all(), 5s),
                       "the restarted node did not rejoin the client's view");
    BOOST_TEST(wait_for_connected(*client, all()));
    const auto r = client->call(c->name(), "demo", "node", {}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
    BOOST_TEST(r->as_string() == c->name());
    // a, which the new incarnation never dialled as a seed, connected to it again too.
    BOOST_TEST(eventually([&] { return a->log_count("connected to " + c->name() + " incarnation") >= 2; }, 5s),
               "a did not reconnect to the restarted node");
}

BOOST_AUTO_TEST_SUITE_END()
