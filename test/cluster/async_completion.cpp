// Asynchronous calls follow Asio's rules for initiating functions: the handler's
// associated executor counts the operation as outstanding work until the completion is
// dispatched, and the handler's cancellation slot cancels the call.
#define BOOST_TEST_MODULE async_completion
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <thread>

using namespace std::chrono_literals;
namespace asio = boost::asio;
using rpclb::test::eventually;

namespace {

// Two connected nodes; b serves t.echo (inline) and t.sleep (worker pool, counts runs).
struct Pair {
    Pair() : a(rpclb::test::in_process_node_options("a@127.0.0.1")) {
        a.start();
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(
            "b@127.0.0.1", {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port())}));
        b->register_function(
            "t", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return args; },
            rpclb::HandlerOptions{.run_inline = true});
        b->register_function("t", "sleep", [this](const boost::json::array& args) -> rpclb::CallResult {
            // Takes as long as the caller asks: the run time is the test's input.
            std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).to_number<int>()));
            ++sleeps_done;
            return true;
        });
        b->start();
        BOOST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s));
    }
    rpclb::Cluster a;
    std::unique_ptr<rpclb::Cluster> b;
    std::atomic<int> sleeps_done{0};
};

}  // namespace

// Before: ioc.run() returned at once with no handler run, and the completion was lost to
// that loop.
BOOST_AUTO_TEST_CASE(a_call_bound_to_an_idle_io_context_keeps_it_running_until_it_completes) {
    Pair p;
    asio::io_context user;
    std::optional<rpclb::CallResult> result;
    std::thread::id ran_on;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1, "abc"}, {}, asio::bind_executor(user, [&](rpclb::CallResult r) {
                       result = std::move(r);
                       ran_on = std::this_thread::get_id();
                   }));
    const auto handlers = user.run();  // must wait for the call, then run its completion
    BOOST_TEST(handlers == 1u);
    BOOST_REQUIRE(result.has_value());
    BOOST_REQUIRE(result->has_value());
    BOOST_TEST(result->value() == (boost::json::array{1, "abc"}));
    BOOST_TEST((ran_on == std::this_thread::get_id()));
}

BOOST_AUTO_TEST_CASE(an_immediate_failure_also_completes_on_the_bound_executor) {
    Pair p;
    asio::io_context user;
    std::optional<rpclb::CallResult> result;
    p.a.async_call("nobody@127.0.0.1", "t", "echo", {}, {},
                   asio::bind_executor(user, [&](rpclb::CallResult r) { result = std::move(r); }));
    BOOST_TEST(!result.has_value());  // never inside async_call
    BOOST_TEST(user.run() == 1u);
    BOOST_REQUIRE(result.has_value());
    BOOST_REQUIRE(!result->has_value());
    BOOST_TEST(result->error().is(rpclb::Failure::no_connection));
}

BOOST_AUTO_TEST_CASE(a_cast_bound_to_an_idle_io_context_completes_there) {
    Pair p;
    asio::io_context user;
    std::optional<rpclb::Result<void>> result;
    p.a.async_cast("b@127.0.0.1", "t", "echo", {}, {},
                   asio::bind_executor(user, [&](rpclb::Result<void> r) { result = std::move(r); }));
    BOOST_TEST(user.run() == 1u);
    BOOST_REQUIRE(result.has_value());
    BOOST_TEST(result->has_value());
}

// The cancellation slot ends the wait at once with a clear error; the request already
// sent still runs on the target, and its late answer is dropped.
BOOST_AUTO_TEST_CASE(a_cancelled_call_completes_at_once_with_cancelled) {
    Pair p;
    asio::io_context user;
    asio::cancellation_signal signal;
    std::optional<rpclb::CallResult> result;
    rpclb::CallOptions o;
    o.timeout = 30s;
    const auto began = std::chrono::steady_clock::now();
    p.a.async_call("b@127.0.0.1", "t", "sleep", {1500}, o,
                   asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(user, [&](rpclb::CallResult r) {
                                                    result = std::move(r);
                                                })));
    asio::steady_timer cancel_after(user, 100ms);
    cancel_after.async_wait([&](boost::system::error_code) { signal.emit(asio::cancellation_type::terminal); });
    user.run();
    const auto took = std::chrono::steady_clock::now() - began;
    BOOST_REQUIRE(result.has_value());
    BOOST_REQUIRE(!result->has_value());
    BOOST_TEST(result->error().is(rpclb::Failure::cancelled));
    BOOST_TEST(result->error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(result->error().message == "cancelled");
    BOOST_TEST(result->error().details.at("function").as_string() == "sleep");
    BOOST_TEST((took < 1400ms));  // did not wait for the handler
    // The request was sent: the target still runs it.
    BOOST_TEST(eventually([&] { return p.sleeps_done.load() == 1; }, 5s));
    // And the connection is fine afterwards.
    BOOST_TEST(p.a.call("b@127.0.0.1", "t", "echo", {7}).value() == (boost::json::array{7}));
}

