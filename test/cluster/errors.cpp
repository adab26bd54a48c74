// Error mapping of calls between two in-process nodes on 127.0.0.1 (doc/architecture.md
// "Errors"): one test per code.
#define BOOST_TEST_MODULE errors
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include <limits>

#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>

using namespace std::chrono_literals;
using rpclb::test::eventually;
using rpclb::CallOptions;
using rpclb::ErrorCode;

namespace {

rpclb::ClusterOptions node_options(std::string name) {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.cookie = "test-cookie";
    return o;
}

// A serving node with handlers for every outcome, and a client connected to it.
// The outcome of an asynchronous call or cast that `start(handler)` begins, or nullopt
// when it has not completed within 2 s (the promise is shared: a late completion still
// has somewhere to go).
template <class R, class Start>
std::optional<R> outcome_within_2s(Start start) {
    auto done = std::make_shared<std::promise<R>>();
    start([done](R r) { done->set_value(std::move(r)); });
    auto outcome = done->get_future();
    if (outcome.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return std::nullopt;
    return outcome.get();
}

struct Fixture {
    /// How many t:sleep handlers have begun on the server (declared first: it outlives
    /// the server, whose handlers count here).
    std::atomic<int> sleeps_started{0};
    // stop_timeout 0: stopping the server drops its connections at once, as a crash would,
    // instead of finishing the calls it serves (that graceful path has its own test).
    rpclb::Cluster server{[] {
        auto o = node_options("server@127.0.0.1");
        o.stop_timeout = std::chrono::milliseconds(0);
        return o;
    }()};
    std::unique_ptr<rpclb::Cluster> client;

    Fixture() {
        server.register_function("t", "echo", [](const boost::json::array& a) -> rpclb::CallResult {
            return boost::json::value(a);
        });
        server.register_function("t", "sleep", [this](const boost::json::array& a) -> rpclb::CallResult {
            ++sleeps_started;
            // Takes as long as the caller asks: the run time is the test's input.
            std::this_thread::sleep_for(std::chrono::milliseconds(a.at(0).to_number<int>()));
            return nullptr;
        });
        server.register_function("t", "throw", [](const boost::json::array&) -> rpclb::CallResult {
            throw std::runtime_error("boom");
        });
        server.register_function("t", "refuse", [](const boost::json::array&) -> rpclb::CallResult {
            return rpclb::ErrorMessage{ErrorCode::bad_request, "need an id", {{"field", "id"}}};
        });
        server.start();
        auto o = node_options("client@127.0.0.1");
        o.seeds = {"127.0.0.1:" + std::to_string(server.listen_endpoint()->port())};
        o.max_message_size = 64 * 1024;
        client = std::make_unique<rpclb::Cluster>(o);
        client->start();
        BOOST_REQUIRE(eventually([&] { return client->connected_nodes().size() == 1; }, 5s));
    }

    static void names_call(const rpclb::ErrorMessage& e, const std::string& node, const std::string& function) {
        BOOST_TEST(e.details.at("node").as_string() == node);
        BOOST_TEST(e.details.at("module").as_string() == "t");
        BOOST_TEST(e.details.at("function").as_string() == function);
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(error_message_round_trips_through_json) {
    rpclb::ErrorMessage e{ErrorCode::not_found, "gone", {{"node", "a@b"}}};
    auto back = rpclb::ErrorMessage::from_json(e.to_json());
    BOOST_REQUIRE(back.has_value());
    BOOST_TEST((*back == e));
    BOOST_TEST(static_cast<int>(ErrorCode::service_unavailable) == 503);
    BOOST_TEST(rpclb::to_string(ErrorCode::request_timeout) == "request_timeout");
    BOOST_TEST(!rpclb::ErrorMessage::from_json(boost::json::parse(R"({"code":"nope","message":""})")));
}

BOOST_FIXTURE_TEST_CASE(remote_call_returns_handler_value, Fixture) {
    auto r = client->call("server@127.0.0.1", "t", "echo", {1, "abc"});
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(boost::json::serialize(*r) == R"([1,"abc"])");
}

BOOST_FIXTURE_TEST_CASE(deadline_passed_is_request_timeout, Fixture) {
    CallOptions o;
    o.timeout = 100ms;
    const auto start = std::chrono::steady_clock::now();
    auto r = client->call("server@127.0.0.1", "t", "sleep", {400}, o);
    const auto took = std::chrono::steady_clock::now() - start;
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::request_timeout));
    BOOST_TEST(r.error().message == "timeout");
    names_call(r.error(), "server@127.0.0.1", "sleep");
    BOOST_TEST((took >= 100ms && took < 350ms));
}

BOOST_FIXTURE_TEST_CASE(unknown_node_is_service_unavailable_at_once, Fixture) {
    const auto start = std::chrono::steady_clock::now();
    auto r = client->call("nobody@nowhere", "t", "echo", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::service_unavailable));
    names_call(r.error(), "nobody@nowhere", "echo");
    BOOST_TEST(r.error().is(rpclb::Failure::no_connection));
    const auto error = r.error();  // by value: keep it while `reason` points into it
    const auto* reason = error.details.if_contains("reason");
    BOOST_TEST((reason && *reason == "not connected"));
    BOOST_TEST((std::chrono::steady_clock::now() - start < 100ms));
}

BOOST_FIXTURE_TEST_CASE(connection_lost_fails_pending_call_at_once, Fixture) {
    // The server stops once it is running the handler: the call is then in flight.
    std::thread stopper([&] {
        if (eventually([&] { return sleeps_started.load() > 0; }, 5s)) server.stop();
    });
    const auto start = std::chrono::steady_clock::now();
    auto r = client->call("server@127.0.0.1", "t", "sleep", {1500});
    const auto took = std::chrono::steady_clock::now() - start;
    stopper.join();
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::service_unavailable));
    names_call(r.error(), "server@127.0.0.1", "sleep");
    BOOST_TEST((took < 1200ms));  // before the handler (1.5 s) and the deadline (10 s) end
}

