// Each hosted balancer is a supervised subtree on a real in-process Cluster
// (predecessor-compatibility §1.1, §3.2, §3.5, §3.6): the algorithm's services start before
// the LoadBalancer joins and stop after it has left; a failing service restarts the whole
// subtree. The services come from the test plugin supervised_probe
// (test/plugins/supervised_probe.cpp).
#define BOOST_TEST_MODULE balancer_supervision
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/algorithm_state.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Strings = std::vector<std::string>;

namespace {

// Directory of the test plugins, set by the build (RPCLB_TEST_PLUGIN_DIR), else
// <build>/test_plugins next to <build>/test.
rpclb::ClusterOptions node_options(std::string name, bool client = false) {
    auto o = rpclb::test::in_process_node_options(std::move(name));
    o.client = client;
    o.plugin_path = {rpclb::test::test_plugin_dir()};
    return o;
}

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

rpclb::LoadBalancerOptions probe_balancer(std::string name, boost::json::object algorithm_opts = {}) {
    return rpclb::test::balancer_options(std::move(name), "supervised_probe", std::move(algorithm_opts));
}

// A count the probe of `balancer` on `node` keeps (see supervised_probe.cpp). Counters
// are process-wide, so each test uses balancer names of its own.
std::int64_t probe_count(const std::string& balancer, const std::string& node, const std::string& key) {
    return rpclb::AlgorithmState::instance().counter(balancer, "probe." + node + "." + key).load();
}

// Every membership change of `group` a cluster's Groups reports, as "joined a@h" /
// "left a@h", in order.
class MembershipLog {
public:
    MembershipLog(rpclb::Cluster& cluster, const std::string& group) : cluster_(cluster) {
        id_ = cluster.groups().monitor(group, [this](const std::string&, rpclb::NodeChange change,
                                                     const std::vector<std::string>& nodes) {
            std::lock_guard lock(mutex_);
            for (const auto& n : nodes)
                entries_.push_back((change == rpclb::NodeChange::joined ? "joined " : "left ") + n);
        });
    }
    ~MembershipLog() { cluster_.groups().demonitor(id_); }