BOOST_AUTO_TEST_CASE(a_cancellation_after_completion_changes_nothing) {
    Pair p;
    asio::io_context user;
    asio::cancellation_signal signal;
    int completions = 0;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1}, {},
                   asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(user, [&](rpclb::CallResult r) {
                                                    ++completions;
                                                    BOOST_TEST(r.has_value());
                                                })));
    user.run();
    signal.emit(asio::cancellation_type::terminal);  // the slot was cleared: no handler
    user.restart();
    user.run();
    BOOST_TEST(completions == 1);
}

// ---- never inside async_call ----------------------------------------------------------

namespace {

thread_local bool inside_async_call = false;

// Makes `left` calls to a node nobody runs, each from the completion of the one before:
// every one fails at once, on the calling thread. Counts the completions that ran inside
// async_call (must be none) and signals `done` after the last.
struct FailingChain {
    rpclb::Cluster& node;
    std::function<void(std::function<void(rpclb::CallResult)>)> start;  // async_call with a token
    int left;
    std::atomic<int> inside{0}, failed{0};
    std::promise<void> done;

    void next() {
        inside_async_call = true;
        start([this](rpclb::CallResult r) {
            if (inside_async_call) ++inside;
            if (!r) ++failed;
            if (--left > 0) return next();
            done.set_value();
        });
        inside_async_call = false;
    }
};

}  // namespace

// A call failing at once must not complete inside async_call, even when made from a worker
// (whose executor would run the completion in place): a handler that starts the next call
// would recurse once per call and overflow the stack after a few thousand calls to a
// killed node.
BOOST_AUTO_TEST_CASE(a_call_failing_at_once_never_completes_inside_async_call) {
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    FailingChain chain{a, {}, 50000};
    chain.start = [&](std::function<void(rpclb::CallResult)> h) {
        a.async_call("nobody@127.0.0.1", "t", "echo", {}, {}, std::move(h));
    };
    auto done = chain.done.get_future();
    chain.next();
    BOOST_REQUIRE(done.wait_for(60s) == std::future_status::ready);
    BOOST_TEST(chain.inside.load() == 0);
    BOOST_TEST(chain.failed.load() == 50000);
    a.stop();
}

// The same with the handler bound to the caller's own io_context, the calls made from the
// thread that runs it.
BOOST_AUTO_TEST_CASE(a_call_failing_at_once_on_a_bound_executor_never_completes_inside_async_call) {
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    asio::io_context user;
    FailingChain chain{a, {}, 20000};
    chain.start = [&](std::function<void(rpclb::CallResult)> h) {
        a.async_call("nobody@127.0.0.1", "t", "echo", {}, {}, asio::bind_executor(user, std::move(h)));
    };
    auto done = chain.done.get_future();
    asio::post(user, [&] { chain.next(); });
    user.run();  // returns once the last completion ran (each call keeps `user` busy)
    BOOST_REQUIRE(done.wait_for(0s) == std::future_status::ready);
    BOOST_TEST(chain.inside.load() == 0);
    BOOST_TEST(chain.failed.load() == 20000);
    a.stop();
}

// ---- CallOptions::run_completion_inline ------------------------------------------------

namespace {

rpclb::CallOptions inline_completion() {
    rpclb::CallOptions options;
    options.run_completion_inline = true;
    return options;
}

// What a completion saw of its thread: a blocking call from it fails at once with
// "would deadlock" only on a network thread.
bool blocking_call_refused(rpclb::Cluster& node) {
    auto r = node.call("b@127.0.0.1", "t", "echo", {1});
    return !r && r.error().is(rpclb::Failure::would_deadlock);
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_inline_completion_runs_on_the_network_thread_that_read_the_answer) {
    Pair p;
    std::promise<std::pair<rpclb::CallResult, bool>> inline_done, pool_done;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1, "abc"}, inline_completion(), [&](rpclb::CallResult r) {
        inline_done.set_value({std::move(r), blocking_call_refused(p.a)});
    });
    auto [result, refused] = inline_done.get_future().get();
    BOOST_REQUIRE(result.has_value());
    BOOST_TEST(result.value() == (boost::json::array{1, "abc"}));
    BOOST_TEST(refused);  // on a network thread

    // Without the option: the worker pool, where a blocking call works.
    p.a.async_call("b@127.0.0.1", "t", "echo", {1}, {}, [&](rpclb::CallResult r) {
        pool_done.set_value({std::move(r), blocking_call_refused(p.a)});
    });
    auto [pool_result, pool_refused] = pool_done.get_future().get();
    BOOST_TEST(pool_result.has_value());
    BOOST_TEST(!pool_refused);
}

