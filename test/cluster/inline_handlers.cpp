// Handlers registered with HandlerOptions::run_inline run on the thread that read the
// request: a blocking call from there fails at once instead of deadlocking, overlong runs
// are counted, and answers and errors are those of the worker pool.
#define BOOST_TEST_MODULE inline_handlers
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <chrono>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

struct Pair {
    Pair() : a(rpclb::test::in_process_node_options("a@127.0.0.1")) {
        a.register_function("t", "here", [](const boost::json::array&) -> rpclb::CallResult { return "a"; });
        a.start();
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(
            "b@127.0.0.1", {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port())}));
    }
    void start_b() {
        b->start();
        BOOST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s));
    }
    rpclb::Cluster a;
    std::unique_ptr<rpclb::Cluster> b;
};

// What a handler on b gets when it calls a back with the blocking API.
rpclb::Handler calls_back(rpclb::Cluster& b) {
    return [&b](const boost::json::array&) -> rpclb::CallResult {
        auto r = b.call("a@127.0.0.1", "t", "here");
        if (r) return r;
        return boost::json::value(r.error().message);
    };
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_blocking_call_from_an_inline_handler_fails_at_once) {
    Pair p;
    p.b->register_function("t", "inline_back", calls_back(*p.b), {.run_inline = true});
    p.b->register_function("t", "worker_back", calls_back(*p.b));
    p.start_b();
    // On the worker pool the nested call works; inline (a network thread) it must not wait.
    BOOST_TEST(p.a.call("b@127.0.0.1", "t", "worker_back").value().as_string() == "a");
    rpclb::CallOptions o;
    o.timeout = 3s;
    const auto began = std::chrono::steady_clock::now();
    auto r = p.a.call("b@127.0.0.1", "t", "inline_back", {}, o);
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r.value().as_string() == "blocking call from a network thread would deadlock; use async_call");
    BOOST_TEST((std::chrono::steady_clock::now() - began < 2s));
}

BOOST_AUTO_TEST_CASE(inline_answers_and_errors_match_the_worker_pool) {
    Pair p;
    const rpclb::HandlerOptions run_inline{.run_inline = true};
    p.b->register_function("t", "echo", [](const boost::json::array& a) -> rpclb::CallResult { return a; }, run_inline);
    p.b->register_function(
        "t", "throw", [](const boost::json::array&) -> rpclb::CallResult { throw std::runtime_error("boom"); },
        run_inline);
    p.start_b();
    BOOST_TEST(p.a.call("b@127.0.0.1", "t", "echo", {1, "abc"}).value() == (boost::json::array{1, "abc"}));
    auto thrown = p.a.call("b@127.0.0.1", "t", "throw");
    BOOST_REQUIRE(!thrown);
    BOOST_TEST(thrown.error().code == rpclb::ErrorCode::internal_server_error);
    BOOST_TEST(thrown.error().message == "boom");
    BOOST_TEST(thrown.error().details.at("node").as_string() == "b@127.0.0.1");
    // A local call runs an inline handler on the calling thread.
    BOOST_TEST(p.b->call("b@127.0.0.1", "t", "echo", {2}).value() == (boost::json::array{2}));
}

BOOST_AUTO_TEST_CASE(inline_runs_over_the_threshold_are_counted) {
    Pair p;
    p.b->register_function(
        "t", "slow",
        [](const boost::json::array&) -> rpclb::CallResult {
            std::this_thread::sleep_for(5ms);  // over its 1 ms slow_threshold
            return true;
        },
        {.run_inline = true, .slow_threshold = std::chrono::microseconds(1000)});
    p.b->register_function(
        "t", "quick", [](const boost::json::array&) -> rpclb::CallResult { return true; },
        {.run_inline = true, .slow_threshold = std::chrono::microseconds(1'000'000)});
    p.start_b();
    for (int i = 0; i < 3; ++i) BOOST_REQUIRE(p.a.call("b@127.0.0.1", "t", "slow").has_value());
    for (int i = 0; i < 3; ++i) BOOST_REQUIRE(p.a.call("b@127.0.0.1", "t", "quick").has_value());
    BOOST_TEST(p.b->stats().slow_inline_runs == 3u);
    BOOST_TEST(p.a.stats().slow_inline_runs == 0u);
}

// A negative slow_threshold is refused: with it every run would count as slow ("ran for
// 0 us, over its slow_threshold of -1 us").
BOOST_AUTO_TEST_CASE(a_slow_threshold_under_one_microsecond_is_refused) {
    Pair p;
    auto quick = [](const boost::json::array&) -> rpclb::CallResult { return true; };
    for (auto bad : {std::chrono::microseconds(0), std::chrono::microseconds(-1)}) {
        try {
            p.b->register_function("t", "bad", quick, {.run_inline = true, .slow_threshold = bad});
            BOOST_ERROR("slow_threshold " << bad.count() << " us was taken");
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()) ==
                       "slow_threshold must be at least 1 us; got " + std::to_string(bad.count()) + " us");
        }
    }
    p.b->register_function("t", "good", quick, {.run_inline = true, .slow_threshold = std::chrono::microseconds(1)});
    p.start_b();
    BOOST_TEST(!p.a.call("b@127.0.0.1", "t", "bad").has_value());  // never registered
    BOOST_TEST(p.a.call("b@127.0.0.1", "t", "good").has_value());
}
