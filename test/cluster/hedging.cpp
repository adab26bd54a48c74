// Hedged calls (CallOptions::hedging): a call whose first member is slow is answered by
// another, the losing attempt is released as cancelled and its late answer counted, the
// balancer's budget bounds the extra attempts, and bad hedging options fail at the call's
// start naming the option; a balancer's HedgingPolicy hedges idempotent calls that set
// none and marks functions idempotent, and a bad policy fails the balancer's start.
#define BOOST_TEST_MODULE hedging
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/config.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/log_capture.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Clock = std::chrono::steady_clock;

namespace {

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// Members slow@ and fast@ of balancer "h" (round_robin: picks alternate), and a client
// routing through it. slow@'s t.work waits until release() (at most 5 s); fast@'s
// answers at once. Each answers its own name.
struct Pair {
    explicit Pair(rpclb::HedgingPolicy policy = {}) {
        for (const char* name : {"fast@127.0.0.1", "slow@127.0.0.1"}) {
            auto seeds = nodes.empty() ? std::vector<std::string>{} : std::vector<std::string>{address(*nodes.front())};
            nodes.push_back(std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(name, seeds)));
            auto& node = *nodes.back();
            const bool slow = std::string(name) == "slow@127.0.0.1";
            node.register_function("t", "work", [this, slow, name = node.name()](const boost::json::array&) -> rpclb::CallResult {
                if (slow) {
                    std::unique_lock lock(mutex);
                    wake.wait_for(lock, 5s, [&] { return released; });
                }
                return boost::json::value(name);
            });
            // slow@ runs until its caller gives up (at most 5 s) and records how it ended.
            node.register_function("t", "patient", [this, slow, name = node.name()](const boost::json::array&) -> rpclb::CallResult {
                if (slow) {
                    const auto began = Clock::now();
                    while (!rpclb::call_cancelled() && Clock::now() - began < 5s)
                        std::this_thread::sleep_for(1ms);  // a handler polling call_cancelled(), as documented
                    if (rpclb::call_cancelled()) cancelled_at.store(Clock::now().time_since_epoch().count());
                }
                return boost::json::value(name);
            });
            node.register_function("t", "echo", [this, slow](const boost::json::array& args) -> rpclb::CallResult {
                if (slow) {
                    std::unique_lock lock(mutex);
                    wake.wait_for(lock, 5s, [&] { return released; });
                }
                return args;
            });
            node.start();
            auto options = rpclb::test::balancer_options("h", "round_robin");
            options.hedging = policy;
            node.start_balancer(options);
        }
        auto o = rpclb::test::in_process_node_options("client@127.0.0.1", {address(*nodes.front())});
        o.client = true;
        client = std::make_unique<rpclb::Cluster>(o);
        client->start();
        if (!rpclb::test::wait_for_members(*client, "h", {"fast@127.0.0.1", "slow@127.0.0.1"}, 10s))
            throw std::runtime_error("the client did not see both members of h");
    }
    ~Pair() {
        release();
        client->stop();
        for (auto& n : nodes) n->stop();
    }
    void release() {
        std::lock_guard lock(mutex);
        released = true;
        wake.notify_all();
    }
    // slow@ stalls again.
    void hold() {
        std::lock_guard lock(mutex);
        released = false;
    }
    static rpclb::CallOptions hedged(int attempts = 2) {
        rpclb::CallOptions o;
        o.load_balancer = "h";
        o.timeout = 10s;
        o.idempotent = true;
        o.hedging = rpclb::Hedging{.delay = 20ms, .max_attempts = attempts};
        return o;
    }
    rpclb::LoadBalancer::HedgeStats stats() { return client->balancer("h").value()->hedge_stats(); }

