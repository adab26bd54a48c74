// Coalescing: frames that queue up behind a write go out together in one WebSocket
// message, only towards a peer whose handshake said it reads batches; a reader handles
// every frame of a message.
#define BOOST_TEST_MODULE batching
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
namespace wire = rpclb::detail::wire;

namespace {

wire::Hello hello(bool batch) {
    return wire::Hello{wire::protocol_version, {"a@h", "inc", "127.0.0.1:1", false}, std::string(64, 'a'), batch};
}

// Two in-process nodes: `server` answers t.echo inline, `client` calls it.
struct Pair {
    Pair(std::size_t client_batch, std::size_t server_batch) {
        auto so = rpclb::test::in_process_node_options("server@127.0.0.1");
        so.max_batch_frames = server_batch;
        server = std::make_unique<rpclb::Cluster>(so);
        server->register_function(
            "t", "echo", [](const boost::json::array& a) -> rpclb::CallResult { return a; }, {.run_inline = true});
        server->start();
        auto co = rpclb::test::in_process_node_options(
            "client@127.0.0.1", {"127.0.0.1:" + std::to_string(server->listen_endpoint()->port())});
        co.max_batch_frames = client_batch;
        client = std::make_unique<rpclb::Cluster>(co);
        client->start();
        // Both sides: the client's calls need its own end established, which may come a
        // little after the server's.
        BOOST_REQUIRE(eventually(
            [&] { return server->connected_nodes().size() == 1 && client->connected_nodes().size() == 1; }, 5s));
    }

    // Sends `n` calls while the client's only network thread is held, so that every
    // request queues behind the first write; returns how many answered correctly.
    int burst(int n) {
        std::latch release(1);
        std::promise<void> holding;
        boost::asio::post(client->network_executor(), [&] {
            holding.set_value();
            release.wait();
        });
        holding.get_future().wait();
        std::atomic<int> good{0};
        std::atomic<int> done{0};
        for (int i = 0; i < n; ++i) {
            client->async_call("server@127.0.0.1", "t", "echo", {i}, rpclb::CallOptions{},
                               [&good, &done, i](rpclb::CallResult r) {
                                   if (r && r.value() == boost::json::array{i}) good.fetch_add(1);
                                   done.fetch_add(1);
                               });
        }
        release.count_down();
        BOOST_REQUIRE(eventually([&] { return done.load() == n; }, 10s));
        return good.load();
    }

    std::unique_ptr<rpclb::Cluster> server;
    std::unique_ptr<rpclb::Cluster> client;
};

}  // namespace

BOOST_AUTO_TEST_CASE(hello_says_batch_only_when_set) {
    const auto with = wire::encode(hello(true));
    const auto without = wire::encode(hello(false));
    BOOST_TEST(with.find("\"batch\":true") != std::string::npos);
    BOOST_TEST(without.find("batch") == std::string::npos);  // unchanged for older peers
    BOOST_TEST(std::get<wire::Hello>(wire::decode(with, 1 << 20).value()).batch);
    BOOST_TEST(!std::get<wire::Hello>(wire::decode(without, 1 << 20).value()).batch);
    auto bad = with;
    bad.replace(bad.find("true"), 4, "\"yes\"");
    BOOST_TEST(!wire::decode(bad, 1 << 20).has_value());
}

BOOST_AUTO_TEST_CASE(each_handshake_side_learns_whether_its_peer_reads_batches) {
    using rpclb::detail::Handshake;
    using rpclb::detail::Role;
    Handshake dialer(Role::dialer, {"d@h", "i1", "", false}, "cookie", true);
    Handshake acceptor(Role::acceptor, {"a@h", "i2", "127.0.0.1:1", false}, "cookie", false);
    auto step = dialer.start();
    acceptor.start();
    BOOST_REQUIRE_EQUAL(step.send.size(), 1u);
    BOOST_TEST(std::get<wire::Hello>(step.send[0]).batch);
    auto answer = acceptor.on_frame(step.send[0]);
    BOOST_TEST(acceptor.peer_batch());
    BOOST_REQUIRE(!answer.send.empty());
    BOOST_TEST(!std::get<wire::Hello>(answer.send[0]).batch);
    dialer.on_frame(answer.send[0]);
    BOOST_TEST(!dialer.peer_batch());
}

BOOST_AUTO_TEST_CASE(frames_queued_behind_a_write_share_messages) {
    Pair p(64, 64);
    const auto before = p.client->stats();
    BOOST_TEST(p.burst(256) == 256);
    const auto after = p.client->stats();
    const auto frames = after.frames_sent - before.frames_sent;
    const auto messages = after.messages_sent - before.messages_sent;
    BOOST_TEST(frames >= 256u);
    // The first request goes alone; the other 255 queued behind it go 64 to a message.
    BOOST_TEST(messages <= frames - 200);
}

BOOST_AUTO_TEST_CASE(a_peer_that_does_not_read_batches_gets_one_frame_per_message) {
    Pair p(1, 64);  // the client neither sends nor reads batches
    const auto server_before = p.server->stats();
    BOOST_TEST(p.burst(256) == 256);
    const auto client = p.client->stats();
    const auto server = p.server->stats();
    BOOST_TEST(client.frames_sent == client.messages_sent);
    BOOST_TEST(server.frames_sent - server_before.frames_sent == server.messages_sent - server_before.messages_sent);
}

BOOST_AUTO_TEST_CASE(max_batch_frames_is_checked) {
    auto o = rpclb::test::in_process_node_options("x@127.0.0.1");
    o.max_batch_frames = 0;
    BOOST_CHECK_THROW(rpclb::Cluster{o}, std::invalid_argument);
    o.max_batch_frames = 1025;
    BOOST_CHECK_THROW(rpclb::Cluster{o}, std::invalid_argument);
}

// The server handles every request of a message before it writes: the answers of inline
// handlers to one message of requests go out as one message. Before, the first answer
// went out alone, as soon as it was queued, and the others behind it: two messages each.
BOOST_AUTO_TEST_CASE(the_answers_to_one_message_of_requests_go_out_together) {
    Pair p(64, 64);
    const auto client_before = p.client->stats();
    const auto server_before = p.server->stats();
    BOOST_TEST(p.burst(256) == 256);
    const auto client = p.client->stats();
    const auto server = p.server->stats();
    const auto request_messages = client.messages_sent - client_before.messages_sent;
    const auto answer_frames = server.frames_sent - server_before.frames_sent;
    const auto answer_messages = server.messages_sent - server_before.messages_sent;
    BOOST_TEST(answer_frames >= 256u);
    BOOST_TEST(request_messages <= 8u);  // 256 requests, 64 to a message
    BOOST_TEST(answer_messages <= request_messages);
}
