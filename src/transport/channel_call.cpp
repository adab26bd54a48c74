// The in-place call of a call channel's dialer: the caller's own thread writes the request
// and reads the answer with blocking socket calls (doc/architecture.md, "Call channels").
#include "transport/connection.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>

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
    bool look_first = answer_at_once_.worth_trying();
    for (;;) {
        if (!look_first && !wait_readable(deadline)) {
            if (auto why = interruption()) return fail(*why);
            if (Clock::now() < deadline) continue;
            return on_deadline();  // fails the call with `timeout`
        }
        const auto waiting = take_frame();
        if (look_first) answer_at_once_.learn(waiting == Waiting::frame);
        look_first = false;
        switch (waiting) {
        case Waiting::frame: {
            const auto bytes = ws_.visit([&](auto& ws) { return ws.read(buffer_, ec); });
            if (ec) return fail(LinkClose::from(ec));
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

std::optional<LinkClose> Connection::interruption() {
    std::lock_guard lock(wait_mutex_);
    return interrupted_;
}

void Connection::interrupt_wait(const LinkClose& reason) {
    std::lock_guard lock(wait_mutex_);
    if (!interrupted_) interrupted_ = reason;
    // The caller is blocked in poll() on this socket, and it closes the socket only after
    // it has taken this lock again: shutting it down here wakes it, and the socket is its.
    if (waiting_fd_ >= 0) ::shutdown(waiting_fd_, SHUT_RDWR);
}

}  // namespace rpclb::detail
