// The in-place call of a call channel's dialer: the caller's own thread writes the request
// and reads the answer with blocking socket calls (doc/architecture.md, "Call channels").
#include "transport/connection.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/websocket/error.hpp>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>
#include <poll.h>
#include <sys/socket.h>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;

namespace {
// Answers up to this size are read in place once they are whole in the socket.
constexpr std::size_t max_in_place_answer = 64 * 1024;
// The first receive of an answer asks for this much: a usual answer comes whole in it.
constexpr std::size_t first_answer_read = 4096;
}  // namespace

void Connection::call_in_place(std::uint64_t id, std::string frame, Pending pending) {
    // Beast's reads and writes may be used synchronously only while no asynchronous one is
    // in progress; over TLS the socket's bytes are records, not WebSocket frames.
    if (closed_ || going_away() || ws_.tls() || !open_ || !established_ || reading_ || !queue_.idle() ||
        close_reason_ || frame.size() > max_in_place_frame)
        return start_request(id, std::move(frame), std::move(pending));
    const auto deadline = pending.deadline;
    pending_.emplace(id, std::move(pending));
    deadlines_.emplace(deadline, id);
    if (auto why = interruption()) {
        release(frame.size());
        return fail(*why);
    }
    count_written(1);
    beast::error_code ec;
    ws_.visit([&](auto& ws) { ws.write(asio::buffer(frame), ec); });
    release(frame.size());
    if (ec) return fail(write_failure(ec));
    // Look first, or wait first (answer_at_once_): either costs one system call that
    // finds nothing when it guesses wrong.
    bool look_first = answer_at_once_ || (++in_place_calls_ % 8) == 0;
    for (;;) {
        if (!look_first && !wait_readable(deadline)) {
            if (auto why = interruption()) return fail(*why);
            if (Clock::now() < deadline) continue;
            return on_deadline();  // fails the call with `timeout`
        }
        const auto waiting = take_answer();
        if (look_first) answer_at_once_ = waiting == Waiting::frame;
        look_first = false;
        switch (waiting) {
        case Waiting::frame: {
            const auto bytes = ws_.visit([&](auto& ws) { return ws.read(buffer_, ec); });
            if (ec) return fail(ec == ws::error::closed ? std::string(closed_by_peer) : ec.message());
            on_read(bytes);  // completes the call when this is its answer
            if (closed_ || !pending_.contains(id)) return;
            // Another frame (a late answer to an earlier call): on_read started a read, and
            // the io_context carries the call on.
            arm_deadline(deadline);
            return;
        }
        case Waiting::nothing:  // not yet: wait
            continue;
        case Waiting::other:
            arm_deadline(deadline);
            if (!reading_) do_read();
            return;
        }
    }
}

namespace {

// The size of the frame at the start of `head` when it is one whole-message data frame from
// the acceptor: FIN, no RSV bits, opcode 1 or 2, unmasked, then a 7-bit, 16-bit or 64-bit
// length (RFC 6455, section 5.2), of at most max_in_place_answer bytes of payload; nullopt
// for anything else, or when its header is not all there.
std::optional<std::size_t> whole_data_frame(const unsigned char* head, std::size_t have) {
    if (have < 2 || (head[0] & 0xF0) != 0x80 || ((head[0] & 0x0F) != 1 && (head[0] & 0x0F) != 2) || (head[1] & 0x80))
        return std::nullopt;
    std::uint64_t length = head[1] & 0x7F;
    std::size_t header = 2;
    if (length == 126) {
        if (have < 4) return std::nullopt;
        length = (std::uint64_t(head[2]) << 8) | head[3];
        header = 4;
    } else if (length == 127) {
        if (have < 10) return std::nullopt;
        length = 0;
        for (int i = 2; i < 10; ++i) length = (length << 8) | head[i];
        header = 10;
    }
    if (length > max_in_place_answer) return std::nullopt;
    return header + static_cast<std::size_t>(length);
}

}  // namespace

Connection::Waiting Connection::take_answer() {
    auto* socket = ws_.plain_socket();
    if (!socket) return Waiting::other;
    auto& ahead = socket->ahead();
    if (ahead.size() == 0) {
        const auto n = socket->receive_ahead(first_answer_read);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Waiting::nothing : Waiting::other;
        if (n == 0) return Waiting::other;  // the end of the stream, which Beast's read reports
    }
    const auto* head = static_cast<const unsigned char*>(ahead.data().data());
    const auto whole = whole_data_frame(head, ahead.size());
    if (!whole || ahead.size() > *whole) return Waiting::other;  // Beast's reads take it, from ahead() first
    // A larger answer: its rest, exactly, if it is all in the socket by now.
    if (ahead.size() < *whole && socket->receive_ahead(*whole - ahead.size()) <= 0) return Waiting::other;
    return ahead.size() == *whole ? Waiting::frame : Waiting::other;
}

std::string Connection::write_failure(const boost::system::error_code& ec) {
    // A call channel's socket is in non-blocking mode (handle_step): a full buffer fails an
    // in-place write.
    if (ec == asio::error::would_block || ec == asio::error::try_again)
        return "the peer is not reading its call channel (the socket's buffers are full)";
    return "write: " + ec.message();
}

bool Connection::wait_readable(Clock::time_point deadline) {
    const int fd = ws_.socket().native_handle();
    {
        std::lock_guard lock(wait_mutex_);
        if (interrupted_) return false;
        waiting_fd_ = fd;
    }
    int timeout_ms = -1;
    if (deadline != Clock::time_point::max()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, INT_MAX));
    }
    pollfd watch{fd, POLLIN, 0};
    const int ready = ::poll(&watch, 1, timeout_ms);
    std::lock_guard lock(wait_mutex_);
    waiting_fd_ = -1;
    if (interrupted_) return false;
    return ready > 0 || (ready < 0 && errno == EINTR);
}

std::optional<std::string> Connection::interruption() {
    std::lock_guard lock(wait_mutex_);
    return interrupted_;
}

void Connection::interrupt_wait(const std::string& reason) {
    std::lock_guard lock(wait_mutex_);
    if (!interrupted_) interrupted_ = reason;
    // The caller is blocked in poll() on this socket, and it closes the socket only after
    // it has taken this lock again: shutting it down here wakes it, and the socket is its.
    if (waiting_fd_ >= 0) ::shutdown(waiting_fd_, SHUT_RDWR);
}

}  // namespace rpclb::detail