BOOST_FIXTURE_TEST_CASE(unregistered_function_is_not_found, Fixture) {
    auto r = client->call("server@127.0.0.1", "t", "missing", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::not_found));
    names_call(r.error(), "server@127.0.0.1", "missing");
}

BOOST_FIXTURE_TEST_CASE(handler_exception_is_internal_server_error_with_text, Fixture) {
    auto r = client->call("server@127.0.0.1", "t", "throw", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::internal_server_error));
    BOOST_TEST(r.error().message == "boom");
    names_call(r.error(), "server@127.0.0.1", "throw");
}

BOOST_FIXTURE_TEST_CASE(handler_error_message_passes_through_with_call_named, Fixture) {
    auto r = client->call("server@127.0.0.1", "t", "refuse", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::bad_request));
    BOOST_TEST(r.error().message == "need an id");
    BOOST_TEST(r.error().details.at("field").as_string() == "id");
    names_call(r.error(), "server@127.0.0.1", "refuse");
}

BOOST_FIXTURE_TEST_CASE(oversize_request_is_bad_request_and_connection_survives, Fixture) {
    auto r = client->call("server@127.0.0.1", "t", "echo", {std::string(100 * 1024, 'x')});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::bad_request));
    names_call(r.error(), "server@127.0.0.1", "echo");
    BOOST_TEST(client->call("server@127.0.0.1", "t", "echo", {1}).has_value());
}

