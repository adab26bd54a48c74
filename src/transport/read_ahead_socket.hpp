// A TCP socket with a read-ahead buffer under a plain WebSocket (internal).
#pragma once

#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <cerrno>
#include <cstddef>
#include <optional>
#include <utility>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace rpclb::detail {

/// The TCP socket under a plain WebSocket stream, with a buffer in front of its reads.
/// What receive_ahead() takes from the socket goes into that buffer, and the stream above
/// reads it from there before it reads the socket again (Beast's buffered_read_stream
/// does the same as a layer of its own; this one is the socket itself, so that an empty
/// buffer costs one size test and no composed operation). Used by a call channel's caller
/// (doc/architecture.md, "Call channels"): one `recv` takes the answer, and Beast's
/// blocking read then parses it from the buffer, where a peek and a read took two system
/// calls.
///
/// Everything else is the socket's own: writes, connect, close, `native_handle`.
/// Thread safety: as the socket (one thread at a time).
template <class Executor>
class ReadAheadSocket : public boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor> {
public:
    using Base = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor>;

    explicit ReadAheadSocket(const Executor& executor) : Base(executor) {}
    explicit ReadAheadSocket(Base&& socket) : Base(std::move(socket)) {}

    ReadAheadSocket(const ReadAheadSocket&) = delete;
    ReadAheadSocket& operator=(const ReadAheadSocket&) = delete;
    ReadAheadSocket(ReadAheadSocket&& other) noexcept
        : Base(std::move(other)),
          ahead_(std::move(other.ahead_)),
          detached_(std::exchange(other.detached_, -1)),
          protocol_(other.protocol_) {}
    ReadAheadSocket& operator=(ReadAheadSocket&&) = delete;
    ~ReadAheadSocket() {
        if (detached_ >= 0) ::close(detached_);
    }

    /// The bytes received ahead and not yet read by the stream above.
    boost::beast::flat_buffer& ahead() noexcept { return ahead_; }

    /// Takes the socket out of its io_context's reactor (epoll), keeping its descriptor:
    /// while one thread does all the I/O with blocking calls (a worker staying on a call
    /// channel, doc/architecture.md "Call channels"), data that comes then does not also
    /// wake a network thread. Reads and writes through this class keep working on the
    /// descriptor; the socket's own other operations (close, async operations) must wait
    /// for attach(). One epoll_ctl. No effect when already detached.
    void detach(boost::system::error_code& ec) {
        if (detached_ >= 0) return;
        if (!protocol_) protocol_ = Base::local_endpoint(ec).protocol();
        if (ec) return;
        detached_ = Base::release(ec);
        if (ec) detached_ = -1;
    }
    /// Puts a detached socket back in its reactor, in the non-blocking mode call channels
    /// use: an epoll_ctl and an ioctl. No effect when not detached.
    void attach(boost::system::error_code& ec) {
        if (detached_ < 0) return;
        const int fd = std::exchange(detached_, -1);
        Base::assign(*protocol_, fd, ec);
        if (ec) {
            ::close(fd);
            return;
        }
        Base::non_blocking(true, ec);
    }
    bool detached() const noexcept { return detached_ >= 0; }
    /// The descriptor, attached or not.
    int descriptor() noexcept { return detached_ >= 0 ? detached_ : this->native_handle(); }

