// Typed calls (<rpclb/typed.hpp>) across real nodes: rpclb-node processes a and b hosting
// balancer "w", an in-process node serving typed functions, and an in-process client.
// Also the load-balanced async_call without a node, and waiting for a balancer's members.
#define BOOST_TEST_MODULE typed_calls
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/port.hpp"

#include <rpclb/typed.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace rpclb::test;
using namespace std::chrono;
namespace asio = boost::asio;

namespace {

// a and b (rpclb-node, balancer "w" round_robin), a client seeded with a, and an
// in-process node `shop` that serves typed inventory.* functions.
struct TwoNodes : Harness {
    TwoNodes() {
        a = start_node({.name = "a", .balancers = {"w=round_robin"}});
        b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"}});
        shop = std::make_unique<rpclb::Cluster>(in_process_node_options("shop@127.0.0.1", {a->address()}));
        shop->register_function("inventory", "reserve",
                                rpclb::typed([](std::string sku, int qty) { return sku + " x" + std::to_string(qty); },
                                             {"sku", "qty"}));
        shop->register_function("inventory", "count", rpclb::typed([](std::vector<int> xs) { return xs.size(); }));
        shop->start();
        client = start_client({a->address()});
        if (!wait_for_connected(*client, sorted({a->name(), b->name(), shop->name()})) ||
            !wait_for_members(*client, "w", {a->name(), b->name()}))
            throw std::runtime_error("the client did not meet a, b and shop within 5 s");
    }
    ~TwoNodes() {
        client.reset();
        shop.reset();
    }

