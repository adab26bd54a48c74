// Deadlines travel: a handler reads its call's deadline and whether its caller gave up
// (call_deadline, call_cancelled), and a call made from a handler, blocking or
// asynchronous, ends by the deadline of the call that handler serves, and, cancelled, when
// that call's caller gives up on it.
#define BOOST_TEST_MODULE deadlines
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using Clock = std::chrono::steady_clock;

namespace {

// Nodes a, b and c in this process, connected.
struct Trio {
    Trio() {
        a = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("a@127.0.0.1"));
        a->start();
        const std::vector<std::string> seeds{"127.0.0.1:" + std::to_string(a->listen_endpoint()->port())};
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("b@127.0.0.1", seeds));
        c = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("c@127.0.0.1", seeds));
    }
    void start() {
        b->start();
        c->start();
        BOOST_REQUIRE(eventually([&] {
            return a->connected_nodes().size() == 2 && b->connected_nodes().size() == 2 &&
                   c->connected_nodes().size() == 2;
        }, 10s));
    }
    ~Trio() {
        release();
        for (auto* n : {c.get(), b.get(), a.get()}) n->stop();
    }
    // Ends every waiting `slow` handler.
    void release() {
        std::lock_guard lock(mutex);
        released = true;
        wake.notify_all();
    }
    // A handler that waits until release() or until its caller gave up (checked every
    // 5 ms, as a handler doing work in steps would), for at most `longest`.
    rpclb::Handler slow(std::chrono::milliseconds longest, std::promise<bool>* gave_up) {
        return [this, longest, gave_up](const boost::json::array&) -> rpclb::CallResult {
            const auto until = Clock::now() + longest;
            std::unique_lock lock(mutex);
            while (!released && !rpclb::call_cancelled() && Clock::now() < until) wake.wait_for(lock, 5ms);
            if (gave_up) gave_up->set_value(rpclb::call_cancelled());
            return "slept";
        };
    }
    std::unique_ptr<rpclb::Cluster> a, b, c;
    std::mutex mutex;
    std::condition_variable wake;
    bool released = false;
};

rpclb::CallOptions with_timeout(std::chrono::milliseconds t) {
    rpclb::CallOptions o;
    o.timeout = t;
    return o;
}

// What b's handler sees of the asynchronous call it makes: how many times it completed, and
// how.
struct Nested {
    void complete(rpclb::CallResult r) {
        std::lock_guard lock(mutex);
        ++completions;
        result = std::move(r);
        done.notify_all();
    }
    // Waits up to `longest` for the first completion; true when it came.
    bool wait(std::chrono::milliseconds longest) {
        std::unique_lock lock(mutex);
        return done.wait_for(lock, longest, [&] { return completions > 0; });
    }
    int count() {
        std::lock_guard lock(mutex);
        return completions;
    }
    std::mutex mutex;
    std::condition_variable done;
    int completions = 0;
    std::optional<rpclb::CallResult> result;
};

// c's t.slow (up to 5 s, or until its caller gives up) and b's t.outer, which calls it
// asynchronously and waits for that call to complete, with no code about cancelling.
struct AsyncNesting {
    explicit AsyncNesting(Trio& t) {
        auto slow = t.slow(5000ms, &c_gave_up);
        t.c->register_function("t", "slow", [this, slow](const boost::json::array& args) -> rpclb::CallResult {
            c_started = true;
            auto r = slow(args);
            c_returned.set_value(Clock::now());
            return r;
        });
        t.b->register_function("t", "outer", [this, &t](const boost::json::array&) -> rpclb::CallResult {
            t.b->async_call("c@127.0.0.1", "t", "slow", {}, with_timeout(20000ms),
                            [this](rpclb::CallResult r) { nested.complete(std::move(r)); });
            nested.wait(10s);
            return "outer done";
        });
    }
    // After the caller of t.outer gave up at `gave_up_at`: c's handler saw it soon after,
    // and b's asynchronous call completed once, cancelled.
    void check_ended(Clock::time_point gave_up_at) {
        auto gave_up = c_gave_up.get_future();
        BOOST_REQUIRE(gave_up.wait_for(5s) == std::future_status::ready);
        BOOST_TEST(gave_up.get());
        BOOST_TEST((c_returned.get_future().get() - gave_up_at < 1s));
        BOOST_REQUIRE(nested.wait(5s));
        BOOST_REQUIRE(!nested.result->has_value());
        BOOST_TEST(nested.result->error().is(rpclb::Failure::cancelled), nested.result->error().message);
        BOOST_TEST(rpclb::test::consistently([&] { return nested.count() == 1; }, 200ms));
    }
    std::promise<bool> c_gave_up;
    std::promise<Clock::time_point> c_returned;
    std::atomic<bool> c_started{false};
    Nested nested;
};