// NaN and infinity have no JSON text: arguments holding one are refused before they are
// sent (rather than reaching the server as text it cannot parse: "invalid JSON"), and a
// handler answering one gets a clear error instead of an unreadable response.
BOOST_FIXTURE_TEST_CASE(numbers_json_cannot_carry_are_refused_with_a_clear_error, Fixture) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (const auto& args : {boost::json::array{nan}, boost::json::array{1, boost::json::object{{"x", inf}}}}) {
        auto r = client->call("server@127.0.0.1", "t", "echo", args);
        BOOST_REQUIRE(!r.has_value());
        BOOST_TEST((r.error().code == ErrorCode::bad_request));
        BOOST_TEST(r.error().is(rpclb::Failure::not_json), r.error().message);
        BOOST_TEST(r.error().message.find("NaN or infinity") != std::string::npos, r.error().message);
        names_call(r.error(), "server@127.0.0.1", "echo");
    }
    const auto cast = client->cast("server@127.0.0.1", "t", "echo", {-inf});
    BOOST_REQUIRE(!cast.has_value());
    BOOST_TEST(cast.error().is(rpclb::Failure::not_json), cast.error().message);
    BOOST_TEST(server.stats().bad_frames == 0u);  // nothing unreadable reached the server

    server.register_function("t", "nan", [](const boost::json::array&) -> rpclb::CallResult {
        return std::numeric_limits<double>::quiet_NaN();
    });
    auto r = client->call("server@127.0.0.1", "t", "nan", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::internal_server_error));
    // (The reason stays on the serving node: the wire carries code, message and details.)
    BOOST_TEST(r.error().message.find("NaN or infinity") != std::string::npos, r.error().message);
    names_call(r.error(), "server@127.0.0.1", "nan");
    BOOST_TEST(client->call("server@127.0.0.1", "t", "echo", {1.5}).has_value());  // the connection serves on

    // The same for the details of a handler's own error.
    server.register_function("t", "nan_details", [](const boost::json::array&) -> rpclb::CallResult {
        return rpclb::ErrorMessage{ErrorCode::bad_request, "bad x", {{"x", std::numeric_limits<double>::infinity()}}};
    });
    r = client->call("server@127.0.0.1", "t", "nan_details", {});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST((r.error().code == ErrorCode::internal_server_error));
    BOOST_TEST(r.error().message.find("error details") != std::string::npos, r.error().message);
    BOOST_TEST(server.stats().bad_frames == 0u);
    BOOST_TEST(client->stats().bad_frames == 0u);
}

// After stop() a call or cast to the node itself completes with node_stopping: its worker
// pool is gone, and work posted there would be lost with its completion.
BOOST_FIXTURE_TEST_CASE(local_async_call_and_cast_after_stop_complete, Fixture) {
    server.stop();
    const auto r = outcome_within_2s<rpclb::CallResult>(
        [&](auto handler) { server.async_call("server@127.0.0.1", "t", "echo", {1}, {}, std::move(handler)); });
    BOOST_REQUIRE(r.has_value());
    BOOST_REQUIRE(!r->has_value());
    BOOST_TEST(r->error().is(rpclb::Failure::node_stopping), r->error().message);

    const auto c = outcome_within_2s<rpclb::Result<void>>(
        [&](auto handler) { server.async_cast("server@127.0.0.1", "t", "echo", {1}, {}, std::move(handler)); });
    BOOST_REQUIRE(c.has_value());
    BOOST_REQUIRE(!c->has_value());
    BOOST_TEST(c->error().is(rpclb::Failure::node_stopping), c->error().message);
    // A blocking call still runs the handler on the caller's own thread.
    BOOST_TEST(server.call("server@127.0.0.1", "t", "echo", {2}).has_value());
}

// After stop() a call or cast to another node says the node stopped (node_stopping, named
// in the message), not "noconnection" as if the peer had gone: it is this node that closed
// its connections, and retrying will not help.
BOOST_FIXTURE_TEST_CASE(calls_to_a_peer_after_stop_say_this_node_stopped, Fixture) {
    client->stop();
    const auto r = client->call("server@127.0.0.1", "t", "echo", {1});
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().is(rpclb::Failure::node_stopping), r.error().message);
    BOOST_TEST(r.error().message.find("stopping") != std::string::npos, r.error().message);

    const auto a = outcome_within_2s<rpclb::CallResult>(
        [&](auto handler) { client->async_call("server@127.0.0.1", "t", "echo", {1}, {}, std::move(handler)); });
    BOOST_REQUIRE(a.has_value());
    BOOST_REQUIRE(!a->has_value());
    BOOST_TEST(a->error().is(rpclb::Failure::node_stopping), a->error().message);

    const auto c = client->cast("server@127.0.0.1", "t", "echo", {1});
    BOOST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().is(rpclb::Failure::node_stopping), c.error().message);

    // Routed calls too: stop() cleared the balancers and groups, which is why no route is
    // left, not "no members registered".
    rpclb::CallOptions routed;
    routed.load_balancer = "anything";
    const auto lb = client->call("t", "echo", {1}, routed);
    BOOST_REQUIRE(!lb.has_value());
    BOOST_TEST(lb.error().is(rpclb::Failure::node_stopping), lb.error().message);
    const auto random = client->call_on_random_node(rpclb::NodeFilter::substring("server"), "t", "echo", {1});
    BOOST_REQUIRE(!random.has_value());
    BOOST_TEST(random.error().is(rpclb::Failure::node_stopping), random.error().message);
}

