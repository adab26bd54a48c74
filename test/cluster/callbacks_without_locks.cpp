// No callback, plugin code or telemetry runs under a lock that a call path takes:
// membership monitors run with no Groups lock held, and building a balancer (plugin
// loading, the algorithm's init) never holds up calls through other balancers.
#define BOOST_TEST_MODULE callbacks_without_locks
#include <rpclb/algorithm_state.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;

// Before: Groups::notify held its monitor mutex while callbacks ran, so a callback that
// (de)registered a monitor deadlocked the thread applying the change.
BOOST_AUTO_TEST_CASE(a_monitor_callback_may_use_groups) {
    rpclb::Groups groups("me@host");
    std::atomic<int> inner_calls{0};
    std::uint64_t inner = 0;
    groups.monitor("g", [&](const std::string& group, rpclb::NodeChange, const std::vector<std::string>&) {
        (void)groups.members(group);
        if (!inner) inner = groups.monitor("g", [&](auto&&...) { ++inner_calls; });
    });
    auto applied = std::async(std::launch::async, [&] {
        groups.apply_join("x@host", "g", {});
        groups.apply_join("y@host", "g", {});
    });
    BOOST_REQUIRE(applied.wait_for(5s) == std::future_status::ready);  // no deadlock
    BOOST_TEST(inner_calls.load() == 1);  // registered during the first, heard the second
    groups.demonitor(inner);
    BOOST_TEST(groups.members("g")->nodes.size() == 2u);
}

BOOST_AUTO_TEST_CASE(demonitor_waits_for_a_running_callback_on_another_thread) {
    rpclb::Groups groups("me@host");
    std::promise<void> entered, release;
    auto released = release.get_future().share();
    std::atomic<bool> running{false};
    const auto id = groups.monitor("g", [&](auto&&...) {
        running = true;
        entered.set_value();
        released.wait();
        running = false;
    });
    auto applier = std::async(std::launch::async, [&] { groups.apply_join("x@host", "g", {}); });
    entered.get_future().wait();
    auto remover = std::async(std::launch::async, [&] { groups.demonitor(id); });
    BOOST_TEST((remover.wait_for(100ms) == std::future_status::timeout));  // waits for the callback
    release.set_value();
    BOOST_REQUIRE(remover.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(!running.load());
    applier.get();
}

BOOST_AUTO_TEST_CASE(notifications_keep_the_order_of_the_changes) {
    rpclb::Groups groups("me@host");
    std::mutex m;
    std::vector<std::string> heard;
    groups.monitor("g", [&](const std::string&, rpclb::NodeChange change, const std::vector<std::string>& nodes) {
        std::lock_guard lock(m);
        heard.push_back((change == rpclb::NodeChange::joined ? "+" : "-") + nodes.front());
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i) {
                const auto node = "n" + std::to_string(t) + "@host";
                groups.apply_join(node, "g", {});
                groups.apply_leave(node, "g");
            }
        });
    for (auto& t : threads) t.join();
    BOOST_TEST(heard.size() == 400u);
    // Each node's own changes alternate join, leave: never two joins in a row.
    for (int t = 0; t < 4; ++t) {
        const auto node = "n" + std::to_string(t) + "@host";
        char last = '-';
        for (const auto& h : heard)
            if (h.substr(1) == node) {
                BOOST_TEST(h[0] != last);
                last = h[0];
            }
    }
    BOOST_TEST(groups.members("g")->nodes.empty());
}

// Before: a node building a routing-only balancer (plugin load and init) held the lock
// that every load-balanced call takes, so calls through other balancers waited for it.
BOOST_AUTO_TEST_CASE(building_a_slow_balancer_holds_up_no_other_call) {
    auto oa = rpclb::test::in_process_node_options("a@127.0.0.1");
    oa.plugin_path.push_back(rpclb::test::test_plugin_dir());
    rpclb::Cluster a(oa);
    a.register_function("t", "where", [](const boost::json::array&) -> rpclb::CallResult { return "a"; });
    a.start();
    a.start_balancer(rpclb::test::balancer_options("fast", "round_robin"));
    auto oc = rpclb::test::in_process_node_options(
        "c@127.0.0.1", {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port())});
    oc.client = true;
    oc.plugin_path.push_back(rpclb::test::test_plugin_dir());
    rpclb::Cluster c(oc);
    c.start();
    BOOST_REQUIRE(rpclb::test::wait_for_members(c, "fast", {"a@127.0.0.1"}));
    rpclb::CallOptions fast;
    fast.load_balancer = "fast";
    BOOST_REQUIRE(c.call("t", "where", {}, fast).has_value());  // "fast" is built on c

    // c's first call through "slow2" builds it from a's announcement: its init sleeps 3 s
    // on c (as it did on a).
    a.start_balancer(rpclb::test::balancer_options("slow2", "slow_init", {{"sleep_ms", 3000}}));
    BOOST_REQUIRE(rpclb::test::wait_for_members(c, "slow2", {"a@127.0.0.1"}));
    auto& state = rpclb::AlgorithmState::instance();
    const auto done_before = state.counter("slow2", "slow_init.done").load();
    auto slow_call = std::async(std::launch::async, [&] {
        rpclb::CallOptions o;
        o.load_balancer = "slow2";
        return c.call("t", "where", {}, o);
    });
    BOOST_REQUIRE(eventually([&] { return state.counter("slow2", "slow_init.entered").load() == 2; }, 5s));
    // c's init of slow2 is sleeping now: a call through "fast" must not wait for it.
    auto fast_call = std::async(std::launch::async, [&] { return c.call("t", "where", {}, fast); });
    BOOST_REQUIRE(fast_call.wait_for(2s) == std::future_status::ready);
    BOOST_TEST(fast_call.get().has_value());
    BOOST_TEST(state.counter("slow2", "slow_init.done").load() == done_before);  // still in init
    BOOST_TEST(slow_call.get().has_value());
}