    std::unique_ptr<Node> a, b;
    std::unique_ptr<rpclb::Cluster> shop;
    std::unique_ptr<rpclb::Cluster> client;
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(typed_calls, TwoNodes)

BOOST_AUTO_TEST_CASE(blocking_typed_call_converts_arguments_and_answer) {
    const auto r = rpclb::call<std::string>(*client, rpclb::to_node(shop->name()), "inventory", "reserve", "apple", 2);
    BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    BOOST_TEST(*r == "apple x2");

    const auto n = rpclb::call<std::size_t>(*client, rpclb::to_node(shop->name()), "inventory", "count",
                                            std::vector<int>{1, 2, 3});
    BOOST_TEST(n.value() == 3u);
}

BOOST_AUTO_TEST_CASE(wrong_argument_comes_back_as_bad_request_naming_it) {
    const auto r = rpclb::call<std::string>(*client, rpclb::to_node(shop->name()), "inventory", "reserve", "apple",
                                            "two");
    BOOST_REQUIRE(r.has_error());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(r.error().message == "argument 2 (qty): expected an integer, got string");
    BOOST_TEST(r.error().details.at("node").as_string() == shop->name());

    const auto count = rpclb::call<std::string>(*client, rpclb::to_node(shop->name()), "inventory", "reserve", "apple");
    BOOST_TEST(count.error().message == "expected 2 arguments (sku, qty), got 1");
}

BOOST_AUTO_TEST_CASE(answer_of_another_type_is_an_error_not_an_exception) {
    const auto r = rpclb::call<int>(*client, rpclb::to_node(shop->name()), "inventory", "reserve", "apple", 2);
    BOOST_REQUIRE(r.has_error());
    BOOST_TEST(r.error().is(rpclb::Failure::bad_reply));
    BOOST_TEST(r.error().message == "answer: expected an integer, got string");
}

BOOST_AUTO_TEST_CASE(reply_names_the_serving_node_of_each_balanced_call) {
    std::set<std::string> served;
    for (int i = 0; i < 4; ++i) {
        const auto r = rpclb::call<rpclb::Reply<std::string>>(*client, rpclb::through("w"), "demo", "node");
        BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
        BOOST_TEST(r->value == r->node);  // demo.node answers with its own name
        served.insert(r->node);
    }
    BOOST_TEST((served == std::set<std::string>{a->name(), b->name()}));
}

BOOST_AUTO_TEST_CASE(async_typed_call_with_callback_and_future) {
    std::promise<rpclb::Result<std::vector<int>>> got;
    rpclb::async_call<std::vector<int>>(*client, rpclb::through("w"), "demo", "echo", 1, 2,
                                        [&got](rpclb::Result<std::vector<int>> r) { got.set_value(std::move(r)); });
    auto f = got.get_future();
    BOOST_REQUIRE(f.wait_for(5s) == std::future_status::ready);
    BOOST_TEST(f.get().value() == (std::vector<int>{1, 2}), boost::test_tools::per_element());

    auto reply = rpclb::async_call<rpclb::Reply<std::string>>(*client, rpclb::to_node(b->name()), "demo", "node",
                                                               asio::use_future);
    BOOST_REQUIRE(reply.wait_for(5s) == std::future_status::ready);
    const auto r = reply.get();
    BOOST_TEST(r->value == b->name());
    BOOST_TEST(r->node == b->name());
}

BOOST_AUTO_TEST_CASE(coroutine_awaits_a_typed_call_inside_co_await) {
    asio::io_context io;
    std::optional<rpclb::Result<rpclb::Reply<std::string>>> out;
    std::optional<rpclb::Result<std::string>> shop_out;
    std::optional<rpclb::CallResult> echo;
    rpclb::CallOptions through_w;
    through_w.load_balancer = "w";
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            // The arguments and the route are temporaries inside the co_await expression.
            out = co_await rpclb::async_call<rpclb::Reply<std::string>>(*client, rpclb::through("w"), "demo", "node",
                                                                       asio::use_awaitable);
            shop_out = co_await rpclb::async_call<std::string>(*client, rpclb::to_node(shop->name()), "inventory",
                                                               "reserve", std::string("pear"), 5, asio::use_awaitable);
            // A JSON call with no node and no braced list inside the co_await.
            echo = co_await client->async_call("demo", "echo", rpclb::arguments(1, "x"), through_w,
                                               asio::use_awaitable);
        },
        asio::detached);
    io.run_for(10s);
    BOOST_REQUIRE(out.has_value());
    BOOST_REQUIRE_MESSAGE(out->has_value(), (*out ? "" : out->error().message));
    BOOST_TEST((*out)->value == (*out)->node);
    BOOST_REQUIRE(shop_out.has_value());
    BOOST_TEST(shop_out->value() == "pear x5");
    BOOST_REQUIRE(echo.has_value());
    BOOST_TEST(boost::json::serialize(echo->value()) == R"([1,"x"])");
}

BOOST_AUTO_TEST_CASE(balanced_async_call_needs_no_node) {
    rpclb::CallOptions through_w;
    through_w.load_balancer = "w";
    auto f = client->async_call("demo", "node", {}, through_w, asio::use_future);
    BOOST_REQUIRE(f.wait_for(5s) == std::future_status::ready);
    const auto r = f.get();
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST((r->as_string() == a->name() || r->as_string() == b->name()));

    auto unrouted = client->async_call("demo", "node", {}, rpclb::CallOptions{}, asio::use_future);
    BOOST_REQUIRE(unrouted.wait_for(5s) == std::future_status::ready);
    const auto e = unrouted.get();
    BOOST_REQUIRE(e.has_error());
    BOOST_TEST(e.error().code == rpclb::ErrorCode::bad_request);
}

BOOST_AUTO_TEST_CASE(wait_for_members_returns_once_there_are_enough) {
    BOOST_TEST(client->wait_for_members("w", 2, 5s).has_value());
    BOOST_TEST(client->wait_for_members("w", 0, 1ms).has_value());
    // An empty group lists no members; it is no error.
    BOOST_TEST(client->groups().members("nobody_here")->nodes.empty());
}