    std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
    std::unique_ptr<rpclb::Cluster> client;
    std::mutex mutex;
    std::condition_variable wake;
    bool released = false;
    std::atomic<Clock::rep> cancelled_at{0};  // when slow@'s t.patient saw call_cancelled()
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_call_whose_member_is_slow_is_answered_by_a_hedge) {
    Pair p;
    // Round robin alternates, and a hedge's pick takes its turn too: of four calls, at
    // least one starts on slow@ and is answered by a hedge to fast@.
    for (int i = 0; i < 4; ++i) {
        const auto began = Clock::now();
        auto r = p.client->call("t", "work", {}, Pair::hedged());
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(r->as_string() == "fast@127.0.0.1");
        BOOST_TEST((Clock::now() - began < 2s));
    }
    const auto s = p.stats();
    BOOST_TEST(s.hedged_calls == 4u);
    BOOST_TEST(s.hedges >= 1u);
    BOOST_TEST(s.hedge_wins == s.hedges);
    BOOST_TEST(s.budget_refusals == 0u);
    // slow@ still holds the losing attempts, counted in flight until they end ...
    const auto slow_in_flight = [&] {
        for (const auto& [node, n] : p.client->balancer("h").value()->in_flight_by_member())
            if (node == "slow@127.0.0.1") return static_cast<std::uint64_t>(n);
        return std::uint64_t{0};
    };
    BOOST_TEST(slow_in_flight() == s.hedges);
    // ... and their answers, once it gives them, are dropped and counted; slow@ is not
    // counted as failing.
    p.release();
    BOOST_REQUIRE(eventually([&] { return p.stats().late_replies == s.hedges; }, 5s));
    BOOST_TEST(slow_in_flight() == 0u);
    BOOST_TEST(p.client->balancer("h").value()->ejected().empty());
}

BOOST_AUTO_TEST_CASE(the_member_whose_attempt_lost_is_told_and_its_handler_stops) {
    Pair p;
    // Round robin alternates: of two calls one starts on slow@, and its hedge to fast@ wins.
    for (int i = 0; i < 2 && p.cancelled_at.load() == 0; ++i) {
        auto r = p.client->call("t", "patient", {}, Pair::hedged());
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(r->as_string() == "fast@127.0.0.1");
        const auto answered = Clock::now();
        if (p.stats().hedge_wins == 0) continue;  // this one went to fast@ first
        // The call's own deadline is 10 s away: only the cancel can stop slow@ this soon.
        BOOST_REQUIRE_MESSAGE(eventually([&] { return p.cancelled_at.load() != 0; }, 2s),
                              "slow@'s handler never saw call_cancelled()");
        const auto saw = Clock::time_point(Clock::duration(p.cancelled_at.load()));
        BOOST_TEST((saw - answered < 1s));
    }
    BOOST_TEST(p.stats().hedge_wins == 1u);
    BOOST_REQUIRE(eventually([&] { return p.stats().late_replies == 1u; }, 5s));
}

BOOST_AUTO_TEST_CASE(the_budget_bounds_the_extra_attempts) {
    Pair p;
    // 60 calls at once: those that start on slow@ (about half) each want a hedge; the
    // budget holds 10 tokens and each call adds 0.05, plus one a second.
    std::atomic<int> done{0}, ok{0};
    for (int i = 0; i < 60; ++i)
        p.client->async_call("t", "work", {}, Pair::hedged(), [&](rpclb::CallResult r) {
            if (r) ++ok;
            ++done;
        });
    BOOST_REQUIRE(eventually([&] { return p.stats().hedges + p.stats().budget_refusals >= 20u; }, 5s));
    const auto s = p.stats();
    BOOST_TEST(s.hedges >= 10u);
    BOOST_TEST(s.hedges <= 16u);
    BOOST_TEST(s.budget_refusals >= 4u);
    // The calls refused a hedge wait for slow@; all end once it answers.
    p.release();
    BOOST_REQUIRE(eventually([&] { return done.load() == 60; }, 10s));
    BOOST_TEST(ok.load() == 60);
}