std::int64_t ms_left(Clock::time_point deadline) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_handler_reads_its_calls_deadline) {
    Trio t;
    const auto left = [](const boost::json::array&) -> rpclb::CallResult {
        const auto d = rpclb::call_deadline();
        if (!d) return "none";
        return ms_left(*d);
    };
    t.b->register_function("t", "left", left);
    t.b->register_function("t", "left_inline", left, {.run_inline = true});
    std::promise<bool> cast_saw_deadline;
    t.b->register_function("t", "cast", [&](const boost::json::array&) -> rpclb::CallResult {
        cast_saw_deadline.set_value(rpclb::call_deadline().has_value());
        return nullptr;
    });
    t.start();
    for (const char* f : {"left", "left_inline"}) {
        auto r = t.a->call("b@127.0.0.1", "t", f, {}, with_timeout(500ms));
        BOOST_REQUIRE(r.has_value());
        BOOST_REQUIRE(r->is_int64());
        BOOST_TEST(r->as_int64() > 0);
        BOOST_TEST(r->as_int64() <= 500);
    }
    // A call from b to itself: the handler sees the call's own deadline.
    auto local = t.b->call("b@127.0.0.1", "t", "left", {}, with_timeout(700ms));
    BOOST_TEST((local->as_int64() > 500 && local->as_int64() <= 700), *local);
    // Outside a handler, and in a cast's handler: none.
    BOOST_TEST(!rpclb::call_deadline());
    BOOST_TEST(!rpclb::call_cancelled());
    BOOST_REQUIRE(t.a->cast("b@127.0.0.1", "t", "cast").has_value());
    auto saw = cast_saw_deadline.get_future();
    BOOST_REQUIRE(saw.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(!saw.get());
}

BOOST_AUTO_TEST_CASE(a_nested_call_ends_at_its_parents_deadline) {
    Trio t;
    std::promise<bool> c_gave_up;
    std::promise<Clock::time_point> b_returned;
    std::promise<std::optional<rpclb::ErrorCode>> nested_error;
    // c's function runs up to 2 s; b's calls it with the default timeout of 10 s.
    t.c->register_function("t", "slow", t.slow(2000ms, &c_gave_up));
    t.b->register_function("t", "outer", [&](const boost::json::array&) -> rpclb::CallResult {
        auto r = t.b->call("c@127.0.0.1", "t", "slow");
        nested_error.set_value(r ? std::nullopt : std::optional(r.error().code));
        b_returned.set_value(Clock::now());
        return r;
    });
    t.start();
    const auto sent = Clock::now();
    auto r = t.a->call("b@127.0.0.1", "t", "outer", {}, with_timeout(300ms));
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
    // b's handler thread is free within 300 ms of a's deadline (not after c's 2 s) ...
    auto returned = b_returned.get_future();
    BOOST_REQUIRE(returned.wait_for(5s) == std::future_status::ready);
    BOOST_TEST((returned.get() - (sent + 300ms) < 300ms));
    BOOST_TEST((nested_error.get_future().get() == rpclb::ErrorCode::request_timeout));
    // ... and c's handler saw its caller give up: the request carried what was left.
    auto gave_up = c_gave_up.get_future();
    BOOST_REQUIRE(gave_up.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(gave_up.get());
}

// A blocking call made from a handler ends when that handler's caller cancels: the
// handler's thread is free at once, not at the nested call's own timeout, and the node
// serving the nested call is told too.
BOOST_AUTO_TEST_CASE(a_nested_call_ends_when_its_parents_caller_cancels) {
    Trio t;
    std::promise<bool> c_gave_up;
    std::promise<Clock::time_point> b_returned;
    std::promise<std::optional<rpclb::ErrorCode>> nested_error;
    std::atomic<bool> c_started{false};
    auto slow = t.slow(5000ms, &c_gave_up);
    t.c->register_function("t", "slow", [&](const boost::json::array& args) -> rpclb::CallResult {
        c_started = true;
        return slow(args);
    });
    t.b->register_function("t", "outer", [&](const boost::json::array&) -> rpclb::CallResult {
        auto r = t.b->call("c@127.0.0.1", "t", "slow", {}, with_timeout(20000ms));
        nested_error.set_value(r ? std::nullopt : std::optional(r.error().code));
        b_returned.set_value(Clock::now());
        return r;
    });
    t.start();
    boost::asio::io_context user;
    boost::asio::cancellation_signal signal;
    std::optional<rpclb::CallResult> result;
    t.a->async_call("b@127.0.0.1", "t", "outer", {}, with_timeout(30000ms),
                    boost::asio::bind_cancellation_slot(
                        signal.slot(), boost::asio::bind_executor(user, [&](rpclb::CallResult r) { result = std::move(r); })));
    BOOST_REQUIRE(eventually([&] { return c_started.load(); }, 5s));
    const auto cancelled_at = Clock::now();
    signal.emit(boost::asio::cancellation_type::terminal);
    user.run();
    BOOST_REQUIRE(result.has_value());
    BOOST_TEST(result->error().is(rpclb::Failure::cancelled));
    // b's handler is free well before c's 5 s (or the nested call's own 20 s) ...
    auto returned = b_returned.get_future();
    BOOST_REQUIRE(returned.wait_for(5s) == std::future_status::ready);
    BOOST_TEST((returned.get() - cancelled_at < 1s));
    BOOST_TEST((nested_error.get_future().get() == rpclb::ErrorCode::request_timeout));  // cancelled
    // ... and c's handler saw its caller give up.
    auto gave_up = c_gave_up.get_future();
    BOOST_REQUIRE(gave_up.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(gave_up.get());
}

BOOST_AUTO_TEST_CASE(a_call_from_a_handler_past_its_deadline_is_not_sent) {
    Trio t;
    std::atomic<int> c_runs{0};
    std::promise<rpclb::ErrorMessage> refused;
    std::atomic<bool> local_refused{false};
    t.c->register_function("t", "count", [&](const boost::json::array&) -> rpclb::CallResult { return ++c_runs; });
    t.b->register_function("t", "late", [&](const boost::json::array&) -> rpclb::CallResult {
        // Waits for its own caller to give up, then calls c, and c locally through b.
        const auto until = Clock::now() + 5s;
        while (!rpclb::call_cancelled() && Clock::now() < until) std::this_thread::sleep_for(1ms);
        auto r = t.b->call("c@127.0.0.1", "t", "count");
        local_refused = !t.b->call("b@127.0.0.1", "t", "count");
        refused.set_value(r ? rpclb::ErrorMessage{} : r.error());
        return r;
    });
    t.b->register_function("t", "count", [&](const boost::json::array&) -> rpclb::CallResult { return ++c_runs; });
    t.start();
    BOOST_REQUIRE(!t.a->call("b@127.0.0.1", "t", "late", {}, with_timeout(100ms)));
    auto f = refused.get_future();
    BOOST_REQUIRE(f.wait_for(5s) == std::future_status::ready);
    const auto e = f.get();
    BOOST_TEST(e.code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(e.message == "not sent: the deadline of the call whose handler made it had passed");
    BOOST_TEST(c_runs.load() == 0);
    BOOST_TEST(local_refused.load());
    // A call whose own timeout is the shorter keeps it.
    t.b->register_function("t", "short_inside", [&](const boost::json::array&) -> rpclb::CallResult {
        auto r = t.b->call("b@127.0.0.1", "t", "left_of_inner", {}, with_timeout(100ms));
        return r;
    });
    t.b->register_function("t", "left_of_inner", [](const boost::json::array&) -> rpclb::CallResult {
        return ms_left(*rpclb::call_deadline());
    });
    auto inner = t.a->call("b@127.0.0.1", "t", "short_inside", {}, with_timeout(5000ms));
    BOOST_REQUIRE(inner.has_value());
    BOOST_TEST((inner->as_int64() > 0 && inner->as_int64() <= 100), *inner);
}

// An asynchronous call made from a handler ends, cancelled, when that handler's caller
// cancels: its completion comes at once, and the node serving it is told.
BOOST_AUTO_TEST_CASE(an_async_nested_call_ends_when_its_parents_caller_cancels) {
    std::optional<AsyncNesting> n;  // outlives the nodes, whose handlers use it
    Trio t;
    n.emplace(t);
    t.start();
    boost::asio::io_context user;
    boost::asio::cancellation_signal signal;
    std::optional<rpclb::CallResult> result;
    t.a->async_call("b@127.0.0.1", "t", "outer", {}, with_timeout(30000ms),
                    boost::asio::bind_cancellation_slot(
                        signal.slot(), boost::asio::bind_executor(user, [&](rpclb::CallResult r) { result = std::move(r); })));
    BOOST_REQUIRE(eventually([&] { return n->c_started.load(); }, 5s));
    const auto cancelled_at = Clock::now();
    signal.emit(boost::asio::cancellation_type::terminal);
    user.run();
    BOOST_REQUIRE(result.has_value());
    BOOST_TEST(result->error().is(rpclb::Failure::cancelled));
    n->check_ended(cancelled_at);
}

// The same when the caller goes away: a stops and closes its connections while its call
// waits, a blocking one on a call channel or an asynchronous one on the mesh link.
BOOST_AUTO_TEST_CASE(an_async_nested_call_ends_when_its_parents_caller_goes_away) {
    for (const bool blocking : {true, false}) {
        BOOST_TEST_CONTEXT((blocking ? "blocking" : "asynchronous")) {
            std::optional<AsyncNesting> n;
            std::promise<rpclb::CallResult> lost;
            Trio t;
            n.emplace(t);
            t.start();
            std::future<void> waiting;
            if (blocking) {
                waiting = std::async(std::launch::async, [&] {
                    lost.set_value(t.a->call("b@127.0.0.1", "t", "outer", {}, with_timeout(30000ms)));
                });
            } else {
                t.a->async_call("b@127.0.0.1", "t", "outer", {}, with_timeout(30000ms),
                                [&](rpclb::CallResult r) { lost.set_value(std::move(r)); });
            }
            BOOST_REQUIRE(eventually([&] { return n->c_started.load(); }, 5s));
            BOOST_TEST(t.a->stats().channel_calls == (blocking ? 1u : 0u));
            const auto gone_at = Clock::now();
            t.a->stop();
            auto a_result = lost.get_future();
            BOOST_REQUIRE(a_result.wait_for(5s) == std::future_status::ready);
            BOOST_TEST(!a_result.get());
            n->check_ended(gone_at);
        }
    }
}

// A call a handler makes after its caller cancelled fails at once, cancelled, unsent.
BOOST_AUTO_TEST_CASE(an_async_call_from_a_handler_whose_caller_cancelled_is_not_sent) {
    Nested nested;
    std::atomic<int> c_runs{0};
    std::atomic<bool> b_started{false};
    Trio t;
    t.c->register_function("t", "count", [&](const boost::json::array&) -> rpclb::CallResult { return ++c_runs; });
    t.b->register_function("t", "after_cancel", [&](const boost::json::array&) -> rpclb::CallResult {
        b_started = true;
        if (!eventually([] { return rpclb::call_cancelled(); }, 5s, 1ms)) return "never cancelled";
        t.b->async_call("c@127.0.0.1", "t", "count", {}, with_timeout(5000ms),
                        [&](rpclb::CallResult r) { nested.complete(std::move(r)); });
        return "done";
    });
    t.start();
    boost::asio::io_context user;
    boost::asio::cancellation_signal signal;
    t.a->async_call("b@127.0.0.1", "t", "after_cancel", {}, with_timeout(30000ms),
                    boost::asio::bind_cancellation_slot(signal.slot(),
                                                        boost::asio::bind_executor(user, [](rpclb::CallResult) {})));
    BOOST_REQUIRE(eventually([&] { return b_started.load(); }, 5s));
    signal.emit(boost::asio::cancellation_type::terminal);
    user.run();
    BOOST_REQUIRE(nested.wait(5s));
    BOOST_REQUIRE(!nested.result->has_value());
    BOOST_TEST(nested.result->error().is(rpclb::Failure::cancelled), nested.result->error().message);
    BOOST_TEST(c_runs.load() == 0);
    BOOST_TEST(nested.count() == 1);
}