BOOST_AUTO_TEST_CASE(wait_for_members_times_out_naming_the_balancer_and_its_count) {
    const auto start = steady_clock::now();
    const auto r = client->wait_for_members("w", 3, 300ms);
    BOOST_TEST((steady_clock::now() - start >= 300ms));
    BOOST_REQUIRE(r.has_error());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(r.error().is(rpclb::Failure::timeout));
    BOOST_TEST(r.error().message == "balancer \"w\" has 2 of the 3 members waited for after 300 ms");
    BOOST_TEST(r.error().details.at("load_balancer").as_string() == "w");
    BOOST_TEST(r.error().details.at("members").as_int64() == 2);

    const auto empty = client->wait_for_members("nobody_here", 1, 50ms);
    BOOST_TEST(empty.error().message == "balancer \"nobody_here\" has 0 of the 1 members waited for after 50 ms");
}

BOOST_AUTO_TEST_CASE(a_wait_on_a_node_that_reached_no_other_says_so) {
    PortReservation nobody;  // bound and never listening: its dials are refused
    rpclb::ClusterOptions o;
    o.name = "lonely@127.0.0.1";
    o.client = true;
    o.cookie = test_cookie;
    o.seeds = {nobody.address()};
    rpclb::Cluster lonely(o);
    lonely.start();
    const auto r = lonely.wait_for_members("w", 1, 200ms);
    BOOST_REQUIRE(r.has_error());
    BOOST_TEST(r.error().message ==
               "balancer \"w\" has 0 of the 1 members waited for after 200 ms; this node is connected to no "
               "other node (are its seeds listening, with the same cookie?)");
    lonely.stop();
}

BOOST_AUTO_TEST_CASE(async_wait_for_members_completes_when_a_member_joins) {
    auto ready = client->async_wait_for_members("w", 3, 20s, asio::use_future);
    BOOST_TEST((ready.wait_for(100ms) == std::future_status::timeout));  // only a and b so far
    auto c = start_node({.name = "c", .seeds = {a->address()}, .balancers = {"w=round_robin"}});
    BOOST_REQUIRE(ready.wait_for(10s) == std::future_status::ready);
    const auto r = ready.get();
    BOOST_TEST(r.has_value());
    BOOST_TEST(client->groups().members("w")->nodes.size() == 3u);
}

BOOST_AUTO_TEST_CASE(async_wait_for_members_is_cancelled_or_ended_by_stop) {
    asio::io_context io;
    asio::cancellation_signal cancel;
    std::optional<rpclb::Result<void>> cancelled;
    client->async_wait_for_members(
        "w", 5, 20s,
        asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(io, [&](rpclb::Result<void> r) {
                                         cancelled = std::move(r);
                                     })));
    asio::post(io, [&] { cancel.emit(asio::cancellation_type::terminal); });
    io.run_for(5s);
    BOOST_REQUIRE(cancelled.has_value());
    BOOST_TEST(cancelled->error().is(rpclb::Failure::cancelled));

    // The node's own stop tells monitors that every member left (its view empties).
    auto left = std::make_shared<std::mutex>();
    auto left_nodes = std::make_shared<std::set<std::string>>();
    client->groups().monitor("w", [left, left_nodes](const std::string&, rpclb::NodeChange change,
                                                    const std::vector<std::string>& nodes) {
        std::lock_guard lock(*left);
        if (change == rpclb::NodeChange::left) left_nodes->insert(nodes.begin(), nodes.end());
    });
    auto pending = client->async_wait_for_members("w", 5, 60s, asio::use_future);
    client->stop();
    {
        std::lock_guard lock(*left);
        BOOST_TEST((*left_nodes == std::set<std::string>{a->name(), b->name()}));
    }
    BOOST_REQUIRE(pending.wait_for(5s) == std::future_status::ready);
    const auto r = pending.get();
    BOOST_TEST(r.error().is(rpclb::Failure::node_stopping));
    BOOST_TEST(r.error().details.at("load_balancer").as_string() == "w");
}

BOOST_AUTO_TEST_SUITE_END()
