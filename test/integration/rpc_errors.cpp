// How calls fail, against a real rpclb-node: each ErrorMessage code of doc/architecture.md
// "Errors", how fast it comes, and what its details name.
#define BOOST_TEST_MODULE rpc_errors
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <rpclb/cluster_async.hpp>

#include <atomic>
#include <csignal>
#include <future>
#include <memory>
#include <thread>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;
using rpclb::CallResult;
using rpclb::ErrorCode;
using rpclb::ErrorMessage;

namespace {


std::string detail(const ErrorMessage& e, std::string_view key) {
    const auto* v = e.details.if_contains(key);
    return v && v->is_string() ? std::string(v->get_string()) : std::string("<missing>");
}

// Why rpclb failed a call whose connection failed (doc/architecture.md "Errors").
std::string reason_of(const ErrorMessage& e) { return detail(e, "reason"); }

// Every call error names node, module and function (predecessor-compatibility §10.1).
void check_names_call(const ErrorMessage& e, const std::string& node, const std::string& module,
                      const std::string& function) {
    BOOST_TEST(detail(e, "node") == node);
    BOOST_TEST(detail(e, "module") == module);
    BOOST_TEST(detail(e, "function") == function);
}

std::string describe(const CallResult& r) {
    if (r) return "ok: " + boost::json::serialize(*r);
    return boost::json::serialize(r.error().to_json());
}

long long ms_since(steady_clock::time_point start) {
    return duration_cast<milliseconds>(steady_clock::now() - start).count();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rpc_errors)

BOOST_FIXTURE_TEST_CASE(call_fails_fast_when_node_dies_midway, OneNode) {
    auto promise = std::make_shared<std::promise<CallResult>>();
    auto future = promise->get_future();
    CallOptions options;
    options.timeout = 10s;
    client->async_call(a->name(), "demo", "sleep", boost::json::array{5000}, options,
                       [promise](CallResult r) { promise->set_value(std::move(r)); });

    // A second call on the same connection answered means the node has read the sleep
    // request before it (frames are written and read in order): the sleep is in flight.
    const auto echo = client->call(a->name(), "demo", "echo", {1}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(echo.has_value(), describe(echo));
    BOOST_TEST_REQUIRE((future.wait_for(0s) == std::future_status::timeout), "the sleep call ended early");

    const auto killed_at = steady_clock::now();
    a->process().kill();
    BOOST_TEST_REQUIRE((future.wait_for(2s) == std::future_status::ready),
                       "the in-flight call did not fail within 2 s of its node's death");
    const auto took = ms_since(killed_at);
    const auto result = future.get();
    BOOST_TEST_MESSAGE("in-flight call failed " << took << " ms after the kill");
    BOOST_TEST(took < 2000);
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::service_unavailable, describe(result));
    check_names_call(result.error(), a->name(), "demo", "sleep");
    // The dead node's kernel ended the connection without a WebSocket close: one reason,
    // whether the read saw the end of the stream or a reset.
    BOOST_TEST(reason_of(result.error()) == "connection lost", describe(result));
}

// Freezes a node (SIGSTOP, waiting until every thread has stopped: kill() returns while a
// thread may still answer) for the scope of the object (SIGCONT on every exit, so that the harness
// can stop and reap it).
class Frozen {
public:
    explicit Frozen(Node& node) : node_(node) { BOOST_TEST_REQUIRE(node_.process().freeze()); }
    ~Frozen() { node_.process().signal(SIGCONT); }
    Frozen(const Frozen&) = delete;
    Frozen& operator=(const Frozen&) = delete;

private:
    Node& node_;
};

// A node that stopped while its peer was frozen: the peer never answered the close, and
// requests to it must not wait on a connection whose strand no thread runs any more. They
// fail at once.
BOOST_FIXTURE_TEST_CASE(calls_after_stop_fail_at_once_even_with_a_frozen_peer, OneNode) {
    Frozen frozen(*a);
    client->stop();
    auto promise = std::make_shared<std::promise<CallResult>>();
    auto future = promise->get_future();
    const auto start = steady_clock::now();
    client->async_call(a->name(), "demo", "echo", {1}, {.timeout = 3s},
                       [promise](CallResult r) { promise->set_value(std::move(r)); });
    BOOST_TEST_REQUIRE((future.wait_for(1s) == std::future_status::ready),
                       "a call made after stop() did not end (its deadline is 3 s)");
    BOOST_TEST(ms_since(start) < 1000);
    const auto result = future.get();
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::service_unavailable, describe(result));
    BOOST_TEST(client->connected_nodes().empty());
}