BOOST_AUTO_TEST_CASE(by_default_a_hedge_waits_for_the_balancers_recent_p95) {
    Pair p;
    auto o = Pair::hedged();
    o.hedging->delay = 0ms;
    BOOST_TEST(!p.client->balancer("h").value()->recent_p95());
    // Both members fast: 25 calls make the p95 known (10 ms until 20 are).
    p.release();
    for (int i = 0; i < 25; ++i) BOOST_REQUIRE(p.client->call("t", "work", {}, o).has_value());
    const auto p95 = p.client->balancer("h").value()->recent_p95();
    BOOST_REQUIRE(p95.has_value());
    BOOST_TEST((*p95 < 200ms));
    // slow@ stalls again: a call that starts there is hedged after that p95.
    p.hold();
    const auto hedges = p.stats().hedges;
    for (int i = 0; i < 4; ++i) {
        const auto began = Clock::now();
        auto r = p.client->call("t", "work", {}, o);
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(r->as_string() == "fast@127.0.0.1");
        BOOST_TEST((Clock::now() - began < 2s));
    }
    BOOST_TEST(p.stats().hedges > hedges);
}

BOOST_AUTO_TEST_CASE(a_member_hedges_its_own_calls_with_their_arguments) {
    Pair p;
    // slow@ calls through h: an attempt on itself runs on its worker pool, not on the
    // calling thread, so that it can be hedged; every attempt gets the arguments.
    auto& slow = *p.nodes[1];
    for (int i = 0; i < 4; ++i) {
        const boost::json::array args{"sku-42", i};
        const auto began = Clock::now();
        auto r = i % 2 ? slow.call("t", "echo", args, Pair::hedged())
                       : slow.async_call("t", "echo", args, Pair::hedged(), boost::asio::use_future).get();
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(*r == boost::json::value(args));
        BOOST_TEST((Clock::now() - began < 2s));
    }
    const auto s = slow.balancer("h").value()->hedge_stats();
    BOOST_TEST(s.hedges >= 1u);
    BOOST_TEST(s.hedges <= 4u);  // at most one extra attempt a call
    BOOST_TEST(s.hedge_wins == s.hedges);
    p.release();
    BOOST_REQUIRE(eventually([&] { return slow.balancer("h").value()->hedge_stats().late_replies == s.hedges; }, 5s));
}

// A balancer with fewer members than max_attempts gets one attempt per member: a call is
// never refused because members left, and the balancer says so once.
BOOST_AUTO_TEST_CASE(more_attempts_than_members_sends_one_to_each) {
    rpclb::test::LogCapture log;
    Pair p;
    p.release();
    for (int i = 0; i < 4; ++i) {
        auto r = p.client->call("t", "work", {}, Pair::hedged(3));
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
    }
    BOOST_TEST(p.stats().hedged_calls == 4u);
    BOOST_TEST(log.count("balancer h: hedging.max_attempts 3 is more than its 2 members") == 1u);
}

BOOST_AUTO_TEST_CASE(bad_hedging_options_fail_at_the_start_naming_the_option) {
    Pair p;
    const auto refused = [&](rpclb::CallOptions o, const std::string& message) {
        auto r = p.client->call("t", "work", {}, o);
        BOOST_REQUIRE(!r);
        BOOST_TEST(r.error().code == rpclb::ErrorCode::bad_request);
        BOOST_TEST(r.error().message == message);
    };
    auto o = Pair::hedged();
    o.idempotent = false;
    refused(o, "hedging: the call is not marked idempotent (CallOptions::idempotent); only an idempotent call may run twice");
    o = Pair::hedged();
    o.hedging->delay = -1ms;
    refused(o, "hedging.delay must be 0 (the balancer's recent p95) or 1 ms to the call's timeout of 10000 ms; got -1 ms");
    o.hedging->delay = 11s;
    refused(o, "hedging.delay must be 0 (the balancer's recent p95) or 1 ms to the call's timeout of 10000 ms; got 11000 ms");
    o = Pair::hedged(6);
    refused(o, "hedging.max_attempts must be 2 to 5; got 6");
    o = Pair::hedged();
    o.load_balancer.clear();
    auto direct = p.client->call("fast@127.0.0.1", "t", "work", {}, o);
    BOOST_REQUIRE(!direct);
    BOOST_TEST(direct.error().message == "hedging: applies only to a call through a balancer (CallOptions::load_balancer)");
    BOOST_TEST(direct.error().details.at("node").as_string() == "fast@127.0.0.1");  // the node called
    // A cast is never hedged; a call run here (call_directly) is checked all the same.
    auto cast = p.client->cast("", "t", "work", {}, Pair::hedged());
    BOOST_REQUIRE(!cast);
    BOOST_TEST(cast.error().message == "hedging: a cast is never hedged (it has no answer to wait for)");
    o = Pair::hedged(6);
    o.call_directly = true;
    auto here = p.nodes[0]->call("t", "work", {}, o);
    BOOST_REQUIRE(!here);
    BOOST_TEST(here.error().message == "hedging.max_attempts must be 2 to 5; got 6");
    // Nothing was picked or sent for them.
    BOOST_TEST(p.stats().hedged_calls == 0u);
}