// A deadline that fires completes inline too, on the timer's network thread.
BOOST_AUTO_TEST_CASE(an_inline_completion_of_a_timed_out_call_runs_on_the_network_thread) {
    Pair p;
    auto options = inline_completion();
    options.timeout = 100ms;
    std::promise<std::pair<rpclb::CallResult, bool>> done;
    p.a.async_call("b@127.0.0.1", "t", "sleep", {1000}, options, [&](rpclb::CallResult r) {
        done.set_value({std::move(r), blocking_call_refused(p.a)});
    });
    auto [result, refused] = done.get_future().get();
    BOOST_REQUIRE(!result.has_value());
    BOOST_TEST(result.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(refused);
    BOOST_TEST(eventually([&] { return p.sleeps_done.load() == 1; }, 5s));
}

// Each completion starts the next call from the network thread, 64 at a time: the
// pattern of rpclb-call and bench/rpc_throughput. Every call completes once, none inside
// async_call.
BOOST_AUTO_TEST_CASE(inline_completions_that_start_the_next_call_keep_64_in_flight) {
    Pair p;
    constexpr int total = 20000, width = 64;
    std::atomic<int> started{0}, completed{0}, ok{0}, inside{0};
    std::promise<void> all_done;
    std::function<void()> issue = [&] {
        if (started.fetch_add(1) >= total) return;
        inside_async_call = true;
        p.a.async_call("b@127.0.0.1", "t", "echo", {started.load()}, inline_completion(), [&](rpclb::CallResult r) {
            if (inside_async_call) ++inside;
            if (r) ++ok;
            if (completed.fetch_add(1) + 1 == total) return all_done.set_value();
            issue();
        });
        inside_async_call = false;
    };
    for (int i = 0; i < width; ++i) issue();
    BOOST_REQUIRE(all_done.get_future().wait_for(120s) == std::future_status::ready);
    BOOST_TEST(ok.load() == total);
    BOOST_TEST(inside.load() == 0);
}

// A call that fails at once is handed to the pool even when opted in: a chain of them
// never recurses.
BOOST_AUTO_TEST_CASE(an_inline_completion_never_runs_inside_async_call) {
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    FailingChain chain{a, {}, 20000};
    chain.start = [&](std::function<void(rpclb::CallResult)> h) {
        a.async_call("nobody@127.0.0.1", "t", "echo", {}, inline_completion(), std::move(h));
    };
    auto done = chain.done.get_future();
    chain.next();
    BOOST_REQUIRE(done.wait_for(60s) == std::future_status::ready);
    BOOST_TEST(chain.inside.load() == 0);
    BOOST_TEST(chain.failed.load() == 20000);
    a.stop();
}

// A handler with an executor of its own completes there, option or not.
BOOST_AUTO_TEST_CASE(an_associated_executor_wins_over_inline_completion) {
    Pair p;
    asio::io_context user;
    std::thread::id ran_on;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1}, inline_completion(),
                   asio::bind_executor(user, [&](rpclb::CallResult) { ran_on = std::this_thread::get_id(); }));
    BOOST_TEST(user.run() == 1u);
    BOOST_TEST((ran_on == std::this_thread::get_id()));
}

// The calling node stops with calls in flight: each completes exactly once, and the
// call each starts from its completion (on a stopping node) completes once too.
BOOST_AUTO_TEST_CASE(inline_completions_during_a_stop_each_run_once) {
    Pair p;
    constexpr int calls = 50;
    std::atomic<int> first{0}, second{0}, failed{0};
    std::promise<void> all_done;
    const auto sent_before = p.a.stats().frames_sent;
    for (int i = 0; i < calls; ++i) {
        p.a.async_call("b@127.0.0.1", "t", "sleep", {300}, inline_completion(), [&](rpclb::CallResult r) {
            ++first;
            if (!r) ++failed;
            p.a.async_call("b@127.0.0.1", "t", "echo", {}, inline_completion(), [&](rpclb::CallResult) {
                if (second.fetch_add(1) + 1 == calls) all_done.set_value();
            });
        });
    }
    BOOST_REQUIRE(eventually([&] { return p.a.stats().frames_sent >= sent_before + calls; }, 5s));
    p.a.stop();  // a goes away while its calls wait for their answers
    BOOST_REQUIRE(all_done.get_future().wait_for(30s) == std::future_status::ready);
    BOOST_TEST(first.load() == calls);
    BOOST_TEST(second.load() == calls);
    BOOST_TEST(failed.load() > 0);  // those still waiting when a closed its connections
}