// A blocking call to a frozen node (its call channel dial stalls) while another thread
// stops the caller: it ends with the stop, not after its 20 s deadline or never.
BOOST_FIXTURE_TEST_CASE(blocking_call_to_a_frozen_peer_ends_when_the_caller_stops, OneNode) {
    Frozen frozen(*a);
    auto outcome = std::make_shared<std::promise<CallResult>>();
    auto done = outcome->get_future();
    std::thread caller([&client = *client, name = a->name(), outcome] {
        outcome->set_value(client.call(name, "demo", "echo", {1}, {.timeout = 20s}));
    });
    // The call is under way: its channel counts as open from the start of its dial (which
    // stalls on the frozen peer), or it was sent on one already open.
    BOOST_TEST_REQUIRE(eventually([&] {
        const auto s = client->stats();
        return s.channels_open + s.channel_calls > 0;
    }, 5s));
    const auto stop_began = steady_clock::now();
    client->stop();
    const auto stop_took = ms_since(stop_began);
    if (done.wait_for(1s) != std::future_status::ready) {
        caller.detach();  // stuck for good: leave it, and fail
        BOOST_FAIL("the blocking call did not end within 1 s of stop() (stop took " << stop_took << " ms)");
    }
    caller.join();
    BOOST_TEST_MESSAGE("stop took " << stop_took << " ms");
    const auto result = done.get();
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::service_unavailable, describe(result));
}

// A timeout outside 1 ms .. 4294967295 ms is refused at once with bad_request on every
// path, rather than a remote call with 0 ms failing unsent with request_timeout, a local
// one running its handler, or a negative one waiting for the answer.
BOOST_FIXTURE_TEST_CASE(a_call_timeout_out_of_range_is_bad_request_on_every_path, OneNode) {
    std::atomic<int> local_runs{0};
    client->register_function("t", "count", [&local_runs](const boost::json::array&) -> CallResult {
        ++local_runs;
        return boost::json::value(1);
    });
    for (const auto timeout : {0ms, -1ms, milliseconds(4294967296LL), milliseconds::min()}) {
        for (const auto& node : {a->name(), client->name()}) {
            const std::string module = node == a->name() ? "demo" : "t";
            const std::string function = node == a->name() ? "sleep" : "count";
            const auto start = steady_clock::now();
            const auto result = client->call(node, module, function, {300}, {.timeout = timeout});
            BOOST_TEST_REQUIRE(!result.has_value(), node << " " << timeout.count() << " ms: " << describe(result));
            BOOST_TEST(result.error().code == ErrorCode::bad_request, describe(result));
            BOOST_TEST(result.error().message ==
                           "timeout must be 1 to 4294967295 ms; got " + std::to_string(timeout.count()) + " ms",
                       describe(result));
            check_names_call(result.error(), node, module, function);
            BOOST_TEST(ms_since(start) < 250, "it was sent and waited for");
        }
        auto promise = std::make_shared<std::promise<CallResult>>();
        auto future = promise->get_future();
        client->async_call(a->name(), "demo", "echo", {1}, {.timeout = timeout},
                           [promise](CallResult r) { promise->set_value(std::move(r)); });
        BOOST_TEST_REQUIRE((future.wait_for(2s) == std::future_status::ready));
        const auto result = future.get();
        BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
        BOOST_TEST(result.error().code == ErrorCode::bad_request, describe(result));
    }
    BOOST_TEST(local_runs.load() == 0, "a local handler ran for a refused call");
    // The ends of the range are taken.
    BOOST_TEST(client->call(a->name(), "demo", "echo", {1}, {.timeout = milliseconds(4294967295LL)}).has_value());
    BOOST_TEST(client->call(client->name(), "t", "count", {}, {.timeout = 1ms}).has_value());
}

BOOST_FIXTURE_TEST_CASE(call_to_unknown_node_fails_at_once, OneNode) {
    const auto start = steady_clock::now();
    const auto result = client->call("ghost@127.0.0.1", "demo", "node", {}, {.timeout = 10s});
    const auto took = ms_since(start);
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::service_unavailable, describe(result));
    BOOST_TEST(took < 500, "took " << took << " ms: it waited instead of failing at once");
    check_names_call(result.error(), "ghost@127.0.0.1", "demo", "node");
    BOOST_TEST(reason_of(result.error()) == "not connected", describe(result));

    const auto cast = client->cast("ghost@127.0.0.1", "demo", "node");
    BOOST_TEST_REQUIRE(!cast.has_value());
    BOOST_TEST(cast.error().code == ErrorCode::service_unavailable);
    check_names_call(cast.error(), "ghost@127.0.0.1", "demo", "node");
    BOOST_TEST(reason_of(cast.error()) == "not connected");
}

