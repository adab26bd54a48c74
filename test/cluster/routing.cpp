// Routing between in-process nodes on 127.0.0.1: the no-route retry
// (predecessor-compatibility §4.1), short-circuits (§4.4), the random-node helpers (§1.6,
// §1.7), the named balancer handle (§1.8), the asynchronous API with every kind of
// completion token, and draining.
#define BOOST_TEST_MODULE routing
#include <rpclb/balancer_handle.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "../../src/admin/node_view.hpp"
#include "support/node.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <memory>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::consistently;
using rpclb::test::eventually;

namespace {

rpclb::ClusterOptions options(std::string name, std::vector<std::string> seeds = {}) {
    auto o = rpclb::test::in_process_node_options(std::move(name), std::move(seeds));
    o.cookie = "routing-cookie";  // the raw peers below hand-shake with it
    return o;
}

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// When the last demo.sleep of any node returned, on the steady clock (a test sets it to
// time_point::max() before its call): a test that a stop waited for a call compares it with
// the time the stop returned, which no scheduling delay can turn round (a fixed least
// duration could be eaten by a stall before the stop).
std::atomic<std::chrono::steady_clock::time_point> sleep_returned{};

// Registers demo.node (returns the serving node's name), counted in `runs`, and
// demo.sleep(ms) (sleeps, then returns the node's name).
void register_functions(rpclb::Cluster& c, std::atomic<int>* runs = nullptr) {
    const auto name = c.name();
    c.register_function("demo", "node", [name, runs](const boost::json::array&) -> rpclb::CallResult {
        if (runs) ++*runs;
        return boost::json::value(name);
    });
    c.register_function("demo", "sleep", [name](const boost::json::array& args) -> rpclb::CallResult {
        // Takes as long as the caller asks: the run time is the test's input.
        std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).to_number<int>()));
        sleep_returned.store(std::chrono::steady_clock::now());
        return boost::json::value(name);
    });
}

// Two nodes `a` and `b` connected to each other, with the demo functions.
struct Pair {
    Pair(rpclb::ClusterOptions oa = options("a@127.0.0.1"), rpclb::ClusterOptions ob = options("b@127.0.0.1"))
        : a(std::move(oa)) {
        register_functions(a, &a_runs);
        a.start();
        ob.seeds = {address(a)};
        b = std::make_unique<rpclb::Cluster>(std::move(ob));
        register_functions(*b, &b_runs);
        b->start();
        if (!eventually([&] { return a.connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s))
            throw std::runtime_error("a and b did not connect");
    }
    std::atomic<int> a_runs{0}, b_runs{0};
    rpclb::Cluster a;
    std::unique_ptr<rpclb::Cluster> b;
};

rpclb::LoadBalancerOptions balancer(std::string name, std::string algorithm = "round_robin") {
    rpclb::LoadBalancerOptions o;
    o.name = std::move(name);
    o.algorithm = std::move(algorithm);
    return o;
}

rpclb::LoadBalancerOptions nobody(std::string name) {
    auto o = balancer(std::move(name));
    o.node_match_list = rpclb::NodeMatchList::none();
    return o;
}

rpclb::CallOptions through(std::string lb) {
    rpclb::CallOptions o;
    o.load_balancer = std::move(lb);
    return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(retry)

// predecessor-compatibility §7 case 16 and 18.
BOOST_AUTO_TEST_CASE(a_balancer_no_node_matches_has_no_members_and_fails_at_once_without_retry) {
    Pair p;
    p.a.start_balancer(nobody("lonely"));
    BOOST_TEST(!p.a.get_members("lonely"));
    auto o = through("lonely");
    o.retry = false;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.a.call("demo", "node", {}, o);
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(r.error().message == "no members registered");
    BOOST_TEST(r.error().details.at("load_balancer").as_string() == "lonely");
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 1s));
}

// predecessor-compatibility §7 case 17: a member appears while the call waits.
BOOST_AUTO_TEST_CASE(a_call_waiting_for_a_member_succeeds_when_one_joins) {
    Pair p;
    p.a.start_balancer(nobody("late"));
    auto o = through("late");
    o.retry_count = rpclb::unlimited_retries;
    o.retry_sleep = 5ms;
    auto pending = std::async(std::launch::async, [&] { return p.a.call("demo", "node", {}, o); });
    BOOST_TEST(consistently([&] { return pending.wait_for(0s) == std::future_status::timeout; }, 25ms));
    p.b->start_balancer(balancer("late"));
    BOOST_REQUIRE((pending.wait_for(5s) == std::future_status::ready));
    auto r = pending.get();
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->as_string() == "b@127.0.0.1");
}

// total attempts = retry_count + 1, each `retry_sleep` apart (predecessor-compatibility §4.1).
BOOST_AUTO_TEST_CASE(retries_are_counted_and_spaced_by_retry_sleep) {
    Pair p;
    auto o = through("never-started");
    o.retry_count = 3;
    o.retry_sleep = 40ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.a.call("demo", "node", {}, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().message == "no members registered");
    BOOST_TEST((took >= 120ms));
    BOOST_TEST((took < 2s));
}

// The call's timeout bounds its waits for a member, whatever retry_count and retry_sleep
// would allow (by default 5 waits of 5 s).
BOOST_AUTO_TEST_CASE(a_calls_timeout_bounds_its_waits_for_a_member) {
    Pair p;
    auto o = through("never-started");
    o.timeout = 200ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.a.call("demo", "node", {}, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(r.error().is(rpclb::Failure::timeout));
    BOOST_TEST(r.error().message == "timeout while waiting for a member: no members registered");
    BOOST_TEST(r.error().details.at("load_balancer").as_string() == "never-started");
    BOOST_TEST((took >= 200ms));
    BOOST_TEST((took < 3s));
}

BOOST_AUTO_TEST_CASE(the_node_default_turns_retry_off) {
    auto oa = options("a@127.0.0.1");
    oa.retry = false;
    Pair p(oa);
    auto o = through("never-started");
    o.retry_sleep = 10s;
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_TEST(!p.a.call("demo", "node", {}, o));
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 1s));
}

