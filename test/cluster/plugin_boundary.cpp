// The plugin boundary (doc/how-to/write-a-plugin.md §7): what rpclb does with an
// exception escaping each hook of an algorithm, and with a choose_nodes answer that breaks
// the contract, through real in-process nodes on 127.0.0.1. The algorithm is the test
// plugin misbehaving_hooks (test/plugins/misbehaving_hooks.cpp). Every case also checks
// that the node keeps serving afterwards.
#define BOOST_TEST_MODULE plugin_boundary
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/log_capture.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using rpclb::test::LogCapture;
using Strings = std::vector<std::string>;

namespace {

rpclb::ClusterOptions node_options(std::string name) {
    auto o = rpclb::test::in_process_node_options(std::move(name));
    o.plugin_path.insert(o.plugin_path.begin(), rpclb::test::test_plugin_dir());
    return o;
}

// The members `node` sees in `balancer`; empty when it sees none.
Strings members(const rpclb::Cluster& node, const std::string& balancer) {
    auto r = node.get_members(balancer);
    return r ? *r : Strings{};
}

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Two connected nodes `a` and `b`; both answer t.whoami with their name.
struct Pair {
    Pair() : a(node_options("a@127.0.0.1")) {
        serve(a);
        a.start();
        auto ob = node_options("b@127.0.0.1");
        ob.seeds = {address(a)};
        b = std::make_unique<rpclb::Cluster>(std::move(ob));
        serve(*b);
        b->start();
        if (!eventually([&] { return a.connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s))
            throw std::runtime_error("a and b did not connect");
    }

    static void serve(rpclb::Cluster& c) {
        c.register_function("t", "whoami", [name = c.name()](const boost::json::array&) -> rpclb::CallResult {
            return boost::json::value(name);
        });
    }

    // A whoami call from a: through `balancer` when given, else straight to a.
    rpclb::CallResult whoami(const std::string& balancer = "") {
        rpclb::CallOptions o;
        o.timeout = 5s;
        o.retry = false;
        if (balancer.empty()) return a.call(a.name(), "t", "whoami", {}, o);
        o.load_balancer = balancer;
        return a.call("t", "whoami", {}, o);
    }

    // What a node that has met a misbehaving plugin must still do: answer direct calls,
    // and start and route through a well-behaved balancer.
    void check_still_serving(const std::string& balancer) {
        BOOST_TEST(whoami().value().as_string() == a.name());
        rpclb::LoadBalancerOptions o;
        o.name = balancer + "_after";
        o.algorithm = "round_robin";
        a.start_balancer(o);
        const auto r = whoami(o.name);
        BOOST_TEST_REQUIRE(r.has_value(), (r ? "" : r.error().message));
        BOOST_TEST(r->as_string() == a.name());
    }

    rpclb::Cluster a;
    std::unique_ptr<rpclb::Cluster> b;
};

rpclb::LoadBalancerOptions misbehaving(std::string name, boost::json::object algorithm_opts) {
    return rpclb::test::balancer_options(std::move(name), "misbehaving_hooks", std::move(algorithm_opts));
}

rpclb::LoadBalancerOptions throwing_in(const std::string& hook, const std::string& what) {
    return misbehaving("mb_" + hook + "_" + what, {{"throw_in", hook}, {"throw_what", what}});
}

// The message of what start_balancer throws ("" when it returns).
std::string start_failure(rpclb::Cluster& node, const rpclb::LoadBalancerOptions& options) {
    try {
        node.start_balancer(options);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

// init, services() and local() all run when the balancer starts: a throw fails
// start_balancer with a message naming the balancer, the algorithm and the hook, leaves
// no balancer behind, and the same name starts afterwards with good options.
void check_start_fails(const std::string& hook, const std::string& hook_in_message) {
    Pair p;
    for (const std::string what : {"std", "other"}) {
        BOOST_TEST_CONTEXT("throw_what " << what) {
            const auto options = throwing_in(hook, what);
            const auto message = start_failure(p.a, options);
            const auto expected = "balancer " + options.name + ": algorithm misbehaving_hooks " + hook_in_message +
                                  (what == "std" ? " failed: " + hook + " misbehaves"
                                                 : " failed with an unknown exception");
            BOOST_TEST(message == expected);
            BOOST_TEST(p.a.balancer_names().empty());
            BOOST_TEST(!p.a.get_members(options.name).has_value());
            // Nothing was left half-started: the name is free for a good start.
            p.a.start_balancer(misbehaving(options.name, {}));
            BOOST_TEST(p.whoami(options.name).value().as_string() == p.a.name());
            BOOST_TEST(p.a.stop_balancer(options.name));
        }
    }
    p.check_still_serving("mb_" + hook);
}

// A started balancer whose members are a and b, as a sees them.
std::shared_ptr<rpclb::LoadBalancer> start_on_both(Pair& p, const rpclb::LoadBalancerOptions& options) {
    auto balancer = p.a.start_balancer(options);
    p.b->start_balancer(options);
    const Strings both{p.a.name(), p.b->name()};
    // The group first, then the balancer's own snapshot, which follows it.
    if (!eventually([&] { return members(p.a, options.name) == both && balancer->members()->nodes == both; }, 5s))
        throw std::runtime_error("a did not see both members of " + options.name);
    return balancer;
}

void check_internal_error(const rpclb::ErrorMessage& e, const std::string& balancer, const std::string& message) {
    BOOST_TEST(e.code == rpclb::ErrorCode::internal_server_error);
    BOOST_TEST(e.message == message);
    BOOST_TEST(e.details.at("load_balancer").as_string() == balancer);
}

std::string threw_message(const std::string& hook, const std::string& what) {
    return "algorithm misbehaving_hooks threw" + (what == "std" ? ": " + hook + " misbehaves" : std::string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hooks_that_throw)

BOOST_AUTO_TEST_CASE(init_throwing_fails_start_balancer_with_its_message) { check_start_fails("init", "init"); }

BOOST_AUTO_TEST_CASE(services_throwing_fails_start_balancer_naming_services) {
    check_start_fails("services", "services()");
}

BOOST_AUTO_TEST_CASE(local_throwing_fails_start_balancer_naming_local) { check_start_fails("local", "local()"); }

BOOST_AUTO_TEST_CASE(choose_from_nodes_throwing_fails_the_pick_and_the_call_with_internal_server_error) {
    Pair p;
    for (const std::string what : {"std", "other"}) {
        BOOST_TEST_CONTEXT("throw_what " << what) {
            const auto options = throwing_in("choose_from_nodes", what);
            start_on_both(p, options);
            const auto message = threw_message("choose_from_nodes", what);
            const auto picked = p.a.select_node(options.name);
            BOOST_TEST_REQUIRE(!picked.has_value());
            check_internal_error(picked.error(), options.name, message);
            const auto called = p.whoami(options.name);
            BOOST_TEST_REQUIRE(!called.has_value());
            check_internal_error(called.error(), options.name, message);
            // The rest of the balancer still works.
            BOOST_TEST(p.a.get_members(options.name).value().size() == 2u);
        }
    }
    p.check_still_serving("mb_choose_from_nodes");
}

BOOST_AUTO_TEST_CASE(choose_nodes_throwing_fails_select_nodes_with_internal_server_error) {
    Pair p;
    for (const std::string what : {"std", "other"}) {
        BOOST_TEST_CONTEXT("throw_what " << what) {
            const auto options = throwing_in("choose_nodes", what);
            const auto balancer = start_on_both(p, options);
            const auto picked = balancer->select_nodes(2);
            BOOST_TEST_REQUIRE(!picked.has_value());
            check_internal_error(picked.error(), options.name, threw_message("choose_nodes", what));
            // Single picks don't use the hook.
            BOOST_TEST(p.whoami(options.name).value().as_string() == p.a.name());
        }
    }
    p.check_still_serving("mb_choose_nodes");
}

BOOST_AUTO_TEST_CASE(on_node_change_throwing_is_logged_and_the_membership_still_changes) {
    Pair p;
    LogCapture log;
    for (const std::string what : {"std", "other"}) {
        BOOST_TEST_CONTEXT("throw_what " << what) {
            const auto options = throwing_in("on_node_change", what);
            const auto logged = "balancer " + options.name + ": on_node_change threw" +
                                (what == "std" ? ": on_node_change misbehaves" : "");
            // b joining is a change a sees: a's hook throws, and a's members still grow.
            start_on_both(p, options);
            BOOST_TEST(eventually([&] { return log.count(logged) >= 1; }, 5s));
            BOOST_TEST(p.whoami(options.name).value().as_string() == p.a.name());
            // b leaving too.
            BOOST_TEST(p.b->stop_balancer(options.name));
            BOOST_TEST(eventually([&] { return members(p.a, options.name) == Strings{p.a.name()}; }, 5s));
            BOOST_TEST(p.whoami(options.name).value().as_string() == p.a.name());
        }
    }
    p.check_still_serving("mb_on_node_change");
}

BOOST_AUTO_TEST_CASE(release_throwing_is_logged_and_the_call_result_is_kept) {
    Pair p;
    LogCapture log;
    for (const std::string what : {"std", "other"}) {
        BOOST_TEST_CONTEXT("throw_what " << what) {
            const auto options = throwing_in("release", what);
            const auto logged = "balancer " + options.name + ": release threw" +
                                (what == "std" ? ": release misbehaves" : "");
            start_on_both(p, options);
            for (int i = 1; i <= 3; ++i) {
                const auto r = p.whoami(options.name);
                BOOST_TEST_REQUIRE(r.has_value(), (r ? "" : r.error().message));
                BOOST_TEST(r->as_string() == p.a.name());
                BOOST_TEST(eventually([&] { return log.count(logged) >= static_cast<std::size_t>(i); }, 5s));
            }
        }
    }
    p.check_still_serving("mb_release_node");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(choose_nodes_contract)

// A choose_nodes answer that breaks the contract is refused whole, naming the algorithm.
BOOST_AUTO_TEST_CASE(select_nodes_refuses_duplicate_out_of_range_or_too_many_indices) {
    Pair p;
    struct Case {
        std::string bad_nodes;
        std::size_t count;
        std::string message;
    };
    const std::vector<Case> cases{
        {"duplicate", 3, "algorithm misbehaving_hooks picked node " + p.a.name() + " twice"},
        {"out_of_range", 2, "algorithm misbehaving_hooks picked an index out of range"},
        {"too_many", 1, "algorithm misbehaving_hooks picked 2 nodes, more than the 1 asked for"},
    };
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT("bad_nodes " << c.bad_nodes) {
            const auto options = misbehaving("mb_" + c.bad_nodes, {{"bad_nodes", c.bad_nodes}});
            const auto balancer = start_on_both(p, options);
            const auto picked = balancer->select_nodes(c.count);
            BOOST_TEST_REQUIRE(!picked.has_value());
            check_internal_error(picked.error(), options.name, c.message);
            // The same algorithm answers a count where it happens to be right.
            if (c.bad_nodes == "too_many") {
                const auto all = balancer->select_nodes(2);
                BOOST_TEST_REQUIRE(all.has_value(), (all ? "" : all.error().message));
                BOOST_TEST(*all == (Strings{p.a.name(), p.b->name()}), boost::test_tools::per_element());
            }
        }
    }
    p.check_still_serving("mb_bad_nodes");
}

BOOST_AUTO_TEST_CASE(select_nodes_passes_a_contract_abiding_answer_through_in_order) {
    Pair p;
    const auto balancer = start_on_both(p, misbehaving("mb_good_nodes", {}));
    BOOST_TEST(balancer->select_nodes(1).value() == Strings{p.a.name()}, boost::test_tools::per_element());
    BOOST_TEST(balancer->select_nodes(5).value() == (Strings{p.a.name(), p.b->name()}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