// A balancer's HedgingPolicy hedges the idempotent calls that set no hedging of their own,
// on a node that only routes through it (the members announce it); a call not marked
// idempotent is never hedged.
BOOST_AUTO_TEST_CASE(the_balancers_policy_hedges_idempotent_calls_that_set_none) {
    Pair p(rpclb::HedgingPolicy{.calls = rpclb::Hedging{.delay = 20ms, .max_attempts = 2}});
    BOOST_TEST(p.client->balancer("h").value()->call_hedging().has_value());
    rpclb::CallOptions o;
    o.load_balancer = "h";
    o.idempotent = true;
    for (int i = 0; i < 4; ++i) {
        auto r = p.client->call("t", "work", {}, o);
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(r->as_string() == "fast@127.0.0.1");
    }
    BOOST_TEST(p.stats().hedged_calls == 4u);
    BOOST_TEST(p.stats().hedges >= 1u);
    // Not idempotent: one attempt, so of two calls (round robin) one waits for slow@.
    o.idempotent = false;
    o.timeout = 300ms;
    int timed_out = 0;
    for (int i = 0; i < 2; ++i)
        if (auto r = p.client->call("t", "work", {}, o); !r) timed_out += r.error().code == rpclb::ErrorCode::request_timeout;
    BOOST_TEST(timed_out == 1);
    BOOST_TEST(p.stats().hedged_calls == 4u);
}

