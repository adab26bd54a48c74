// Asynchronous calls follow Asio's rules for initiating functions: the handler's
// associated executor counts the operation as outstanding work until the completion is
// dispatched, and the handler's cancellation slot cancels the call.
#define BOOST_TEST_MODULE async_completion
#include <rpclb/cluster.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
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
