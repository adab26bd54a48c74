// A TLS stream whose records go straight between OpenSSL and the socket (internal).
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <boost/system/error_code.hpp>

#include <openssl/ssl.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// The OpenSSL half of TlsStream, which is not a template: one SSL object whose reads and
/// writes go to the socket through a BIO of ours (recv, and send with MSG_NOSIGNAL: a
/// closed peer gives EPIPE, never SIGPIPE), and the outcome of each call.
///
/// Why not Asio's ssl::stream: its engine runs OpenSSL against a pair of memory BIOs and
/// moves every record through them and through one more asynchronous read or write of the
/// socket, each a trip through the strand. With records read and written by OpenSSL
/// itself on a non-blocking socket, a read costs what a plain read costs plus the
/// decryption (bench/README.md, "TLS on the mesh").
class TlsEngine {
public:
    /// What an attempt needs next.
    enum class Want { nothing, read, write };
    struct Outcome {
        Want want = Want::nothing;
        boost::system::error_code ec;
        std::size_t bytes = 0;
    };

    /// A new SSL object of `context` (which must outlive this), not yet bound to a socket.
    explicit TlsEngine(boost::asio::ssl::context& context);
    ~TlsEngine();
    TlsEngine(const TlsEngine&) = delete;
    TlsEngine& operator=(const TlsEngine&) = delete;

    SSL* native_handle() const noexcept { return ssl_; }

    /// Binds the SSL object to `fd`, a connected socket in non-blocking mode, as the
    /// client or the server of the handshake. Called once, before the handshake.
    void attach(int fd, boost::asio::ssl::stream_base::handshake_type type);

    /// One step of the handshake, of a read into [data, data + size), of a write of
    /// [data, data + size) (all of it, in records of at most 16 KiB; a write that must
    /// wait is retried with the same bytes), or of sending close_notify. Errors are
    /// those of Asio's ssl::stream: the SSL category with the OpenSSL error for a TLS
    /// failure, asio::error::eof after the peer's close_notify, ssl::error::
    /// stream_truncated for a TCP close without it, or the socket's own error.
    Outcome handshake();
    Outcome read(void* data, std::size_t size);
    Outcome write(const void* data, std::size_t size);
    Outcome shutdown();

    struct Socket;  // what the BIO reads and writes: the descriptor, the last errno, EOF seen

private:
    Outcome outcome(int result);

    SSL* ssl_ = nullptr;
    std::unique_ptr<Socket> socket_;
};

/// An asynchronous TLS stream over `Socket` (an Asio stream socket) with the members
/// Beast's websocket::stream and Connection use of beast::ssl_stream: async_handshake,
/// async_read_some, async_write_some, async_shutdown, next_layer(), native_handle().
/// A write of a buffer sequence goes out as one SSL_write of at most 64 KiB (the pieces
/// are copied together first), so a WebSocket frame's header and payload share a record
/// and a system call.
///
/// Thread safety: as the socket: one operation of each kind at a time, all on one strand
/// (a read may wait while a write runs, as OpenSSL allows between calls).
template <class Socket>
class TlsStream {
public:
    using next_layer_type = Socket;
    using lowest_layer_type = Socket;
    using executor_type = typename Socket::executor_type;

    /// An accepted (connected) socket; `context` must outlive the stream.
    TlsStream(Socket socket, boost::asio::ssl::context& context)
        : socket_(std::move(socket)), engine_(std::make_unique<TlsEngine>(context)) {}
    /// A socket still to connect, on `executor`.
    template <class Executor>
    TlsStream(const Executor& executor, boost::asio::ssl::context& context)
        : socket_(executor), engine_(std::make_unique<TlsEngine>(context)) {}

    executor_type get_executor() noexcept { return socket_.get_executor(); }
    Socket& next_layer() noexcept { return socket_; }
    const Socket& next_layer() const noexcept { return socket_; }
    SSL* native_handle() const noexcept { return engine_->native_handle(); }

