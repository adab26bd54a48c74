// A TCP socket with a read-ahead buffer under a plain WebSocket (internal).
#pragma once

#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <boost/system/error_code.hpp>

#include <cerrno>
#include <cstddef>
#include <utility>
#include <sys/socket.h>

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

    /// The bytes received ahead and not yet read by the stream above.
    boost::beast::flat_buffer& ahead() noexcept { return ahead_; }

    /// One non-blocking `recv` of at most `max` bytes, appended to ahead(). Returns what
    /// recv(2) returned: the bytes taken, 0 at the end of the stream, -1 with `errno` set
    /// (EAGAIN: nothing there).
    long receive_ahead(std::size_t max) {
        auto space = ahead_.prepare(max);
        const auto n = ::recv(this->native_handle(), space.data(), space.size(), MSG_DONTWAIT);
        if (n > 0) ahead_.commit(static_cast<std::size_t>(n));
        return static_cast<long>(n);
    }

    /// As the socket's (the form Beast's blocking reads use), but from ahead() first.
    template <class MutableBuffers>
    std::size_t read_some(const MutableBuffers& buffers, boost::system::error_code& ec) {
        if (ahead_.size() == 0) return Base::read_some(buffers, ec);
        ec = {};
        return take_ahead(buffers);
    }

    /// The throwing form: Beast's SyncStream check requires it.
    template <class MutableBuffers>
    std::size_t read_some(const MutableBuffers& buffers) {
        if (ahead_.size() == 0) return Base::read_some(buffers);
        return take_ahead(buffers);
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

    boost::beast::flat_buffer ahead_;
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
