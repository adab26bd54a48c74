// Server-reported load between real in-process nodes: every answer, and every answer to a
// probe, carries the member's load (worker pool busy share, queue depth, the number set
// with Cluster::report_load); the caller records it per node (NodeLoads), where
// algorithms read it. A malformed report makes the member's load unknown and nothing
// else; a bad value from the application's API is refused.
#define BOOST_TEST_MODULE reported_load
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/node_load.hpp>

#include <boost/json/parse.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;
namespace wire = rpclb::detail::wire;

namespace {

// What this process last recorded of `node`'s load (any age).
std::optional<rpclb::LoadReport> recorded(const std::string& node) {
    return rpclb::NodeLoads::instance().of(node)->read(rpclb::load_clock_ms(), std::numeric_limits<std::int64_t>::max() / 2);
}

// Member a (worker pool of `workers`) and caller b, connected.
struct Pair {
    explicit Pair(std::size_t workers = 2, std::string suffix = "") {
        auto ao = rpclb::test::in_process_node_options("a" + suffix + "@127.0.0.1");
        ao.worker_threads = workers;
        a = std::make_unique<rpclb::Cluster>(ao);
        a->register_function("t", "ping", [](const boost::json::array&) -> rpclb::CallResult { return 1; },
                             {.run_inline = true});
        a->register_function("t", "work", [](const boost::json::array&) -> rpclb::CallResult { return 2; });
        a->register_function("t", "block", [this](const boost::json::array&) -> rpclb::CallResult {
            std::unique_lock lock(mutex);
            ++blocked;
            changed.notify_all();
            changed.wait(lock, [&] { return released; });
            return 3;
        });
        a->start();
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(
            "b" + suffix + "@127.0.0.1", {"127.0.0.1:" + std::to_string(a->listen_endpoint()->port())}));
        b->start();
        BOOST_REQUIRE(eventually([&] { return a->connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s));
        a_name = "a" + suffix + "@127.0.0.1";
    }
    ~Pair() { release(); }
    void release() {
        std::lock_guard lock(mutex);
        released = true;
        changed.notify_all();
    }
    std::unique_ptr<rpclb::Cluster> a, b;
    std::string a_name;
    std::mutex mutex;
    std::condition_variable changed;
    int blocked = 0;
    bool released = false;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(reported_load)

BOOST_AUTO_TEST_CASE(an_application_load_step_reaches_the_caller_within_100_ms) {
    Pair p(2, "_step");
    BOOST_REQUIRE(p.b->call(p.a_name, "t", "work").has_value());
    const auto before = recorded(p.a_name);
    BOOST_REQUIRE(before.has_value());  // the answer carried a report
    BOOST_TEST(before->application == 0.0);

    p.a->report_load(0.75);
    const auto began = std::chrono::steady_clock::now();
    // The caller keeps calling (a steady stream of traffic); the first answer after the
    // step carries it.
    BOOST_TEST(eventually([&] {
        (void)p.b->call(p.a_name, "t", "work");
        const auto now = recorded(p.a_name);
        return now && now->application == 0.75;
    }, 100ms, 1ms));
    BOOST_TEST((std::chrono::steady_clock::now() - began < 100ms));
    BOOST_TEST(recorded(p.a_name)->utilization() == 0.75);

    // 0 reports none again: the busy share counts.
    p.a->report_load(0.0);
    BOOST_REQUIRE(p.b->call(p.a_name, "t", "work").has_value());
    BOOST_TEST(recorded(p.a_name)->application == 0.0);
}

BOOST_AUTO_TEST_CASE(a_busy_worker_pool_and_its_queue_show_in_the_answers) {
    Pair p(2, "_busy");
    // Two calls occupy both workers; a third waits in the queue.
    std::vector<std::future<rpclb::CallResult>> held;
    for (int i = 0; i < 3; ++i)
        held.push_back(std::async(std::launch::async, [&] { return p.b->call(p.a_name, "t", "block"); }));
    {
        std::unique_lock lock(p.mutex);
        BOOST_REQUIRE(p.changed.wait_for(lock, 5s, [&] { return p.blocked == 2; }));
    }
    // An inline handler answers while the pool is full: its answer says so. The third
    // call reaches the queue shortly after the first two started, so ask until it shows.
    BOOST_TEST(eventually([&] {
        (void)p.b->call(p.a_name, "t", "ping");
        const auto now = recorded(p.a_name);
        return now && now->busy == 1.0 && now->queue == 1u;
    }, 5s));
    BOOST_TEST(recorded(p.a_name)->utilization() == 2.0);  // busy 1 + one queued call

    p.release();
    for (auto& f : held) BOOST_TEST(f.get().has_value());
    BOOST_REQUIRE(p.b->call(p.a_name, "t", "ping").has_value());
    BOOST_TEST(recorded(p.a_name)->busy == 0.0);
    BOOST_TEST(recorded(p.a_name)->queue == 0u);
}

BOOST_AUTO_TEST_CASE(an_idle_caller_learns_the_load_from_probe_answers) {
    Pair p(2, "_idle");
    p.a->report_load(3.5);
    // b makes no call: only the failure detector's probes (one member, probed every
    // protocol period of at most 1 s) bring a's load.
    BOOST_TEST(eventually([&] {
        const auto now = recorded(p.a_name);
        return now && now->application == 3.5;
    }, 5s));
    // And a's learns b's the same way.
    BOOST_TEST(eventually([&] { return recorded("b_idle@127.0.0.1").has_value(); }, 5s));
}

BOOST_AUTO_TEST_CASE(report_load_refuses_what_is_not_a_finite_load) {
    Pair p(2, "_bad");
    p.a->report_load(0.5);
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       -0.5, 2e9}) {
        try {
            p.a->report_load(bad);
            BOOST_ERROR("report_load(" << bad << ") was accepted");
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).find("report_load: the load must be a finite number in [0, 1e9]") !=
                           std::string::npos,
                       e.what());
        }
    }
    // Unchanged by the refusals.
    BOOST_REQUIRE(p.b->call(p.a_name, "t", "work").has_value());
    BOOST_TEST(recorded(p.a_name)->application == 0.5);
    p.a->report_load(1e9);  // the largest accepted
    BOOST_REQUIRE(p.b->call(p.a_name, "t", "work").has_value());
    BOOST_TEST(recorded(p.a_name)->application == 1e9);
}