// An asynchronous call waiting for a route holds no thread: with one worker and one
// network thread, other calls are still served meanwhile.
BOOST_AUTO_TEST_CASE(an_async_call_waiting_for_a_route_blocks_no_thread) {
    auto oa = options("a@127.0.0.1");
    oa.worker_threads = 1;
    Pair p(oa);
    auto o = through("later");
    o.retry_count = rpclb::unlimited_retries;
    o.retry_sleep = 20ms;
    auto waiting = p.a.async_call("a@127.0.0.1", "demo", "node", {}, o, boost::asio::use_future);
    for (int i = 0; i < 5; ++i) BOOST_TEST(p.b->call("a@127.0.0.1", "demo", "node").has_value());
    p.b->start_balancer(balancer("later"));
    BOOST_REQUIRE((waiting.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(waiting.get().value().as_string() == "b@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(stopping_the_node_ends_a_call_waiting_for_a_route) {
    Pair p;
    auto o = through("never-started");
    o.retry_count = rpclb::unlimited_retries;
    o.retry_sleep = 50ms;
    auto waiting = p.a.async_call("a@127.0.0.1", "demo", "node", {}, o, boost::asio::use_future);
    // Still waiting after a few retry sleeps, then stopped.
    BOOST_TEST(consistently([&] { return waiting.wait_for(0s) == std::future_status::timeout; }, 60ms));
    p.a.stop();
    BOOST_REQUIRE((waiting.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(!waiting.get());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(deadlines)

// Each call keeps its own deadline even when a later call has the earlier one.
BOOST_AUTO_TEST_CASE(a_later_call_with_a_shorter_timeout_times_out_first) {
    Pair p;
    rpclb::CallOptions patient, hasty;
    patient.timeout = 3s;
    hasty.timeout = 100ms;
    auto slow = p.a.async_call("b@127.0.0.1", "demo", "sleep", {1200}, patient, boost::asio::use_future);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.a.call("b@127.0.0.1", "demo", "sleep", {1000}, hasty);
    const auto took = std::chrono::steady_clock::now() - t0;
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST((took < 800ms));
    BOOST_TEST(slow.get().has_value());  // the earlier call is unaffected
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(short_circuits)

// predecessor-compatibility §7 case 96: call_directly runs the function here.
BOOST_AUTO_TEST_CASE(call_directly_runs_a_load_balanced_call_on_this_node) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    auto o = through("w");
    BOOST_TEST(p.a.call("demo", "node", {}, o).value().as_string() == "b@127.0.0.1");
    o.call_directly = true;
    BOOST_TEST(p.a.call("demo", "node", {}, o).value().as_string() == "a@127.0.0.1");
    BOOST_TEST(p.a.cast(p.a.name(), "demo", "node", {}, o).has_value());
    BOOST_TEST(eventually([&] { return p.a_runs.load() == 2; }, 5s));
}

BOOST_AUTO_TEST_CASE(the_node_default_of_call_directly_applies_and_a_call_option_overrides_it) {
    auto oa = options("a@127.0.0.1");
    oa.call_directly = true;
    Pair p(oa);
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    BOOST_TEST(p.a.call("demo", "node", {}, through("w")).value().as_string() == "a@127.0.0.1");
    auto o = through("w");
    o.call_directly = false;
    BOOST_TEST(p.a.call("demo", "node", {}, o).value().as_string() == "b@127.0.0.1");
    // Ignored for direct calls (predecessor-compatibility §4.4).
    BOOST_TEST(p.a.call("b@127.0.0.1", "demo", "node").value().as_string() == "b@127.0.0.1");
}

// predecessor-compatibility §7 case 101: call_direct runs load-balanced calls and casts here.
BOOST_AUTO_TEST_CASE(a_call_direct_balancer_runs_calls_and_casts_locally) {
    Pair p;
    p.a.start_balancer(balancer("here", "call_direct"));
    BOOST_TEST(p.a.call("demo", "node", {}, through("here")).value().as_string() == "a@127.0.0.1");
    BOOST_TEST(p.a.cast(p.a.name(), "demo", "node", {}, through("here")).has_value());
    BOOST_TEST(eventually([&] { return p.a_runs.load() == 2; }, 5s));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(random_node)

// predecessor-compatibility §7 case 25: the current node matches → local.
BOOST_AUTO_TEST_CASE(a_filter_matching_this_node_runs_here) {
    Pair p;
    BOOST_TEST(p.a.call_on_random_node(rpclb::NodeFilter::substring(""), "demo", "node").value().as_string() ==
               "a@127.0.0.1");
    BOOST_TEST(p.a.cast_on_random_node(rpclb::NodeFilter::substring("a@"), "demo", "node").has_value());
    BOOST_TEST(eventually([&] { return p.a_runs.load() == 2; }, 5s));
    BOOST_TEST(p.b_runs.load() == 0);
}

// predecessor-compatibility §7 cases 8–10.
BOOST_AUTO_TEST_CASE(a_filter_matching_only_a_peer_runs_there) {
    Pair p;
    BOOST_TEST(p.a.call_on_random_node(rpclb::NodeFilter::regex("^b@"), "demo", "node").value().as_string() ==
               "b@127.0.0.1");
    BOOST_TEST(p.a.cast_on_random_node(rpclb::NodeFilter::substring("b@127"), "demo", "node").has_value());
    BOOST_TEST(eventually([&] { return p.b_runs.load() == 2; }, 5s));
}

BOOST_AUTO_TEST_CASE(no_matching_node_gives_the_predecessors_error_after_the_retries) {
    Pair p;
    rpclb::CallOptions o;
    o.retry_count = 1;
    o.retry_sleep = 20ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.a.call_on_random_node(rpclb::NodeFilter::regex("^zeta@"), "demo", "node", {}, o);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 >= 20ms));
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(r.error().message == "no nodes in cluster found with that filter");
    BOOST_TEST(r.error().details.at("node_filter").as_string() == "/^zeta@/");
}

BOOST_AUTO_TEST_CASE(excluded_patterns_of_the_node_apply_to_the_candidates) {
    auto oa = options("a@127.0.0.1");
    oa.excluded_node_patterns = {"b"};
    Pair p(oa);
    rpclb::CallOptions o;
    o.retry = false;
    // b's short name holds "b": excluded unless the filter's own text holds it
    // (predecessor-compatibility §4.3).
    auto r = p.a.call_on_random_node(rpclb::NodeFilter::regex("^[^a]@"), "demo", "node", {}, o);
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().message == "no nodes in cluster found with that filter");
    BOOST_TEST(p.a.call_on_random_node(rpclb::NodeFilter::substring("b@"), "demo", "node", {}, o)
                   .value()
                   .as_string() == "b@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(a_load_balancer_option_counts_the_call_in_that_drainer) {
    Pair p;
    auto lb = p.a.start_balancer(nobody("counted"));
    auto o = through("counted");
    auto pending = std::async(std::launch::async, [&] {
        return p.a.call_on_random_node(rpclb::NodeFilter::substring("b@"), "demo", "sleep", {300}, o);
    });
    BOOST_TEST(eventually([&] { return lb->in_flight() == 1; }, 5s));
    BOOST_TEST(pending.get().value().as_string() == "b@127.0.0.1");
    BOOST_TEST(lb->in_flight() == 0);
    // Without that balancer on this node: a clear error, nothing run.
    auto r = p.a.call_on_random_node(rpclb::NodeFilter::substring("b@"), "demo", "node", {}, through("nope"));
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().message.find("load_balancer") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(handle)

// predecessor-compatibility §7 cases 20–26 (with call_direct, as the predecessor's test).
BOOST_AUTO_TEST_CASE(a_named_handle_routes_through_its_balancer_without_options) {
    Pair p;
    auto o = balancer("Workers", "call_direct");
    rpclb::BalancerHandle workers(p.a, o);
    workers.start();
    BOOST_TEST(workers.get_members().value() == std::vector<std::string>{"a@127.0.0.1"});
    BOOST_TEST(workers.select_node().value() == "a@127.0.0.1");
    BOOST_TEST(workers.call("demo", "node").value().as_string() == "a@127.0.0.1");
    BOOST_TEST(workers.cast("demo", "node").has_value());
    BOOST_TEST(workers.call_on_random_node(rpclb::NodeFilter::substring(""), "demo", "node").value().as_string() ==
               "a@127.0.0.1");
    BOOST_TEST(workers.cast_on_random_node(rpclb::NodeFilter::substring(""), "demo", "node").has_value());
    BOOST_TEST(eventually([&] { return p.a_runs.load() == 4; }, 5s));
    BOOST_TEST(workers.stop());
    BOOST_TEST(!workers.get_members());
}

BOOST_AUTO_TEST_CASE(the_handle_replaces_a_load_balancer_option_and_matches_the_plain_api) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    rpclb::BalancerHandle w(p.a, std::string("w"));
    BOOST_TEST(w.call("demo", "node", {}, through("other")).value().as_string() == "b@127.0.0.1");
    BOOST_TEST(p.a.call("demo", "node", {}, through("w")).value().as_string() == "b@127.0.0.1");
    BOOST_TEST(w.get_members().value() == p.a.get_members("w").value());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(async_api)

BOOST_AUTO_TEST_CASE(a_callback_token_completes_on_the_worker_pool) {
    Pair p;
    std::promise<std::pair<rpclb::CallResult, bool>> done;
    p.a.async_call("b@127.0.0.1", "demo", "node", {}, {}, [&](rpclb::CallResult r) {
        done.set_value({std::move(r), true});
    });
    auto f = done.get_future();
    BOOST_REQUIRE((f.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(f.get().first.value().as_string() == "b@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(use_future_works_for_call_cast_and_select) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    auto call = p.a.async_call("", "demo", "node", {}, through("w"), boost::asio::use_future);
    auto cast = p.a.async_cast("b@127.0.0.1", "demo", "node", {}, {}, boost::asio::use_future);
    auto pick = p.a.async_select_node("w", {}, boost::asio::use_future);
    BOOST_TEST(call.get().value().as_string() == "b@127.0.0.1");
    BOOST_TEST(cast.get().has_value());
    BOOST_TEST(pick.get().value() == "b@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(use_awaitable_works_in_a_coroutine) {
    // Declared before the nodes, so destroyed after them: a network thread may still be
    // returning from its post to `ioc` when the coroutine ends.
    boost::asio::io_context ioc;
    Pair p;
    std::string got;
    boost::asio::co_spawn(
        ioc,
        [&]() -> boost::asio::awaitable<void> {
            // Each operation is built in its own statement: g++ 12 mis-moves some class
            // temporaries that live inside a co_await expression (GCC bug 100611).
            auto call = p.a.async_call("b@127.0.0.1", "demo", "node", {}, {}, boost::asio::use_awaitable);
            auto r = co_await std::move(call);
            auto helper = p.a.async_call_on_random_node(rpclb::NodeFilter::regex("^b@"), "demo", "node", {}, {},
                                                        boost::asio::use_awaitable);
            auto picked = co_await std::move(helper);
            got = std::string(r.value().as_string()) + "," + std::string(picked.value().as_string());
        },
        boost::asio::detached);
    ioc.run_for(5s);
    BOOST_TEST(got == "b@127.0.0.1,b@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(deferred_starts_nothing_until_invoked) {
    Pair p;
    auto op = p.a.async_call("b@127.0.0.1", "demo", "node", {}, {}, boost::asio::deferred);
    BOOST_TEST(consistently([&] { return p.b_runs.load() == 0; }, 50ms));
    std::promise<rpclb::CallResult> done;
    std::move(op)([&](rpclb::CallResult r) { done.set_value(std::move(r)); });
    BOOST_TEST(done.get_future().get().value().as_string() == "b@127.0.0.1");
    BOOST_TEST(p.b_runs.load() == 1);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// A copy of an Event's fields that outlives the emission.
struct Seen {
    rpclb::EventName name;
    std::string type, node, module, function, load_balancer, status, group, algorithm, outcome, reason, path;
    std::int64_t members_count = 0, in_flight = 0;
    std::chrono::nanoseconds duration{0};
    std::int64_t system_time_ns = 0;
};

class Recorder {
public:
    explicit Recorder(rpclb::TelemetryBus& bus)
        : connection_(bus.connect([this](const rpclb::Event& e) {
              std::lock_guard lock(mutex_);
              seen_.push_back(Seen{e.name, std::string(e.type), std::string(e.node), std::string(e.module),
                                   std::string(e.function), std::string(e.load_balancer), std::string(e.status),
                                   std::string(e.group), std::string(e.algorithm), std::string(e.outcome),
                                   std::string(e.reason), std::string(e.path), e.members_count, e.in_flight, e.duration,
                                   e.system_time_ns});
          })) {}

    std::vector<Seen> of(rpclb::EventName name) const {
        std::lock_guard lock(mutex_);
        std::vector<Seen> out;
        for (const auto& s : seen_)
            if (s.name == name) out.push_back(s);
        return out;
    }

private:
    mutable std::mutex mutex_;
    std::vector<Seen> seen_;
    rpclb::TelemetryBus::ScopedConnection connection_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(telemetry)

// predecessor-compatibility §7 cases 27 and 29.
BOOST_AUTO_TEST_CASE(a_direct_call_emits_start_and_stop_with_the_predecessors_metadata) {
    Pair p;
    Recorder events(p.a.telemetry());
    BOOST_TEST(p.a.call("b@127.0.0.1", "demo", "node").has_value());
    auto start = events.of(rpclb::EventName::rpc_start);
    auto stop = events.of(rpclb::EventName::rpc_stop);
    BOOST_REQUIRE(start.size() == 1u);
    BOOST_REQUIRE(stop.size() == 1u);
    BOOST_TEST(start[0].type == "call");
    BOOST_TEST(start[0].node == "b@127.0.0.1");
    BOOST_TEST(start[0].module == "demo");
    BOOST_TEST(start[0].function == "node");
    BOOST_TEST(start[0].load_balancer == "");
    BOOST_TEST(start[0].system_time_ns > 0);
    BOOST_TEST(stop[0].status == "ok");
    BOOST_TEST(stop[0].type == "call");
    BOOST_TEST(stop[0].duration.count() > 0);
}

// predecessor-compatibility §7 cases 28 and 30.
BOOST_AUTO_TEST_CASE(a_load_balanced_call_names_its_balancer_and_a_failed_call_its_status) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    Recorder events(p.a.telemetry());
    BOOST_TEST(p.a.call("demo", "node", {}, through("w")).has_value());
    rpclb::CallOptions quick;
    quick.timeout = 50ms;
    BOOST_TEST(!p.a.call("nonexistent@nowhere", "demo", "node", {}, quick));
    auto stop = events.of(rpclb::EventName::rpc_stop);
    BOOST_REQUIRE(stop.size() == 2u);
    BOOST_TEST(stop[0].load_balancer == "w");
    BOOST_TEST(stop[0].node == "a@127.0.0.1");  // the node argument, as in the predecessor
    BOOST_TEST(stop[1].status == "service_unavailable");
}

// predecessor-compatibility §7 case 31 and the short-circuits: casts and local runs are
// spans too; a handler that throws here is rpc.exception.
BOOST_AUTO_TEST_CASE(casts_and_short_circuited_calls_are_spans_and_a_local_throw_is_an_exception) {
    Pair p;
    p.a.register_function("demo", "fail", [](const boost::json::array&) -> rpclb::CallResult {
        throw std::runtime_error("boom");
    });
    p.a.start_balancer(balancer("here", "call_direct"));
    Recorder events(p.a.telemetry());
    BOOST_TEST(p.a.cast("b@127.0.0.1", "demo", "node").has_value());
    BOOST_TEST(p.a.call("demo", "node", {}, through("here")).has_value());
    BOOST_TEST(!p.a.call("demo", "fail", {}, through("here")));
    auto start = events.of(rpclb::EventName::rpc_start);
    auto stop = events.of(rpclb::EventName::rpc_stop);
    auto exception = events.of(rpclb::EventName::rpc_exception);
    BOOST_REQUIRE(start.size() == 3u);
    BOOST_TEST(start[0].type == "cast");
    BOOST_REQUIRE(stop.size() == 2u);
    BOOST_TEST(stop[0].type == "cast");
    BOOST_TEST(stop[1].load_balancer == "here");
    BOOST_REQUIRE(exception.size() == 1u);
    BOOST_TEST(exception[0].function == "fail");
    // No selection for a short-circuit (predecessor-compatibility §5.2).
    BOOST_TEST(events.of(rpclb::EventName::node_selected).empty());
}

// predecessor-compatibility §7 cases 32–34, from the dispatch, for any algorithm.
BOOST_AUTO_TEST_CASE(each_pick_publishes_node_selected_and_an_empty_pool_node_selected_empty) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    p.a.start_balancer(nobody("empty"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    Recorder events(p.a.telemetry());
    BOOST_TEST(p.a.select_node("w").value() == "b@127.0.0.1");
    BOOST_TEST(!p.a.select_node("empty"));
    auto picked = events.of(rpclb::EventName::node_selected);
    BOOST_REQUIRE(picked.size() == 1u);
    BOOST_TEST(picked[0].algorithm == "round_robin");
    BOOST_TEST(picked[0].load_balancer == "w");
    BOOST_TEST(picked[0].node == "b@127.0.0.1");
    BOOST_TEST(picked[0].members_count == 1);
    auto empty = events.of(rpclb::EventName::node_selected_empty);
    BOOST_REQUIRE(empty.size() == 1u);
    BOOST_TEST(empty[0].load_balancer == "empty");
    BOOST_TEST(empty[0].node == "");
}

BOOST_AUTO_TEST_CASE(loading_and_refusing_a_plugin_is_published) {
    Pair p;
    Recorder events(p.a.telemetry());
    p.a.start_balancer(balancer("w", "random"));
    BOOST_CHECK_THROW(p.a.start_balancer(balancer("x", "no_such_algorithm")), std::runtime_error);
    auto loaded = events.of(rpclb::EventName::plugin_loaded);
    auto rejected = events.of(rpclb::EventName::plugin_rejected);
    BOOST_REQUIRE(loaded.size() == 1u);
    BOOST_TEST(loaded[0].algorithm == "random");
    BOOST_TEST(loaded[0].path.find("librpclb_random.so") != std::string::npos);
    BOOST_REQUIRE(rejected.size() == 1u);
    BOOST_TEST(rejected[0].algorithm == "no_such_algorithm");
    BOOST_TEST(rejected[0].reason.find("not found") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(membership_changes_are_published) {
    Pair p;
    Recorder events(p.a.telemetry());
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return events.of(rpclb::EventName::membership_join).size() == 1u; }, 5s));
    auto join = events.of(rpclb::EventName::membership_join)[0];
    BOOST_TEST(join.group == "w");
    BOOST_TEST(join.node == "b@127.0.0.1");
    p.b->stop_balancer("w");
    BOOST_REQUIRE(eventually([&] { return events.of(rpclb::EventName::membership_leave).size() == 1u; }, 5s));
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

namespace wire = rpclb::detail::wire;

// A hand-driven member node `r@127.0.0.1` connected to `node`: it answers every request
// with a draining reply (counting them) and every bye with a bye.
class DrainingPeer {
public:
    explicit DrainingPeer(rpclb::Cluster& node) : node_(node), raw_(node.listen_endpoint()->port()) {
        const wire::PeerInfo me{"r@127.0.0.1", "inc-r", "", false};
        if (auto failure = raw_.handshake(me, "routing-cookie"))
            throw std::runtime_error("raw handshake failed: " + *failure);
    }
    ~DrainingPeer() {
        // The node closes the connection when it stops, which ends serve()'s loop even
        // when a failed check left the test before its own stop().
        if (thread_.joinable()) node_.stop();
        if (thread_.joinable()) thread_.join();
    }

    void join(const std::string& group) {
        raw_.send(wire::GroupJoin{group, boost::json::object{{"algorithm", "round_robin"},
                                                             {"algorithm_opts", boost::json::object{}}}});
    }

    // Says bye (this peer is stopping) without leaving its groups, and waits for the
    // node's answering bye: from then on the node sends nothing new here. False when no
    // answer came within 5 s.
    bool say_bye() {
        raw_.send(wire::Bye{});
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < deadline)
            if (auto text = raw_.read(1s))
                if (auto frame = wire::decode(*text); frame && std::holds_alternative<wire::Bye>(*frame)) return true;
        return false;
    }

    // Answers until the node closes the connection.
    void serve() {
        thread_ = std::thread([this] {
            while (auto text = raw_.read(30s)) {
                auto frame = wire::decode(*text);
                if (!frame) continue;
                if (auto* req = std::get_if<wire::Request>(&*frame)) {
                    ++refused;
                    raw_.send(wire::Response{req->id, rpclb::draining_error("r@127.0.0.1", req->module,
                                                                             req->function, req->load_balancer)});
                } else if (std::holds_alternative<wire::Bye>(*frame)) {
                    raw_.send(wire::Bye{});
                }
            }
        });
    }

    std::atomic<int> refused{0};

private:
    rpclb::Cluster& node_;
    rpclb::test::RawPeer raw_;
    std::thread thread_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(draining)

// Serving side (predecessor-compatibility §10.7): a call routed by a balancer this node
// does not (or no longer) serve is refused with `draining` and never run.
BOOST_AUTO_TEST_CASE(a_node_refuses_unrun_a_call_routed_by_a_balancer_it_does_not_serve) {
    Pair p;
    rpclb::test::RawPeer raw(p.a.listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, "routing-cookie"));
    auto ask = [&](std::uint64_t id) {
        raw.send(wire::Request{id, "demo", "node", {}, "w"});
        auto res = raw.read_response(id, 5s);
        BOOST_REQUIRE(res);
        return *res;
    };
    auto refused = ask(1);
    BOOST_REQUIRE(refused.contains("err"));
    auto error = rpclb::ErrorMessage::from_json(refused.at("err"));
    BOOST_REQUIRE(error);
    BOOST_TEST(rpclb::is_draining(*error));
    BOOST_TEST(error->details.at("load_balancer").as_string() == "w");
    BOOST_TEST(p.a_runs.load() == 0);

    p.a.start_balancer(balancer("w"));
    BOOST_TEST(ask(2).at("ok").as_string() == "a@127.0.0.1");
    BOOST_TEST(p.a_runs.load() == 1);

    p.a.stop_balancer("w");
    BOOST_TEST(ask(3).contains("err"));
    BOOST_TEST(p.a_runs.load() == 1);
}

// Caller side: a `draining` reply sends the call to another member; nothing is lost.
BOOST_AUTO_TEST_CASE(a_caller_picks_another_member_after_a_draining_reply) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    DrainingPeer r(p.a);
    r.join("w");
    BOOST_REQUIRE(eventually([&] { auto m = p.a.get_members("w"); return m && m->size() == 2u; }, 5s));
    r.serve();
    for (int i = 0; i < 20; ++i) {
        auto result = p.a.call("demo", "node", {}, through("w"));
        BOOST_REQUIRE(result.has_value());
        BOOST_TEST(result->as_string() == "b@127.0.0.1");
    }
    BOOST_TEST(r.refused.load() >= 5);
    BOOST_TEST(p.b_runs.load() == 20);
    p.a.stop();
}

// A member that said bye is still listed until its leave or its close arrives; a call
// picked for it meanwhile is never sent there, so it goes to another member instead of
// failing with "noconnection" (the rolling restart of test/integration loses no call).
BOOST_AUTO_TEST_CASE(a_call_picked_for_a_member_that_said_bye_goes_to_another_member) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    DrainingPeer r(p.a);
    r.join("w");
    BOOST_REQUIRE(eventually([&] { auto m = p.a.get_members("w"); return m && m->size() == 2u; }, 5s));
    BOOST_REQUIRE(r.say_bye());
    r.serve();
    for (int i = 0; i < 20; ++i) {
        auto result = p.a.call("demo", "node", {}, through("w"));
        BOOST_REQUIRE_MESSAGE(result.has_value(), "call " << i << ": " << result.error().message << " "
                                                          << boost::json::serialize(result.error().details));
        BOOST_TEST(result->as_string() == "b@127.0.0.1");
        auto async = p.a.async_call("", "demo", "node", {}, through("w"), boost::asio::use_future).get();
        BOOST_REQUIRE(async.has_value());
    }
    BOOST_TEST(p.a.get_members("w")->size() == 2u);  // still listed: the picks did meet it
    BOOST_TEST(r.refused.load() == 0);
    BOOST_TEST(p.b_runs.load() == 40);
    p.a.stop();
}

// A member whose link is lost leaves every balancer before the calls pending on that link
// fail: the failure's completion, run on the network thread that read the end of the
// link (run_completion_inline), already finds it gone from the balancer's members, so a
// caller that calls again on learning of the loss cannot pick it. The failure names why.
BOOST_AUTO_TEST_CASE(a_lost_member_leaves_the_balancer_before_its_pending_calls_fail) {
    Pair p;
    p.b->start_balancer(balancer("w"));
    std::optional<rpclb::test::RawPeer> raw(std::in_place, p.a.listen_endpoint()->port());
    BOOST_REQUIRE(!raw->handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", false}, "routing-cookie"));
    BOOST_REQUIRE(raw->send(wire::GroupJoin{"w", boost::json::object{{"algorithm", "round_robin"},
                                                                        {"algorithm_opts", boost::json::object{}}}}));
    BOOST_REQUIRE(eventually([&] { auto m = p.a.get_members("w"); return m && m->size() == 2u; }, 5s));

    struct Seen {
        rpclb::CallResult result;
        std::vector<std::string> members;  // w's members when the failure was delivered
    };
    std::promise<Seen> seen;
    auto delivered = seen.get_future();
    rpclb::CallOptions o;
    o.timeout = 10s;
    o.run_completion_inline = true;
    p.a.async_call("r@127.0.0.1", "demo", "node", {}, o, [&](rpclb::CallResult r) {
        auto members = p.a.get_members("w");
        seen.set_value(Seen{std::move(r), members ? *members : std::vector<std::string>{}});
    });
    // r has the request (it never answers): the call is pending on the link. Then the link
    // ends without a WebSocket close, as when a process dies.
    auto request_read = [&] {
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < deadline)
            if (auto text = raw->read(1s))
                if (auto frame = wire::decode(*text); frame && std::holds_alternative<wire::Request>(*frame))
                    return true;
        return false;
    };
    BOOST_REQUIRE(request_read());
    raw.reset();
    BOOST_REQUIRE((delivered.wait_for(5s) == std::future_status::ready));
    const auto got = delivered.get();
    BOOST_REQUIRE(!got.result);
    BOOST_TEST(got.result.error().code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(got.result.error().details.contains("reason"), boost::json::serialize(got.result.error().details));
    BOOST_TEST(got.members == std::vector<std::string>{"b@127.0.0.1"},
               "the lost member was still in w when its pending call's failure was delivered");
}

// A handler cannot fake a draining reply (the caller would run the call twice).
BOOST_AUTO_TEST_CASE(a_handler_error_claiming_draining_is_not_taken_for_one) {
    Pair p;
    std::atomic<int> runs{0};
    p.b->register_function("demo", "fake", [&](const boost::json::array&) -> rpclb::CallResult {
        ++runs;
        return rpclb::draining_error("b@127.0.0.1", "demo", "fake", "w");
    });
    p.b->start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    auto r = p.a.call("demo", "fake", {}, through("w"));
    BOOST_REQUIRE(!r);
    BOOST_TEST(!rpclb::is_draining(r.error()));
    BOOST_TEST(runs.load() == 1);
}

// predecessor-compatibility §7 cases 37, 38 and 41: the in-flight count, and an idle
// balancer stops at once.
BOOST_AUTO_TEST_CASE(the_in_flight_count_tracks_and_releases_and_an_idle_balancer_stops_at_once) {
    Pair p;
    auto mine = nobody("idle");
    mine.drain_timeout = 0ms;
    auto lb = p.a.start_balancer(mine);
    using Counts = std::vector<std::pair<std::string, std::int64_t>>;
    BOOST_TEST(lb->in_flight() == 0);
    // Calls to nodes that are not members (a random-node helper given the balancer) count
    // in the total only.
    const auto x = lb->as_picked("x@h");
    const auto y = lb->as_picked("y@h");
    BOOST_TEST(!x.calls);
    lb->track(x);
    lb->track(y);
    lb->track(x);
    BOOST_TEST(lb->in_flight() == 3);
    BOOST_TEST(lb->in_flight_by_member().empty());
    lb->untrack(x);
    BOOST_TEST(lb->in_flight() == 2);
    lb->untrack(y);
    lb->untrack(x);
    BOOST_TEST(lb->in_flight() == 0);
    BOOST_TEST((lb->in_flight_by_member() == Counts{}));
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_TEST(p.a.stop_balancer("idle"));
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 500ms));
}

// `b` serves test.hold, which returns "held" once the test opens `gate` (or after 10 s).
struct HeldCall {
    explicit HeldCall(rpclb::Cluster& b) {
        b.register_function("test", "hold", [gate = gate, entered = entered](const boost::json::array&) -> rpclb::CallResult {
            entered->fetch_add(1);
            gate.wait_for(10s);
            return boost::json::value("held");
        });
    }
    /// Handlers that have begun to run (the call reached the serving node).
    int running() const { return entered->load(); }
    ~HeldCall() { open(); }
    void open() {
        if (!opened) go.set_value();
        opened = true;
    }
    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    std::shared_ptr<std::atomic<int>> entered = std::make_shared<std::atomic<int>>(0);
    bool opened = false;
};

using MemberCounts = std::vector<std::pair<std::string, std::int64_t>>;

// A member's in-flight count, read as the admin console reads it, goes up while a call to
// it runs and back to 0 once it has finished, also when a node joined in between: the
// member keeps its count in the new snapshot, and the call takes off what it added.
BOOST_AUTO_TEST_CASE(a_members_in_flight_count_follows_its_call_across_a_join) {
    Pair p;
    HeldCall held(*p.b);
    p.b->start_balancer(balancer("w"));
    auto lb = p.a.start_balancer(nobody("w"));
    BOOST_REQUIRE(eventually([&] { return lb->get_members().has_value(); }, 5s));
    const auto b = p.b->name();
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 0}}));
    auto call = p.a.async_call("", "test", "hold", {}, through("w"), boost::asio::use_future);
    BOOST_REQUIRE(eventually([&] { return lb->in_flight() == 1; }, 5s));
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 1}}));

    rpclb::Cluster c(options("c@127.0.0.1", {address(p.a)}));
    register_functions(c);
    c.start();
    c.start_balancer(balancer("w"));
    BOOST_REQUIRE(eventually([&] { return lb->members()->nodes.size() == 2; }, 5s));
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 1}, {c.name(), 0}}));
    BOOST_TEST(lb->in_flight() == 1);

    held.open();
    BOOST_REQUIRE((call.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(call.get().value().as_string() == "held");
    // The release comes just before the completion is delivered; allow for the gap.
    BOOST_TEST(eventually([&] { return lb->in_flight() == 0; }, 2s));
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 0}, {c.name(), 0}}));
    c.stop();
}