    /// As the socket's (the form Beast's blocking writes use); on a detached socket one
    /// non-blocking sendmsg (EAGAIN: would_block).
    template <class ConstBuffers>
    std::size_t write_some(const ConstBuffers& buffers, boost::system::error_code& ec) {
        if (detached_ < 0) return Base::write_some(buffers, ec);
        std::array<iovec, 16> parts{};
        std::size_t count = 0;
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers) && count < parts.size(); ++it) {
            const boost::asio::const_buffer b(*it);
            if (b.size() == 0) continue;
            parts[count++] = iovec{const_cast<void*>(b.data()), b.size()};
        }
        msghdr message{};
        message.msg_iov = parts.data();
        message.msg_iovlen = count;
        const auto n = ::sendmsg(detached_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
        return finish_call(n, ec);
    }
    /// The throwing form: Beast's SyncStream check requires it.
    template <class ConstBuffers>
    std::size_t write_some(const ConstBuffers& buffers) {
        boost::system::error_code ec;
        return or_throw(write_some(buffers, ec), ec);
    }

    /// One non-blocking `recv` of at most `max` bytes, appended to ahead(). Returns what
    /// recv(2) returned: the bytes taken, 0 at the end of the stream, -1 with `errno` set
    /// (EAGAIN: nothing there).
    long receive_ahead(std::size_t max) {
        auto space = ahead_.prepare(max);
        const auto n = ::recv(descriptor(), space.data(), space.size(), MSG_DONTWAIT);
        if (n > 0) ahead_.commit(static_cast<std::size_t>(n));
        return static_cast<long>(n);
    }

    /// As the socket's (the form Beast's blocking reads use), but from ahead() first.
    template <class MutableBuffers>
    std::size_t read_some(const MutableBuffers& buffers, boost::system::error_code& ec) {
        if (ahead_.size() > 0) {
            ec = {};
            return take_ahead(buffers);
        }
        if (detached_ < 0) return Base::read_some(buffers, ec);
        const boost::asio::mutable_buffer first = *boost::asio::buffer_sequence_begin(buffers);
        const auto n = ::recv(detached_, first.data(), first.size(), MSG_DONTWAIT);
        if (n == 0 && first.size() > 0) {
            ec = boost::asio::error::eof;
            return 0;
        }
        return finish_call(n, ec);
    }

    /// The throwing form: Beast's SyncStream check requires it.
    template <class MutableBuffers>
    std::size_t read_some(const MutableBuffers& buffers) {
        boost::system::error_code ec;
        return or_throw(read_some(buffers, ec), ec);
    }

    /// As the socket's, but completes from ahead() (through the executor, never inline)
    /// while it holds bytes. Takes completion handlers only (Beast's operations pass those).
    template <class MutableBuffers, class ReadHandler>
    void async_read_some(const MutableBuffers& buffers, ReadHandler&& handler) {
        if (ahead_.size() == 0) return Base::async_read_some(buffers, std::forward<ReadHandler>(handler));
        const auto n = take_ahead(buffers);
        boost::asio::post(this->get_executor(), boost::beast::bind_front_handler(std::forward<ReadHandler>(handler),
                                                                                 boost::system::error_code(), n));
    }

private:
    template <class MutableBuffers>
    std::size_t take_ahead(const MutableBuffers& buffers) {
        const auto n = boost::asio::buffer_copy(buffers, ahead_.data());
        ahead_.consume(n);
        return n;
    }

    static std::size_t or_throw(std::size_t n, const boost::system::error_code& ec) {
        if (ec) throw boost::system::system_error(ec);
        return n;
    }

    static std::size_t finish_call(long n, boost::system::error_code& ec) {
        if (n >= 0) {
            ec = {};
            return static_cast<std::size_t>(n);
        }
        ec = (errno == EAGAIN || errno == EWOULDBLOCK) ? make_error_code(boost::asio::error::would_block)
                                                       : boost::system::error_code(errno, boost::system::system_category());
        return 0;
    }

    boost::beast::flat_buffer ahead_;
    int detached_ = -1;  // the descriptor while detached (detach), else -1
    std::optional<boost::asio::ip::tcp> protocol_;  // for attach; read once
};

// Beast closes a WebSocket's next layer through these (found by argument-dependent lookup);
// the bytes still ahead are of no use once the stream closes.
template <class Executor>
void teardown(boost::beast::role_type role, ReadAheadSocket<Executor>& socket, boost::system::error_code& ec) {
    boost::beast::websocket::teardown(role, static_cast<typename ReadAheadSocket<Executor>::Base&>(socket), ec);
}

template <class Executor, class TeardownHandler>
void async_teardown(boost::beast::role_type role, ReadAheadSocket<Executor>& socket, TeardownHandler&& handler) {
    boost::beast::websocket::async_teardown(role, static_cast<typename ReadAheadSocket<Executor>::Base&>(socket),
                                            std::forward<TeardownHandler>(handler));
}

}  // namespace rpclb::detail