// A member whose answers carry garbage for a load keeps serving; its load is unknown
// until it reports a good one.
BOOST_AUTO_TEST_CASE(a_garbage_report_makes_the_load_unknown_and_the_member_keeps_serving) {
    auto options = rpclb::test::in_process_node_options("caller_g@127.0.0.1");
    rpclb::Cluster node(options);
    node.start();
    const std::string raw_name = "garbage@127.0.0.1";
    rpclb::test::RawPeer raw(node.listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{raw_name, "inc-g", "", true}, rpclb::test::test_cookie));
    BOOST_REQUIRE(eventually([&] { return node.connected_nodes().size() == 1; }, 5s));

    // Calls raw_name and answers the request with `ld` (raw JSON text) as its load.
    auto call_answered_with = [&](std::string_view ld) {
        auto result = std::async(std::launch::async, [&] { return node.call(raw_name, "t", "f", {}, {.timeout = 5s}); });
        std::optional<std::uint64_t> id;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!id && std::chrono::steady_clock::now() < deadline) {
            auto text = raw.read(1s);
            if (!text) continue;
            if (auto frame = wire::decode(*text); frame)
                if (auto* req = std::get_if<wire::Request>(&*frame)) id = req->id;
        }
        BOOST_REQUIRE(id);
        BOOST_REQUIRE(raw.send(R"({"t":"res","id":)" + std::to_string(*id) + R"(,"ok":"served","ld":)" +
                               std::string(ld) + "}"));
        auto r = result.get();
        BOOST_REQUIRE_MESSAGE(r.has_value(), ld << ": " << (r ? "" : r.error().message));
        BOOST_TEST(r->as_string() == "served");
    };

    call_answered_with("[100,2]");
    BOOST_REQUIRE(recorded(raw_name).has_value());
    BOOST_TEST(recorded(raw_name)->busy == 0.1);
    for (std::string_view garbage : {R"("lots")", "[100]", "[2000,1]", "[100,-1]", "[100,1,1e999]", "[100,1,-4]"}) {
        call_answered_with(garbage);
        BOOST_TEST(!recorded(raw_name).has_value(), garbage);
        call_answered_with("[300,0]");  // a good report counts again
        BOOST_TEST_REQUIRE(recorded(raw_name).has_value());
        BOOST_TEST(recorded(raw_name)->busy == 0.3);
    }
    BOOST_TEST(rpclb::NodeLoads::instance().of(raw_name)->warned.load());  // logged (once)
    BOOST_TEST(node.connected_nodes().size() == 1u);  // the link stays
}