// A call to a member that leaves while the call runs is released on the snapshot it was
// picked from: the console lists that node after the members while the call runs, and
// neither it nor the total is left above 0 once it has finished.
BOOST_AUTO_TEST_CASE(a_call_to_a_member_that_left_is_counted_until_it_finishes) {
    Pair p;
    HeldCall held(*p.b);
    auto w = balancer("w");
    w.drain_timeout = 10s;
    p.b->start_balancer(w);
    auto lb = p.a.start_balancer(nobody("w"));
    BOOST_REQUIRE(eventually([&] { return lb->get_members().has_value(); }, 5s));
    const auto b = p.b->name();
    auto call = p.a.async_call("", "test", "hold", {}, through("w"), boost::asio::use_future);
    BOOST_REQUIRE(eventually([&] { return lb->in_flight() == 1; }, 5s));
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 1}}));
    // The call is counted from its pick, before it reaches b: b must be serving it before
    // it stops, or b refuses it as draining and the call goes elsewhere.
    BOOST_REQUIRE(eventually([&] { return held.running() == 1; }, 5s));

    // b leaves at once, then waits for the call it serves.
    auto stopping = std::async(std::launch::async, [&] { p.b->stop_balancer("w"); });
    BOOST_REQUIRE(eventually([&] { return lb->members()->nodes.empty(); }, 5s));
    BOOST_TEST((rpclb::admin::in_flight_per_member(*lb) == MemberCounts{{b, 1}}));
    BOOST_TEST(lb->in_flight() == 1);

    held.open();
    BOOST_REQUIRE((call.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(call.get().value().as_string() == "held");
    BOOST_REQUIRE((stopping.wait_for(5s) == std::future_status::ready));
    BOOST_TEST(eventually([&] { return lb->in_flight() == 0; }, 2s));
    BOOST_TEST(rpclb::admin::in_flight_per_member(*lb).empty());
}

// Serving side: stopping a balancer also waits for the calls it routed here that this node
// is still running, up to drain_timeout.
BOOST_AUTO_TEST_CASE(stopping_a_balancer_waits_for_the_calls_it_routed_here) {
    Pair p;
    auto w = balancer("w");
    w.drain_timeout = 5s;
    auto lb = p.b->start_balancer(w);
    BOOST_REQUIRE(eventually([&] { return p.a.get_members("w").has_value(); }, 5s));
    sleep_returned.store(std::chrono::steady_clock::time_point::max());  // until the call below returns
    auto call = p.a.async_call("", "demo", "sleep", {400}, through("w"), boost::asio::use_future);
    BOOST_REQUIRE(eventually([&] { return lb->serving() == 1; }, 5s));
    p.b->stop_balancer("w");
    BOOST_TEST((std::chrono::steady_clock::now() >= sleep_returned.load()));  // it waited for the call
    BOOST_TEST((call.wait_for(2s) == std::future_status::ready));
    BOOST_TEST(call.get().value().as_string() == "b@127.0.0.1");
    BOOST_TEST(lb->serving() == 0);
}

// predecessor-compatibility §3.3 with §4.3: excluded patterns apply to node_match_list too.
BOOST_AUTO_TEST_CASE(a_node_whose_short_name_is_excluded_does_not_join) {
    auto oa = options("w_qa@127.0.0.1");
    oa.excluded_node_patterns = {"_qa"};
    Pair p(oa);
    auto only_w = balancer("qa");
    only_w.node_match_list = rpclb::NodeMatchList{false, {rpclb::NodeFilter::substring("w")}};
    BOOST_TEST(!p.a.start_balancer(only_w)->joined());
    auto named = balancer("qa2");
    named.node_match_list = rpclb::NodeMatchList{false, {rpclb::NodeFilter::substring("w_qa")}};
    BOOST_TEST(p.a.start_balancer(named)->joined());
}

// Caller side (predecessor-compatibility §4.2): `a` routes a call of demo.sleep(`sleep_ms`)
// through its own non-member instance of `w` (drain timeout `drain`) to `b`, then stops
// that balancer; records how long the stop took and the drain events.
struct DrainRun {
    DrainRun(std::chrono::milliseconds drain, int sleep_ms) {
        p.b->start_balancer(balancer("w"));
        auto mine = nobody("w");
        mine.drain_timeout = drain;
        auto lb = p.a.start_balancer(mine);
        // The balancer's own member snapshot, which the call picks from: it is updated
        // after the group's, so waiting on the group alone raced with the pick.
        BOOST_REQUIRE(eventually([&] { return lb->get_members().has_value(); }, 5s));
        sleep_returned.store(std::chrono::steady_clock::time_point::max());  // until this call returns
        call = p.a.async_call("", "demo", "sleep", {sleep_ms}, through("w"), boost::asio::use_future);
        BOOST_REQUIRE(eventually([&] { return lb->in_flight() == 1; }, 5s));
        const auto t0 = std::chrono::steady_clock::now();
        p.a.stop_balancer("w");
        stopped = std::chrono::steady_clock::now();
        took = stopped - t0;
    }
    Pair p;
    Recorder events{p.a.telemetry()};
    std::future<rpclb::CallResult> call;
    std::chrono::steady_clock::time_point stopped{};
    std::chrono::steady_clock::duration took{};
};

BOOST_AUTO_TEST_CASE(stopping_a_balancer_waits_for_a_call_that_finishes_inside_the_drain_timeout) {
    DrainRun run(5s, 300);
    BOOST_TEST((run.stopped >= sleep_returned.load()));  // the stop waited for the call
    BOOST_TEST((run.took < 4s));
    // Its reply came before the stop returned; its completion is delivered just after the
    // balancer released the call, so it may still be on its way: wait for it rather than
    // expect it ready.
    BOOST_TEST((run.call.wait_for(2s) == std::future_status::ready));
    BOOST_TEST(run.call.get().has_value());
    auto begin = run.events.of(rpclb::EventName::drain_begin);
    auto end = run.events.of(rpclb::EventName::drain_end);
    BOOST_REQUIRE(begin.size() == 1u);
    BOOST_REQUIRE(end.size() == 1u);
    BOOST_TEST(begin[0].load_balancer == "w");
    BOOST_TEST(end[0].outcome == "drained");
}

BOOST_AUTO_TEST_CASE(stopping_a_balancer_gives_up_on_a_call_that_outlives_the_drain_timeout) {
    DrainRun run(100ms, 1500);
    BOOST_TEST((run.took < 1s));
    BOOST_TEST((run.call.wait_for(0s) == std::future_status::timeout));
    auto end = run.events.of(rpclb::EventName::drain_end);
    BOOST_REQUIRE(end.size() == 1u);
    BOOST_TEST(end[0].outcome == "timeout");
    BOOST_TEST(end[0].in_flight == 1);
    BOOST_TEST(run.call.get().has_value());  // not cancelled: it still completes
}

BOOST_AUTO_TEST_SUITE_END()