// A function the balancer's policy marks idempotent is hedged and may take a hedging of
// its own with no CallOptions::idempotent, on a node that only routes through the balancer;
// another function of the same module is not.
BOOST_AUTO_TEST_CASE(the_functions_the_policy_marks_idempotent_are_hedged_without_the_calls_flag) {
    Pair p(rpclb::HedgingPolicy{.calls = rpclb::Hedging{.delay = 20ms, .max_attempts = 2},
                                .idempotent_functions = {"t.work", "other.work"}});
    const auto balancer = p.client->balancer("h").value();
    BOOST_TEST(balancer->marks_idempotent("t", "work"));
    BOOST_TEST(!balancer->marks_idempotent("t", "echo"));
    BOOST_TEST(!balancer->marks_idempotent("t", "wor"));
    rpclb::CallOptions o;
    o.load_balancer = "h";
    for (int i = 0; i < 4; ++i) {
        auto r = p.client->call("t", "work", {}, o);
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
        BOOST_TEST(r->as_string() == "fast@127.0.0.1");
    }
    BOOST_TEST(p.stats().hedged_calls == 4u);
    // Its own hedging is accepted: the balancer's marking stands for the flag.
    o.hedging = rpclb::Hedging{.delay = 20ms, .max_attempts = 2};
    auto own = p.client->call("t", "work", {}, o);
    BOOST_REQUIRE_MESSAGE(own.has_value(), own.error().message);
    BOOST_TEST(p.stats().hedged_calls == 5u);
    // t.echo is not marked: its own hedging is refused, and without it one attempt.
    auto refused = p.client->call("t", "echo", {}, o);
    BOOST_REQUIRE(!refused.has_value());
    BOOST_TEST(refused.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(refused.error().message.find("not marked idempotent") != std::string::npos, refused.error().message);
    o.hedging.reset();
    o.timeout = 300ms;
    int timed_out = 0;
    for (int i = 0; i < 2; ++i)
        if (auto r = p.client->call("t", "echo", {}, o); !r) timed_out += r.error().code == rpclb::ErrorCode::request_timeout;
    BOOST_TEST(timed_out == 1);
    BOOST_TEST(p.stats().hedged_calls == 5u);
}

BOOST_AUTO_TEST_CASE(a_bad_policy_fails_the_balancers_start_naming_the_option) {
    rpclb::Cluster node(rpclb::test::in_process_node_options("a@127.0.0.1"));
    node.start();
    struct Case {
        rpclb::HedgingPolicy policy;
        const char* message;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const auto& c : {Case{{.calls = rpclb::Hedging{.delay = -1ms}}, "hedging.delay_ms"},
                          Case{{.calls = rpclb::Hedging{.max_attempts = 1}}, "hedging.max_attempts"},
                          Case{{.calls = rpclb::Hedging{.max_attempts = 6}}, "hedging.max_attempts"},
                          Case{{.budget_percent = 101}, "hedging.budget_percent"},
                          Case{{.budget_percent = nan}, "hedging.budget_percent"},
                          Case{{.budget_min_per_second = -1}, "hedging.budget_min_per_second"},
                          Case{{.budget_min_per_second = 1e6}, "hedging.budget_min_per_second"},
                          Case{{.idempotent_functions = {"work"}}, "hedging.idempotent_functions"},
                          Case{{.idempotent_functions = {"t."}}, "hedging.idempotent_functions"},
                          Case{{.idempotent_functions = {".work"}}, "hedging.idempotent_functions"},
                          Case{{.idempotent_functions = {"t.w\x01"}}, "hedging.idempotent_functions"},
                          Case{{.idempotent_functions = {"t.work", "u.run", "t.work"}},
                               "hedging.idempotent_functions lists \"t.work\" twice"},
                          Case{{.idempotent_functions = std::vector<std::string>(1001, "t.work")},
                               "hedging.idempotent_functions"}}) {
        auto options = rpclb::test::balancer_options("w", "random");
        options.hedging = c.policy;
        try {
            node.start_balancer(options);
            BOOST_ERROR("started with a bad " << c.message);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).find(c.message) != std::string::npos, e.what());
        }
    }
    // As JSON, the same names.
    const auto parsed = rpclb::load_balancer_options_from_json(
        boost::json::parse(R"({"name": "w", "hedging": {"max_attempts": 9}})"));
    BOOST_REQUIRE(!parsed.has_value());
    BOOST_TEST(parsed.error().message.find("hedging.max_attempts") != std::string::npos, parsed.error().message);
    const auto good = rpclb::load_balancer_options_from_json(
        boost::json::parse(R"({"name": "w", "hedging": {"delay_ms": 25, "budget_percent": 2}})"));
    BOOST_REQUIRE(good.has_value());
    BOOST_TEST(good->hedging.calls.has_value());
    BOOST_TEST(good->hedging.calls->delay.count() == 25);
    BOOST_TEST(good->hedging.calls->max_attempts == 2);
    BOOST_TEST(good->hedging.budget_percent == 2.0);
    const auto named = rpclb::load_balancer_options_from_json(
        boost::json::parse(R"({"name": "w", "hedging": {"idempotent_functions": ["inventory.count", "a.b.c"]}})"));
    BOOST_REQUIRE_MESSAGE(named.has_value(), named.error().message);
    BOOST_TEST(named->hedging.idempotent_functions == (std::vector<std::string>{"inventory.count", "a.b.c"}));
    for (const char* bad : {R"({"name": "w", "hedging": {"idempotent_functions": "inventory.count"}})",
                            R"({"name": "w", "hedging": {"idempotent_functions": [1]}})",
                            R"({"name": "w", "hedging": {"idempotent_functions": ["count"]}})"}) {
        const auto r = rpclb::load_balancer_options_from_json(boost::json::parse(bad));
        BOOST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message.find("hedging.idempotent_functions") != std::string::npos, r.error().message);
    }
    node.stop();
}
