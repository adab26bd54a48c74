// Large frames in pieces, without sockets: the write queue cuts a data frame into pieces
// and lets control frames pass between them; the read buffer joins the pieces, bounded,
// and refuses a piece stream that breaks the rules.
#define BOOST_TEST_MODULE pieces
#include "../../src/transport/piece_buffer.hpp"
#include "../../src/transport/write_queue.hpp"

#include <rpclb/detail/wire.hpp>

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using rpclb::detail::PieceBuffer;
using rpclb::detail::WriteQueue;
namespace wire = rpclb::detail::wire;

namespace {

constexpr std::size_t piece = 10;  // a small piece size, so that frames of a few dozen bytes go in pieces

// One message as a read delivers it: appended to the buffer as Beast does (prepare, commit).
std::string read_into(PieceBuffer& in, std::string_view message, bool allowed = true) {
    auto room = in.prepare(message.size());
    std::memcpy(room.data(), message.data(), message.size());
    in.commit(message.size());
    return in.on_message(allowed);
}

// What the next write of `q` puts on the wire as one message (a batch of frames joined by
// the separator, or a piece and its byte), and ends the write.
std::string write_one(WriteQueue& q, std::size_t max_frames = 8) {
    const auto count = q.begin_write(max_frames, 1 << 20);
    BOOST_REQUIRE(count > 0);
    std::string message;
    if (q.piece()) {
        message = std::string(q.piece_text()) + q.piece_trailer();
    } else {
        for (std::size_t i = 0; i < count; ++i) message += (i ? "\n" : "") + q.at(i);
    }
    q.end_write();
    return message;
}

std::string frame(char c, std::size_t n) { return "{" + std::string(n - 2, c) + "}"; }

}  // namespace

BOOST_AUTO_TEST_SUITE(pieces)

BOOST_AUTO_TEST_CASE(a_large_frame_goes_in_pieces_that_join_into_the_same_frame) {
    WriteQueue q;
    q.set_pieces(piece);
    const auto big = frame('a', 35);
    q.push(big);
    const char* start = nullptr;
    PieceBuffer in(1000);
    std::vector<std::string> messages;
    while (!q.idle()) {
        BOOST_REQUIRE(q.begin_write(8, 1 << 20) == 1u);
        BOOST_REQUIRE(q.piece());
        if (!start) start = q.piece_text().data();
        // A piece views the queued frame: its bytes are not copied.
        BOOST_TEST(q.piece_text().data() == start + messages.size() * piece);
        messages.push_back(std::string(q.piece_text()) + q.piece_trailer());
        q.end_write();
    }
    BOOST_TEST(messages.size() == 4u);  // 10 + 10 + 10 + 5
    for (std::size_t i = 0; i < messages.size(); ++i) {
        BOOST_TEST(messages[i].back() == (i + 1 < messages.size() ? wire::piece_more : wire::piece_last));
        BOOST_TEST(read_into(in, messages[i]) == "");
        BOOST_TEST((in.kind() == (i + 1 < messages.size() ? PieceBuffer::Kind::piece : PieceBuffer::Kind::joined)));
        if (in.kind() == PieceBuffer::Kind::joined) BOOST_TEST(in.joined() == big);
        in.done();
    }
    BOOST_TEST(in.held() == 0u);
    BOOST_TEST(in.size() == 0u);
}

BOOST_AUTO_TEST_CASE(control_frames_pass_between_two_pieces_and_the_frame_still_joins) {
    WriteQueue q;
    q.set_pieces(piece);
    const auto big = frame('a', 30);
    q.push(big);
    const auto first = write_one(q);  // the first piece is on its way
    q.push_control("{\"t\":\"probe\"}");
    q.push_control("{\"t\":\"member\"}");
    const auto control = write_one(q);  // both control frames, before the second piece
    BOOST_TEST(control == "{\"t\":\"probe\"}\n{\"t\":\"member\"}");
    const auto second = write_one(q);
    const auto third = write_one(q);
    BOOST_TEST(q.idle());

    PieceBuffer in(1000);
    BOOST_TEST(read_into(in, first) == "");
    in.done();
    BOOST_TEST(read_into(in, control) == "");
    BOOST_TEST((in.kind() == PieceBuffer::Kind::message));
    BOOST_TEST(in.message() == control);  // the control frames, not the piece before them
    BOOST_TEST(in.held() == piece);
    in.done();
    BOOST_TEST(read_into(in, second) == "");
    in.done();
    BOOST_TEST(read_into(in, third) == "");
    BOOST_TEST((in.kind() == PieceBuffer::Kind::joined));
    BOOST_TEST(in.joined() == big);
}