    Strings entries() const {
        std::lock_guard lock(mutex_);
        return entries_;
    }

private:
    rpclb::Cluster& cluster_;
    std::uint64_t id_ = 0;
    mutable std::mutex mutex_;
    Strings entries_;
};

// A node hosting balancers, with a function that answers its name.
struct Host {
    explicit Host(const std::string& name) : node(node_options(name)) {
        node.start();
        node.register_function("t", "whoami",
                               [this](const boost::json::array&) -> rpclb::CallResult { return boost::json::value(node.name()); });
    }
    // A count of the probe of `balancer` on this node.
    std::int64_t probe(const std::string& balancer, const std::string& key) const {
        return probe_count(balancer, node.name(), key);
    }
    rpclb::Cluster node;
};

// A load-balanced whoami call from `from` through `balancer`: the answering node.
std::string whoami_through(rpclb::Cluster& from, const std::string& balancer) {
    rpclb::CallOptions options;
    options.load_balancer = balancer;
    options.timeout = 5s;
    options.retry = false;
    const auto r = from.call("t", "whoami", {}, options);
    if (!r) return "error: " + r.error().message;
    return std::string(r->as_string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(balancer_supervision)

BOOST_AUTO_TEST_CASE(start_balancer_returns_with_the_node_already_a_member) {
    Host a("bs_member@127.0.0.1");
    const auto b = a.node.start_balancer(probe_balancer("bs_member"));
    // No waiting: start_balancer returning means registered and selectable
    // (predecessor-compatibility §3.2).
    BOOST_TEST(b->joined());
    const auto members = a.node.get_members("bs_member");
    BOOST_TEST_REQUIRE(members.has_value());
    BOOST_TEST(*members == Strings{a.node.name()}, boost::test_tools::per_element());
    BOOST_TEST(a.node.select_node("bs_member").value() == a.node.name());
    // The service started first, before the balancer joined.
    BOOST_TEST(a.probe("bs_member", "starts") == 1);
    BOOST_TEST(a.probe("bs_member", "started_as_member") == 0);
}

BOOST_AUTO_TEST_CASE(failing_service_restarts_the_whole_balancer_subtree) {
    Host a("bs_restart@127.0.0.1");
    auto client_options = node_options("bs_restart_client@127.0.0.1", true);
    client_options.seeds = {address(a.node)};
    rpclb::Cluster client(client_options);
    client.start();
    MembershipLog seen_by_client(client, "bs_restart");
    const auto b = a.node.start_balancer(probe_balancer("bs_restart"));
    const Strings only_a{a.node.name()};
    BOOST_TEST_REQUIRE(eventually([&] { return seen_by_client.entries() == Strings{"joined " + a.node.name()}; }, 5s));
    BOOST_TEST(whoami_through(client, "bs_restart") == a.node.name());

    // Restarts are published on the node's bus.
    std::mutex events_mutex;
    std::vector<std::string> restarts;
    rpclb::TelemetryBus::ScopedConnection listening(a.node.telemetry().connect([&](const rpclb::Event& e) {
        if (e.name != rpclb::EventName::supervisor_restart) return;
        std::lock_guard lock(events_mutex);
        restarts.push_back(std::string(e.supervisor) + "/" + std::string(e.child) + "/" + std::string(e.kind));
    }));

    // The probe fails from a worker thread of a; its supervisor restarts the subtree:
    // the LoadBalancer stops (leaves, drains) and the probe stops, then the probe starts
    // and the LoadBalancer starts (joins) again.
    const auto told = a.node.call(a.node.name(), "bs_restart", "probe_fail");
    BOOST_TEST_REQUIRE(told.has_value(), (told ? "" : told.error().message));
    BOOST_TEST_REQUIRE(eventually([&] {
        return a.probe("bs_restart", "starts") == 2 && a.probe("bs_restart", "stops") == 1 && b->joined();
    }, 5s));
    {
        std::lock_guard lock(events_mutex);
        BOOST_TEST_REQUIRE(restarts.size() == 1u);
        BOOST_TEST(restarts[0].starts_with("bs_restart/"));
        BOOST_TEST(restarts[0].ends_with("/restart"));
    }
    BOOST_TEST(a.probe("bs_restart", "stopped_as_member") == 0);  // left before the probe stopped
    BOOST_TEST(a.probe("bs_restart", "started_as_member") == 0);  // joined after it started
    const Strings rejoined{"joined " + a.node.name(), "left " + a.node.name(), "joined " + a.node.name()};
    BOOST_TEST_REQUIRE(eventually([&] { return seen_by_client.entries() == rejoined; }, 5s));
    // The same balancer object, picking work again from both nodes.
    BOOST_TEST(a.node.balancer("bs_restart").value() == b);
    BOOST_TEST(a.node.get_members("bs_restart").value() == only_a, boost::test_tools::per_element());
    BOOST_TEST(whoami_through(client, "bs_restart") == a.node.name());
    BOOST_TEST(whoami_through(a.node, "bs_restart") == a.node.name());
}

BOOST_AUTO_TEST_CASE(balancer_failing_past_its_intensity_is_restarted_by_the_node) {
    Host a("bs_intensity@127.0.0.1");
    const auto b = a.node.start_balancer(probe_balancer("bs_intensity"));
    // The subtree allows 3 restarts in 5 s; the 4th failure makes it give up, and the
    // node's root supervisor restarts it whole.
    for (int failure = 1; failure <= 4; ++failure) {
        const auto told = a.node.call(a.node.name(), "bs_intensity", "probe_fail");
        BOOST_TEST_REQUIRE(told.has_value(), (told ? "" : told.error().message));
        BOOST_TEST_REQUIRE(eventually([&] {
            return a.probe("bs_intensity", "starts") == failure + 1 && b->joined();
        }, 5s), "failure " << failure);
    }
    BOOST_TEST(a.probe("bs_intensity", "stops") == 4);
    BOOST_TEST(a.node.get_members("bs_intensity").value() == Strings{a.node.name()}, boost::test_tools::per_element());
    BOOST_TEST(whoami_through(a.node, "bs_intensity") == a.node.name());
}

BOOST_AUTO_TEST_CASE(stop_balancer_stops_the_balancer_before_its_services) {
    Host a("bs_stop@127.0.0.1");
    MembershipLog seen(a.node, "bs_stop");
    a.node.start_balancer(probe_balancer("bs_stop"));
    BOOST_TEST(a.node.stop_balancer("bs_stop"));
    // When the probe stopped, the balancer had already left the group
    // (predecessor-compatibility §3.5).
    BOOST_TEST(a.probe("bs_stop", "stops") == 1);
    BOOST_TEST(a.probe("bs_stop", "stopped_as_member") == 0);
    BOOST_TEST(seen.entries() == (Strings{"joined " + a.node.name(), "left " + a.node.name()}),
               boost::test_tools::per_element());
    BOOST_TEST(!a.node.get_members("bs_stop").has_value());
    BOOST_TEST(a.node.balancer_names().empty());
    BOOST_TEST(!a.node.stop_balancer("bs_stop"));
    // The name is free again.
    a.node.start_balancer(probe_balancer("bs_stop"));
    BOOST_TEST(a.probe("bs_stop", "starts") == 2);
}

BOOST_AUTO_TEST_CASE(service_refusing_to_start_fails_start_balancer_and_leaves_nothing) {
    Host a("bs_refuse@127.0.0.1");
    std::string what;
    try {
        a.node.start_balancer(probe_balancer("bs_refuse", {{"refuse_start", true}}));
    } catch (const std::runtime_error& e) {
        what = e.what();
    }
    BOOST_TEST(what.find("probe of bs_refuse refuses to start") != std::string::npos, what);
    BOOST_TEST(what.find("bs_refuse") < what.find("probe of"), what);  // names the balancer first
    BOOST_TEST(a.node.balancer_names().empty());
    BOOST_TEST(!a.node.get_members("bs_refuse").has_value());
    BOOST_TEST(a.probe("bs_refuse", "stops") == 0);  // it never started
    a.node.start_balancer(probe_balancer("bs_refuse"));
    BOOST_TEST(a.node.get_members("bs_refuse").has_value());
}

BOOST_AUTO_TEST_SUITE_END()