BOOST_FIXTURE_TEST_CASE(call_past_deadline_is_request_timeout, OneNode) {
    const auto start = steady_clock::now();
    const auto result = client->call(a->name(), "demo", "sleep", {2000}, {.timeout = 200ms});
    const auto took = ms_since(start);
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::request_timeout, describe(result));
    BOOST_TEST_MESSAGE("timed out after " << took << " ms (timeout 200 ms)");
    BOOST_TEST(took >= 200, "the call gave up before its deadline");
    BOOST_TEST(took <= 1500, "the call outlived its deadline by far");
    check_names_call(result.error(), a->name(), "demo", "sleep");

    // The connection is untouched: the next call works at once; a sleep that returns after
    // the timed-out call's late reply has come back (and must have been dropped) works,
    // and so does a call after that.
    const auto next = client->call(a->name(), "demo", "echo", {"after"}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(next.has_value(), describe(next));
    BOOST_TEST(next->as_array() == boost::json::array{"after"});
    const auto later = client->call(a->name(), "demo", "sleep", {2500}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(later.has_value(), describe(later));
    BOOST_TEST(later->as_string() == a->name());
    const auto last = client->call(a->name(), "demo", "echo", {"last"}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(last.has_value(), describe(last));
    BOOST_TEST(last->as_array() == boost::json::array{"last"});
}

BOOST_FIXTURE_TEST_CASE(handler_exception_is_internal_server_error, OneNode) {
    const auto result = client->call(a->name(), "demo", "fail", {}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::internal_server_error, describe(result));
    BOOST_TEST(result.error().message == "demo.fail was called");
    check_names_call(result.error(), a->name(), "demo", "fail");
    // The node survived its handler's exception.
    BOOST_TEST(client->call(a->name(), "demo", "node", {}, {.timeout = 2s}).has_value());
}

BOOST_FIXTURE_TEST_CASE(unknown_function_is_not_found, OneNode) {
    for (const auto& [module, function] : {std::pair<std::string, std::string>{"demo", "nope"},
                                           {"nomodule", "node"}}) {
        const auto result = client->call(a->name(), module, function, {}, {.timeout = 5s});
        BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
        BOOST_TEST(result.error().code == ErrorCode::not_found, module << "." << function << ": " << describe(result));
        check_names_call(result.error(), a->name(), module, function);
    }
}

BOOST_FIXTURE_TEST_CASE(handler_error_message_is_passed_through, OneNode) {
    // demo.sleep returns its own bad_request for arguments it can't use.
    const auto result = client->call(a->name(), "demo", "sleep", {"soon"}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::bad_request, describe(result));
    BOOST_TEST(result.error().message == "demo.sleep takes the milliseconds to sleep");
    check_names_call(result.error(), a->name(), "demo", "sleep");
}

BOOST_FIXTURE_TEST_CASE(oversize_request_is_bad_request_and_connection_survives, OneNode) {
    rpclb::ClusterOptions options;
    options.max_message_size = 64 * 1024;
    auto small = start_client({a->address()}, options);
    BOOST_TEST_REQUIRE(wait_for_connected(*small, {a->name()}));

    const std::string big(100 * 1024, 'x');
    const auto start = steady_clock::now();
    const auto result = small->call(a->name(), "demo", "echo", {big}, {.timeout = 5s});
    const auto took = ms_since(start);
    BOOST_TEST_REQUIRE(!result.has_value(), "a 100 KiB request passed a 64 KiB limit");
    BOOST_TEST(result.error().code == ErrorCode::bad_request, describe(result));
    BOOST_TEST(took < 1000, "took " << took << " ms: the refusal should not wait for a reply");
    check_names_call(result.error(), a->name(), "demo", "echo");

    // The same connection still carries calls, including one just under the limit.
    const std::string fits(60 * 1024, 'y');
    const auto echo = small->call(a->name(), "demo", "echo", {fits}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(echo.has_value(), describe(echo));
    BOOST_TEST((echo->as_array() == boost::json::array{fits}));
    BOOST_TEST(small->connected_nodes() == std::vector<std::string>{a->name()}, boost::test_tools::per_element());
    BOOST_TEST(small->stats().peers_lost == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