BOOST_FIXTURE_TEST_CASE(local_call_runs_in_calling_thread_without_network, Fixture) {
    std::thread::id ran_on;
    server.register_function("t", "where", [&](const boost::json::array&) -> rpclb::CallResult {
        ran_on = std::this_thread::get_id();
        return nullptr;
    });
    BOOST_TEST(server.call("server@127.0.0.1", "t", "where", {}).has_value());
    BOOST_TEST((ran_on == std::this_thread::get_id()));
}

BOOST_FIXTURE_TEST_CASE(async_call_completes_through_callback, Fixture) {
    std::promise<rpclb::CallResult> done;
    client->async_call("server@127.0.0.1", "t", "echo", {7}, {},
                       [&](rpclb::CallResult r) { done.set_value(std::move(r)); });
    auto f = done.get_future();
    BOOST_REQUIRE((f.wait_for(5s) == std::future_status::ready));
    auto r = f.get();
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->as_array().at(0).as_int64() == 7);
}

BOOST_AUTO_TEST_SUITE_END()

// Once a node's stop has waited stop_timeout for the calls it serves, the
// handlers still queued on its worker pool are dropped, not run one by one for callers
// whose calls already failed with the closing connection (100 queued 100 ms handlers kept
// a stop with a 500 ms stop_timeout busy for 9.7 s). Local calls among them complete with
// "node stopping"; every caller gets an answer or an error.
BOOST_AUTO_TEST_CASE(stop_drops_handlers_still_queued_after_stop_timeout) {
    std::atomic<int> ran{0};
    auto so = node_options("busy@127.0.0.1");
    so.stop_timeout = 300ms;
    so.worker_threads = 1;
    rpclb::Cluster server(so);
    server.register_function("t", "sleep", [&ran](const boost::json::array&) -> rpclb::CallResult {
        std::this_thread::sleep_for(100ms);  // slow enough for the queue to outlast stop_timeout
        ++ran;
        return nullptr;
    });
    server.start();
    auto co = node_options("caller@127.0.0.1");
    co.seeds = {"127.0.0.1:" + std::to_string(server.listen_endpoint()->port())};
    rpclb::Cluster client(co);
    client.start();
    BOOST_REQUIRE(eventually([&] { return client.connected_nodes().size() == 1; }, 5s));

    constexpr int remote = 60;
    constexpr int local = 5;
    std::atomic<int> completed{0};
    std::atomic<int> local_stopping{0};
    for (int i = 0; i < remote; ++i)
        client.async_call("busy@127.0.0.1", "t", "sleep", {}, {.timeout = 30s}, [&](rpclb::CallResult) { ++completed; });
    BOOST_REQUIRE(eventually([&] { return ran.load() >= 1; }, 5s));  // the rest queue behind the first
    for (int i = 0; i < local; ++i)
        server.async_call("busy@127.0.0.1", "t", "sleep", {}, {.timeout = 30s}, [&](rpclb::CallResult r) {
            if (!r && r.error().is(rpclb::Failure::node_stopping)) ++local_stopping;
            ++completed;
        });
    const auto began = std::chrono::steady_clock::now();
    server.stop();
    const auto took = std::chrono::steady_clock::now() - began;
    // 300 ms of stop_timeout and the goodbye, not the 6.5 s the whole backlog would take.
    BOOST_TEST(ran.load() < 30);
    BOOST_TEST((took < 3s), std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    BOOST_TEST(eventually([&] { return completed.load() == remote + local; }, 5s));
    BOOST_TEST(local_stopping.load() == local);
}