    /// Runs the TLS handshake on the connected socket; `token`: void(error_code).
    template <class Token>
    auto async_handshake(boost::asio::ssl::stream_base::handshake_type type, Token&& token) {
        boost::system::error_code ec;
        socket_.non_blocking(true, ec);
        if (!ec) engine_->attach(socket_.native_handle(), type);
        return run<void(boost::system::error_code)>(
            [engine = engine_.get(), failed = ec]() mutable {
                if (failed) return TlsEngine::Outcome{TlsEngine::Want::nothing, std::exchange(failed, {}), 0};
                return engine->handshake();
            },
            std::forward<Token>(token));
    }

    /// Reads decrypted bytes into the first non-empty buffer; `token`: void(error_code, size_t).
    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        boost::asio::mutable_buffer target;
        for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
             ++it)
            if (boost::asio::mutable_buffer b(*it); b.size() != 0) {
                target = b;
                break;
            }
        return run<void(boost::system::error_code, std::size_t)>(
            [engine = engine_.get(), target] { return engine->read(target.data(), target.size()); },
            std::forward<Token>(token));
    }

    /// Writes up to 64 KiB of `buffers`; `token`: void(error_code, size_t).
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        boost::asio::const_buffer whole;
        const auto begin = boost::asio::buffer_sequence_begin(buffers);
        const auto end = boost::asio::buffer_sequence_end(buffers);
        if (begin != end && std::next(begin) == end) {
            whole = boost::asio::const_buffer(*begin);
            whole = boost::asio::buffer(whole, max_write);
        } else {
            scratch_.resize(std::min(boost::asio::buffer_size(buffers), max_write));
            whole = boost::asio::buffer(scratch_.data(), boost::asio::buffer_copy(boost::asio::buffer(scratch_), buffers));
        }
        return run<void(boost::system::error_code, std::size_t)>(
            [engine = engine_.get(), whole] { return engine->write(whole.data(), whole.size()); },
            std::forward<Token>(token));
    }

    /// Sends close_notify (without waiting for the peer's); `token`: void(error_code).
    template <class Token>
    auto async_shutdown(Token&& token) {
        return run<void(boost::system::error_code)>([engine = engine_.get()] { return engine->shutdown(); },
                                                    std::forward<Token>(token));
    }

private:
    static constexpr std::size_t max_write = 64 * 1024;

    // One operation: `attempt` until it needs nothing more, waiting on the socket for what
    // it asks. A result found in the initiating call is posted, never run inline (Asio's
    // rule for completion handlers, which Beast's composed operations rely on).
    template <class Attempt>
    struct Operation {
        Socket& socket;
        Attempt attempt;
        bool started = false;
        bool finished = false;
        TlsEngine::Outcome result;

        template <class Self>
        void operator()(Self& self, boost::system::error_code wait_error = {}) {
            if (!finished && wait_error) result = {TlsEngine::Want::nothing, wait_error, 0}, finished = true;
            if (!finished) {
                result = attempt();
                if (result.want != TlsEngine::Want::nothing) {
                    started = true;
                    return socket.async_wait(result.want == TlsEngine::Want::read ? Socket::wait_read
                                                                                  : Socket::wait_write,
                                             std::move(self));
                }
                finished = true;
                if (!started) {
                    started = true;
                    return boost::asio::post(std::move(self));
                }
            }
            complete(self);
        }

        template <class Self>
        void complete(Self& self) {
            if constexpr (requires { self.complete(result.ec, result.bytes); })
                self.complete(result.ec, result.bytes);
            else
                self.complete(result.ec);
        }
    };

    template <class Signature, class Attempt, class Token>
    auto run(Attempt attempt, Token&& token) {
        return boost::asio::async_compose<Token, Signature>(Operation<Attempt>{socket_, std::move(attempt), false, false, {}}, token,
                                                            socket_);
    }

    Socket socket_;
    std::unique_ptr<TlsEngine> engine_;
    std::vector<char> scratch_;  // a gathered write's bytes, kept until it completes
};

/// Beast's WebSocket close on a TlsStream: close_notify, then the TCP teardown of the
/// socket (found by argument-dependent lookup, as Beast's own overload for ssl_stream).
template <class Socket, class Handler>
void async_teardown(boost::beast::role_type role, TlsStream<Socket>& stream, Handler&& handler) {
    stream.async_shutdown([&stream, role, h = std::forward<Handler>(handler)](boost::system::error_code) mutable {
        boost::beast::websocket::async_teardown(role, stream.next_layer(), std::move(h));
    });
}

}  // namespace rpclb::detail