// weighted_round_robin with "weights": "reported", between real nodes: the caller sends
// less to the member that reports more load, follows a step change within 100 ms, and
// its members' rates within a few windows.
BOOST_AUTO_TEST_CASE(weighted_round_robin_follows_reported_load_between_nodes) {
    const auto balancer = rpclb::test::balancer_options("wrr_load", "weighted_round_robin",
                                                        boost::json::object{{"weights", "reported"}});
    std::vector<std::unique_ptr<rpclb::Cluster>> members;
    for (const char* name : {"m1@127.0.0.1", "m2@127.0.0.1"}) {
        auto o = rpclb::test::in_process_node_options(
            name, members.empty() ? std::vector<std::string>{}
                                  : std::vector<std::string>{"127.0.0.1:" + std::to_string(members[0]->listen_endpoint()->port())});
        auto m = std::make_unique<rpclb::Cluster>(o);
        const std::string who = name;
        m->register_function("t", "who", [who](const boost::json::array&) -> rpclb::CallResult { return boost::json::value(who); });
        m->start();
        m->start_balancer(balancer);
        members.push_back(std::move(m));
    }
    auto co = rpclb::test::in_process_node_options("wrr_caller@127.0.0.1",
                                                   {"127.0.0.1:" + std::to_string(members[0]->listen_endpoint()->port())});
    co.client = true;
    rpclb::Cluster caller(co);
    caller.start();
    BOOST_REQUIRE(eventually([&] { auto m = caller.get_members("wrr_load"); return m && m->size() == 2u; }, 5s));

    rpclb::CallOptions through;
    through.load_balancer = "wrr_load";
    auto calls = [&](int n) {
        std::map<std::string, int> counts;
        for (int i = 0; i < n; ++i) {
            auto r = caller.call("t", "who", {}, through);
            BOOST_REQUIRE(r.has_value());
            ++counts[std::string(r->as_string())];
        }
        return counts;
    };
    members[0]->report_load(0.9);
    members[1]->report_load(0.1);
    BOOST_REQUIRE(eventually([&] {
        (void)calls(2);
        auto m1 = recorded("m1@127.0.0.1"), m2 = recorded("m2@127.0.0.1");
        return m1 && m2 && m1->application == 0.9 && m2->application == 0.1;
    }, 5s));
    auto counts = calls(200);  // weights 1/0.9 : 1/0.1 = 1 : 9
    BOOST_TEST(counts["m1@127.0.0.1"] <= 30, counts["m1@127.0.0.1"]);
    BOOST_TEST(counts["m2@127.0.0.1"] >= 170, counts["m2@127.0.0.1"]);

    // The step: m1 idle, m2 loaded. The picks follow within 100 ms of traffic.
    members[0]->report_load(0.1);
    members[1]->report_load(0.9);
    const auto step = std::chrono::steady_clock::now();
    BOOST_TEST(eventually([&] {
        auto m1 = recorded("m1@127.0.0.1"), m2 = recorded("m2@127.0.0.1");
        if (m1 && m2 && m1->application == 0.1 && m2->application == 0.9) return true;
        (void)calls(1);
        return false;
    }, 100ms, 0ms));
    BOOST_TEST((std::chrono::steady_clock::now() - step < 100ms));
    // The weights change at once by the new loads (m1 from under 15 % to about half, with
    // the rates it had), and the rates follow within a few windows of 200 successes.
    counts = calls(200);
    BOOST_TEST(counts["m1@127.0.0.1"] >= 80, counts["m1@127.0.0.1"]);
    (void)calls(600);
    counts = calls(200);
    BOOST_TEST(counts["m1@127.0.0.1"] >= 170, counts["m1@127.0.0.1"]);
    caller.stop();
    for (auto& m : members) m->stop();
}

BOOST_AUTO_TEST_SUITE_END()
