// A connection's write queue keeps the frames being written until their write completes,
// whatever happens to the connection meanwhile (before: a failure freed them under the
// write, and the write's completion popped an empty queue).
#define BOOST_TEST_MODULE write_queue
#include "../../src/transport/write_queue.hpp"
#include "../../src/transport/frame_pool.hpp"

#include <rpclb/detail/wire.hpp>

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::detail::FramePool;
using rpclb::detail::WriteQueue;

BOOST_AUTO_TEST_CASE(a_failure_during_a_write_keeps_the_frames_being_written) {
    WriteQueue q;
    q.push(std::string(1 << 20, 'a'));
    q.push("second");
    BOOST_REQUIRE(q.begin_write(1, 1 << 30) == 1);
    const char* written = q.at(0).data();
    q.fail();  // the connection fails while the write is in progress
    BOOST_TEST(q.queued() == 1u);
    BOOST_TEST(q.at(0).data() == written);  // same bytes, same address
    BOOST_TEST(q.at(0).size() == std::size_t(1 << 20));
    q.push("after the failure");  // dropped
    BOOST_TEST(q.queued() == 1u);
    q.end_write();  // the write's completion, after the failure
    BOOST_TEST(q.queued() == 0u);
    BOOST_TEST(!q.writing());
    BOOST_TEST(q.begin_write(1, 1 << 30) == 0u);
}

BOOST_AUTO_TEST_CASE(frames_queued_during_a_write_wait_for_the_next) {
    WriteQueue q;
    q.push("one");
    BOOST_REQUIRE(q.begin_write(8, 1 << 20) == 1);
    const char* first = q.at(0).data();
    for (int i = 0; i < 100; ++i) q.push(std::string(100, 'x'));  // must not move the first
    BOOST_TEST(q.at(0).data() == first);
    BOOST_TEST(q.begin_write(8, 1 << 20) == 0u);  // one write at a time
    q.end_write();
    BOOST_TEST(q.begin_write(8, 1 << 20) == 8u);  // the next write takes up to 8 frames
    q.end_write();
    BOOST_TEST(q.begin_write(200, 350) == 3u);  // and no more than the byte budget
}

// A live connection that fails while a large answer is being written (the peer stopped
// reading, then vanished): the node stays up and serves others. Run under AddressSanitizer
// by scripts/asan.sh.
BOOST_AUTO_TEST_CASE(a_connection_that_fails_during_a_large_write_leaves_the_node_serving) {
    auto o = rpclb::test::in_process_node_options("a@127.0.0.1");
    // The raw peer reads nothing, so it answers no probe: a long idle timeout keeps the
    // failure detector from dropping its link before the write is under way.
    o.idle_timeout = std::chrono::seconds(30);
    rpclb::Cluster a(o);
    std::atomic<bool> answering{false};
    a.register_function("t", "big", [&answering](const boost::json::array&) -> rpclb::CallResult {
        answering = true;
        return boost::json::value(std::string(12u << 20, 'z'));
    });
    a.register_function("t", "ping", [](const boost::json::array&) -> rpclb::CallResult { return "pong"; });
    a.start();
    const auto port = a.listen_endpoint()->port();
    {
        rpclb::test::RawPeer raw(port);
        BOOST_REQUIRE(!raw.handshake(rpclb::detail::wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, o.cookie));
        const auto sent = a.stats().frames_sent;
        raw.send(rpclb::detail::wire::Request{1, "t", "big", {}, ""});
        // Never read the answer: the node's write of 12 MiB stalls on a full socket buffer.
        // It starts as the handler returns; the frames sent so far show it under way.
        BOOST_REQUIRE(rpclb::test::eventually([&] { return answering.load() && a.stats().frames_sent > sent; }, 5s));
    }  // the raw peer's socket closes under the write
    auto b_options = rpclb::test::in_process_node_options(
        "b@127.0.0.1", {"127.0.0.1:" + std::to_string(port)});
    rpclb::Cluster b(b_options);
    b.start();
    BOOST_REQUIRE(rpclb::test::eventually([&] { return b.connected_nodes().size() == 1; }, 5s));
    auto r = b.call("a@127.0.0.1", "t", "ping");
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r.value().as_string() == "pong");
    BOOST_TEST(rpclb::test::eventually([&] { return a.connected_nodes() == std::vector<std::string>{"b@127.0.0.1"}; }, 5s));
}