BOOST_AUTO_TEST_CASE(data_frames_keep_their_order_behind_a_frame_in_pieces) {
    WriteQueue q;
    q.set_pieces(piece);
    q.push(frame('a', 25));
    q.push("{1}");
    q.push("{2}");
    BOOST_TEST(write_one(q).back() == wire::piece_more);
    BOOST_TEST(write_one(q).back() == wire::piece_more);
    BOOST_TEST(write_one(q).back() == wire::piece_last);
    BOOST_TEST(write_one(q) == "{1}\n{2}");
    BOOST_TEST(q.idle());
}

BOOST_AUTO_TEST_CASE(a_control_frame_waits_for_small_data_frames_queued_before_it_only) {
    WriteQueue q;
    q.set_pieces(piece);
    q.push("{ready}");          // the handshake's last frame, say
    q.push_control("{sync}");  // queued after it: must not pass it
    q.push("{answer}");        // queued after the control frame: passed by it
    BOOST_TEST(write_one(q) == "{ready}");
    BOOST_TEST(write_one(q) == "{sync}");
    BOOST_TEST(write_one(q) == "{answer}");
}

BOOST_AUTO_TEST_CASE(a_data_write_is_no_longer_than_a_piece_when_pieces_are_on) {
    WriteQueue q;
    q.set_pieces(piece);
    for (int i = 0; i < 4; ++i) q.push("{abcd}");  // 6 bytes each
    BOOST_TEST(q.begin_write(8, 1 << 20) == 1u);   // 6 + 1 + 6 > 10
    q.end_write();
}

BOOST_AUTO_TEST_CASE(with_pieces_off_control_frames_are_data_frames) {
    WriteQueue q;
    q.push(frame('a', 25));
    q.push_control("{probe}");
    BOOST_TEST(q.begin_write(8, 1 << 20) == 2u);  // one batch, in order, the large frame whole
    BOOST_TEST(!q.piece());
    BOOST_TEST(q.at(0).size() == 25u);
    BOOST_TEST(q.at(1) == "{probe}");
}

BOOST_AUTO_TEST_CASE(a_failure_between_pieces_drops_the_frame_once_its_write_ends) {
    WriteQueue q;
    q.set_pieces(piece);
    q.push(frame('a', 25));
    BOOST_REQUIRE(q.begin_write(8, 1 << 20) == 1u);
    const char* written = q.piece_text().data();
    q.fail();
    BOOST_TEST(q.piece_text().data() == written);  // the write's bytes stay where they are
    BOOST_TEST(q.end_write() == 25u);             // then the whole frame goes
    BOOST_TEST(q.queued() == 0u);
    BOOST_TEST(q.begin_write(8, 1 << 20) == 0u);
}

BOOST_AUTO_TEST_CASE(pieces_over_the_limit_are_a_protocol_error) {
    PieceBuffer in(25);
    BOOST_TEST(read_into(in, std::string(20, 'a') + wire::piece_more) == "");
    in.done();
    const auto error = read_into(in, std::string(10, 'a') + wire::piece_more);
    BOOST_TEST(error.find("over 25 bytes") != std::string::npos, error);
}

BOOST_AUTO_TEST_CASE(a_last_piece_with_none_before_it_is_a_protocol_error) {
    PieceBuffer in(100);
    const auto error = read_into(in, std::string(1, wire::piece_last));
    BOOST_TEST(error.find("no piece") != std::string::npos, error);
}

BOOST_AUTO_TEST_CASE(before_the_handshake_a_piece_is_just_a_message) {
    PieceBuffer in(100);
    const std::string message = std::string("{x}") + wire::piece_more;
    BOOST_TEST(read_into(in, message, false) == "");
    BOOST_TEST((in.kind() == PieceBuffer::Kind::message));
    BOOST_TEST(in.message() == message);
}

BOOST_AUTO_TEST_CASE(the_memory_of_a_large_frame_goes_once_small_messages_follow) {
    PieceBuffer in(1 << 20);
    BOOST_TEST(read_into(in, std::string(100000, 'a') + wire::piece_last) == "");
    in.done();
    BOOST_TEST(in.capacity() >= 100000u);
    BOOST_TEST(read_into(in, "{small}") == "");
    in.done();
    BOOST_TEST(in.capacity() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