// The guard knows the network threads of every node in the process, not only the calling
// node's: from an inline completion on a's network thread, a blocking call by b (in the
// same process) to a, whose loop cannot answer, would otherwise wait its whole timeout.
BOOST_AUTO_TEST_CASE(a_blocking_call_on_any_nodes_network_thread_fails_at_once) {
    Pair p;
    // a to b answers first: the completion below must come from a's network thread (a
    // call that failed at once would complete on this thread instead).
    BOOST_REQUIRE(eventually([&] { return p.a.call("b@127.0.0.1", "t", "echo", {1}).has_value(); }, 5s));
    std::promise<std::pair<rpclb::CallResult, std::chrono::steady_clock::duration>> done;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1}, inline_completion(), [&](rpclb::CallResult) {
        rpclb::CallOptions options;
        options.timeout = 3s;
        const auto start = std::chrono::steady_clock::now();
        auto r = p.b->call("a@127.0.0.1", "t", "echo", {1}, options);  // b calls a, from a's loop
        done.set_value({std::move(r), std::chrono::steady_clock::now() - start});
    });
    auto [result, took] = done.get_future().get();
    BOOST_REQUIRE(!result.has_value());
    BOOST_TEST(result.error().is(rpclb::Failure::would_deadlock),
               result.error().message << " " << boost::json::serialize(result.error().details));
    BOOST_TEST(took < 1s);
}

// A cancellation slot's signal is emitted on the handler's executor (the
// pool), so a handler with one completes there even when opted in.
BOOST_AUTO_TEST_CASE(a_handler_with_a_cancellation_slot_completes_on_the_pool) {
    Pair p;
    asio::cancellation_signal signal;
    std::promise<bool> done;
    p.a.async_call("b@127.0.0.1", "t", "echo", {1}, inline_completion(),
                   asio::bind_cancellation_slot(signal.slot(), [&](rpclb::CallResult) {
                       done.set_value(blocking_call_refused(p.a));
                   }));
    BOOST_TEST(!done.get_future().get());  // not on a network thread
}

// A cancellation is the caller's choice, not the member's failure: the release tells the
// balancer so, and a detector that ejects at the first local failure leaves the member in.
BOOST_AUTO_TEST_CASE(a_cancelled_balanced_call_is_not_the_members_failure) {
    Pair p;
    rpclb::LoadBalancerOptions member;
    member.name = "w";
    p.b->start_balancer(member);
    rpclb::LoadBalancerOptions caller = member;
    caller.node_match_list = rpclb::NodeMatchList::none();
    caller.outlier_detection.consecutive_local_failures = 1;
    caller.outlier_detection.max_ejection_percent = 100;
    caller.outlier_detection.panic_threshold_percent = 0;
    auto lb = p.a.start_balancer(caller);
    BOOST_REQUIRE(eventually([&] { return lb->get_members().has_value(); }, 5s));

    asio::io_context user;
    asio::cancellation_signal signal;
    std::optional<rpclb::CallResult> result;
    rpclb::CallOptions o;
    o.load_balancer = "w";
    o.timeout = 30s;
    p.a.async_call("t", "sleep", {300}, o,
                   asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(user, [&](rpclb::CallResult r) {
                                                    result = std::move(r);
                                                })));
    asio::steady_timer cancel_after(user, 50ms);
    cancel_after.async_wait([&](boost::system::error_code) { signal.emit(asio::cancellation_type::terminal); });
    user.run();
    BOOST_REQUIRE(result.has_value());
    BOOST_REQUIRE(!result->has_value());
    BOOST_TEST(result->error().is(rpclb::Failure::cancelled));
    BOOST_TEST(eventually([&] { return lb->members()->in_flight(0) == 0; }, 5s));  // released
    BOOST_TEST(lb->ejected().empty());
    // A timeout, by contrast, is the member's failure and ejects it.
    o.timeout = 50ms;
    BOOST_TEST(!p.a.call("t", "sleep", {300}, o).has_value());
    BOOST_TEST(eventually([&] { return lb->ejected() == std::vector<std::string>{"b@127.0.0.1"}; }, 5s));
}