// ---- pieces: a large frame in pieces from a real peer (wire::piece_bytes) ------------

namespace {
// The request frame's text cut into pieces of `size` bytes, each followed by its byte.
std::vector<std::string> pieces_of(const std::string& frame, std::size_t size) {
    std::vector<std::string> pieces;
    for (std::size_t at = 0; at < frame.size(); at += size)
        pieces.push_back(frame.substr(at, size) +
                         (at + size >= frame.size() ? rpclb::detail::wire::piece_last : rpclb::detail::wire::piece_more));
    return pieces;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_request_in_pieces_with_frames_between_them_is_joined_and_answered) {
    namespace wire = rpclb::detail::wire;
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.register_function("t", "size", [](const boost::json::array& args) -> rpclb::CallResult {
        return static_cast<std::uint64_t>(args.at(0).as_string().size());
    });
    a.start();
    rpclb::test::RawPeer raw(a.listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, rpclb::test::test_cookie));
    const auto frame = wire::encode(wire::Request{7, "t", "size", {boost::json::string(100000, 'p')}, ""});
    const auto pieces = pieces_of(frame, wire::piece_bytes);
    BOOST_REQUIRE(pieces.size() == 4u);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        BOOST_REQUIRE(raw.send(pieces[i], 5s, true));
        // A frame of its own between two pieces: it is handled, and the pieces still join.
        if (i == 1) BOOST_REQUIRE(raw.send(wire::Request{8, "t", "size", {boost::json::string("abc")}, ""}));
    }
    std::map<std::uint64_t, std::uint64_t> answers;  // request id -> the size it answered
    for (int i = 0; i < 2; ++i) {
        const auto res = raw.read_until([](const boost::json::object& f) { return f.at("t") == "res"; }, 5s);
        BOOST_REQUIRE(res);
        answers[res->at("id").to_number<std::uint64_t>()] = res->at("ok").to_number<std::uint64_t>();
    }
    BOOST_TEST(answers[8] == 3u);
    BOOST_TEST(answers[7] == 100000u);
}

BOOST_AUTO_TEST_CASE(pieces_past_the_read_limit_end_that_link_only) {
    namespace wire = rpclb::detail::wire;
    auto o = rpclb::test::in_process_node_options("a@127.0.0.1");
    o.max_message_size = 256 * 1024;  // a read limit of 1 MiB (the batch size)
    rpclb::Cluster a(o);
    a.register_function("t", "ping", [](const boost::json::array&) -> rpclb::CallResult { return "pong"; });
    a.start();
    const auto port = a.listen_endpoint()->port();
    {
        rpclb::test::RawPeer raw(port);
        BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, rpclb::test::test_cookie));
        const std::string piece = std::string(wire::piece_bytes, 'x') + wire::piece_more;
        // Never a last piece: the node must stop holding them at its limit, not at ours.
        for (int i = 0; i < 64 && raw.send(piece, 5s, true); ++i) {
        }
        BOOST_TEST(raw.wait_closed(5s));
    }
    rpclb::Cluster b(rpclb::test::in_process_node_options("b@127.0.0.1", {"127.0.0.1:" + std::to_string(port)}));
    b.start();
    BOOST_REQUIRE(rpclb::test::eventually([&] { return b.connected_nodes().size() == 1; }, 5s));
    auto r = b.call("a@127.0.0.1", "t", "ping");
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r.value().as_string() == "pong");
}

// ---- FramePool: the buffers of large frames written, for the next frames ------------

