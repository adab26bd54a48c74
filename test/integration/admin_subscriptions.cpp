// Telemetry subscriptions of the admin protocol on an in-process node with a real admin
// socket: the filter, the bounded queue (a subscriber that doesn't read costs dropped
// events, counted, never a blocked emitter), unsubscribe.
#define BOOST_TEST_MODULE admin_subscriptions
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"

#include <rpclb/admin.hpp>
#include <rpclb/telemetry.hpp>

using namespace std::chrono_literals;
using namespace rpclb::test;
namespace json = boost::json;

namespace {

// One started in-process node with an admin listener whose subscriptions hold 4 events.
struct AdminNode {
    AdminNode() : cluster(in_process_node_options("a@127.0.0.1")) {
        cluster.start();
        admin = std::make_unique<rpclb::AdminServer>(cluster, rpclb::AdminOptions{.listen = "127.0.0.1:0",
                                                                                   .token = admin_token,
                                                                                   .max_subscribers = 2,
                                                                                   .subscriber_queue = 4});
        admin->start();
        address = "127.0.0.1:" + std::to_string(admin->endpoint()->port());
    }
    ~AdminNode() {
        admin->stop();
        cluster.stop();
    }

    void emit_joins(int count, std::string_view group) {
        for (int i = 0; i < count; ++i)
            cluster.telemetry().emit({.name = rpclb::EventName::membership_join, .node = "x@h", .group = group});
    }

    rpclb::Cluster cluster;
    std::unique_ptr<rpclb::AdminServer> admin;
    std::string address;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(admin_subscriptions)

BOOST_FIXTURE_TEST_CASE(filtered_events_reach_the_subscriber, AdminNode) {
    AdminSocket ws(address, admin_token);
    const auto answer = ws.ask(R"({"id":1,"cmd":"subscribe","filter":{"events":["membership.*"]}})");
    const auto sub = answer.at("result").at("subscription");
    cluster.telemetry().emit({.name = rpclb::EventName::plugin_loaded, .algorithm = "random"});  // filtered out
    emit_joins(1, "g");
    const auto m = ws.receive();
    BOOST_TEST(m.at("sub") == sub);
    BOOST_TEST(m.at("event").at("event") == "membership.join");
    BOOST_TEST(m.at("event").at("group") == "g");
    BOOST_TEST(admin->stats().subscribers == 1u);

    BOOST_TEST(ws.ask(R"({"id":2,"cmd":"unsubscribe","subscription":)" + json::serialize(sub) + "}").contains("result"));
    BOOST_TEST(admin->stats().subscribers == 0u);
    BOOST_TEST(error_code_of(ws.ask(R"({"id":3,"cmd":"unsubscribe","subscription":)" + json::serialize(sub) + "}")) ==
               "not_found");
}

BOOST_FIXTURE_TEST_CASE(slow_subscriber_costs_dropped_events_not_a_blocked_emitter, AdminNode) {
    AdminSocket ws(address, admin_token);
    BOOST_TEST_REQUIRE(ws.ask(R"({"id":1,"cmd":"subscribe","filter":{"events":["membership.join"]}})").contains("result"));
    // Nobody reads while 200000 events are emitted: the emitter goes on at full speed and
    // the subscription keeps at most 4 of them (plus what the socket took) and counts the rest.
    const auto start = std::chrono::steady_clock::now();
    emit_joins(200000, "g");
    const bool quick = std::chrono::steady_clock::now() - start < 20s;
    BOOST_TEST(quick, "emitting was held up by the subscriber");
    BOOST_TEST(admin->stats().events_dropped > 0u);

    // Reading on, the subscriber sees `dropped` notes with the running total, up to the
    // final count.
    const auto dropped = admin->stats().events_dropped;
    std::uint64_t events = 0;
    std::uint64_t noted = 0;
    while (noted != dropped) {
        const auto m = ws.receive();
        if (m.contains("event")) {
            ++events;
        } else if (m.contains("dropped")) {
            const auto total = m.at("dropped").to_number<std::uint64_t>();
            BOOST_TEST_REQUIRE(total > noted);
            BOOST_TEST_REQUIRE(total <= dropped);
            noted = total;
        }
    }
    BOOST_TEST(events + dropped <= 200000u);
    BOOST_TEST(http_get(address, "/metrics").body.find("rpclb_admin_events_dropped_total " + std::to_string(dropped)) !=
               std::string::npos);

    // The subscription still delivers new events once the reader keeps up.
    emit_joins(1, "after");
    for (;;) {
        const auto m = ws.receive();
        if (m.contains("event") && m.at("event").at("group") == "after") break;
    }
}

BOOST_FIXTURE_TEST_CASE(subscriptions_end_with_their_connection, AdminNode) {
    {
        AdminSocket ws(address, admin_token);
        BOOST_TEST_REQUIRE(ws.ask(R"({"id":1,"cmd":"subscribe"})").contains("result"));
        BOOST_TEST_REQUIRE(ws.ask(R"({"id":2,"cmd":"subscribe"})").contains("result"));
        BOOST_TEST(error_code_of(ws.ask(R"({"id":3,"cmd":"subscribe"})")) == "too_many_subscribers");
        BOOST_TEST(admin->stats().subscribers == 2u);
    }
    BOOST_TEST(eventually([&] { return admin->stats().subscribers == 0u; }, 5s));
    emit_joins(10, "g");  // no listener left to feed
    BOOST_TEST(cluster.telemetry().listener_count() == 1u);  // the admin's Metrics only
}

BOOST_AUTO_TEST_SUITE_END()