BOOST_AUTO_TEST_CASE(frames_written_are_handed_back_one_by_one) {
    WriteQueue q;
    q.push(std::string(100, 'a'));
    q.push(std::string(200, 'b'));
    q.push("third");
    BOOST_REQUIRE(q.begin_write(2, 1 << 30) == 2u);
    std::vector<std::string> spent;
    BOOST_TEST(q.end_write([&](std::string&& f) { spent.push_back(std::move(f)); }) == 300u);
    BOOST_REQUIRE(spent.size() == 2u);
    BOOST_TEST(spent[0] == std::string(100, 'a'));
    BOOST_TEST(spent[1] == std::string(200, 'b'));
    BOOST_TEST(q.queued() == 1u);  // the third was not part of the write
}

BOOST_AUTO_TEST_CASE(a_pool_keeps_large_buffers_only_and_hands_them_back_empty) {
    FramePool pool;
    BOOST_TEST(pool.take().capacity() < FramePool::min_capacity);  // nothing kept yet
    pool.give(std::string(100, 'x'));  // small: not worth keeping
    pool.give(std::string(FramePool::max_capacity + 1, 'x'));  // too large to keep
    BOOST_TEST(pool.size() == 0u);

    std::string big(64 * 1024, 'x');
    const char* memory = big.data();
    pool.give(std::move(big));
    BOOST_TEST(pool.size() == 1u);
    auto again = pool.take();
    BOOST_TEST(again.empty());
    BOOST_TEST(again.data() == memory);  // the same memory, not a copy
    BOOST_TEST(again.capacity() >= 64u * 1024u);
    BOOST_TEST(pool.size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_pool_is_bounded_in_count_and_bytes) {
    FramePool pool;
    for (int i = 0; i < 100; ++i) pool.give(std::string(FramePool::min_capacity, 'x'));
    BOOST_TEST(pool.size() == FramePool::max_spares);
    pool.trim(true);
    BOOST_TEST(pool.size() == 0u);
    for (int i = 0; i < 100; ++i) pool.give(std::string(FramePool::max_capacity, 'x'));
    BOOST_TEST(pool.size() * FramePool::max_capacity <= FramePool::max_bytes);
    BOOST_TEST(pool.size() == FramePool::max_bytes / FramePool::max_capacity);
    pool.trim(true);
    for (int i = 0; i < 10; ++i) pool.give(std::string(FramePool::min_capacity, 'x'), 0);  // a call channel's limit
    BOOST_TEST(pool.size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_pool_frees_its_buffers_after_an_interval_without_use) {
    FramePool pool;
    pool.give(std::string(64 * 1024, 'x'));  // a large frame written in this interval
    pool.give(std::string(64 * 1024, 'y'));
    pool.trim();
    BOOST_TEST(pool.size() == 2u);  // kept: large frames went out since the last trim
    pool.trim();  // a whole interval without one
    BOOST_TEST(pool.size() == 0u);
}

// Small frames are encoded into kept buffers too (their size is not known
// beforehand); that must not count as use, or a link that went back to small calls after
// a burst of large ones would keep its buffers for ever.
BOOST_AUTO_TEST_CASE(small_frames_in_kept_buffers_do_not_keep_them_alive) {
    FramePool pool;
    pool.give(std::string(64 * 1024, 'x'));
    pool.trim();  // the burst's interval
    for (int i = 0; i < 5; ++i) {
        auto buffer = pool.take();
        BOOST_REQUIRE(buffer.capacity() >= 64u * 1024u);
        buffer = "[1,\"abc\"]";  // a small frame, written, handed back
        pool.give(std::move(buffer));
    }
    BOOST_TEST(pool.size() == 1u);
    pool.trim();
    BOOST_TEST(pool.size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_frame_encoded_into_a_kept_buffer_is_the_same_text_in_the_same_memory) {
    rpclb::detail::wire::Request request;
    request.id = 7;
    request.module = "m";
    request.function = "f";
    request.args = boost::json::array{std::string(50 * 1024, 'z'), 1};
    const auto fresh = rpclb::detail::wire::encode(request);
    std::string buffer;
    buffer.reserve(128 * 1024);
    buffer = "left over from the last frame";
    const char* memory = buffer.data();
    const auto reused = rpclb::detail::wire::encode(request, std::move(buffer));
    BOOST_TEST(reused == fresh);
    BOOST_TEST(reused.data() == memory);
}
