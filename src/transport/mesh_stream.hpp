// The WebSocket of one mesh connection, over plain TCP or over TLS (internal).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <utility>
#include <variant>

namespace rpclb::detail {

/// One of two concrete WebSocket streams, chosen when the connection is made: plain TCP
/// (no TLS options: the socket itself, no layer in between) or Beast's ssl_stream over
/// the same socket. Connection runs the same code on either
/// through visit(), so each operation is compiled for both types and the only cost added
/// to the plain path is the variant's index test per operation.
///
/// Thread safety: as the stream it holds (one strand).
class MeshStream {
public:
    using Executor = boost::asio::strand<boost::asio::io_context::executor_type>;
    using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor>;
    using TlsLayer = boost::beast::ssl_stream<Socket>;
    using Plain = boost::beast::websocket::stream<Socket>;
    using Tls = boost::beast::websocket::stream<TlsLayer>;

    /// An accepted socket; over TLS when `tls` is not null (the context must outlive this).
    MeshStream(Socket socket, boost::asio::ssl::context* tls)
        : ws_(tls ? Variant(std::in_place_type<Tls>, std::move(socket), *tls)
                  : Variant(std::in_place_type<Plain>, std::move(socket))) {}
    /// A socket still to connect, on `executor`; over TLS when `tls` is not null.
    MeshStream(Executor executor, boost::asio::ssl::context* tls)
        : ws_(tls ? Variant(std::in_place_type<Tls>, executor, *tls) : Variant(std::in_place_type<Plain>, executor)) {}

    /// True over TLS.
    bool tls() const noexcept { return std::holds_alternative<Tls>(ws_); }
    /// The TLS layer; only when tls().
    TlsLayer& tls_layer() { return std::get<Tls>(ws_).next_layer(); }
    /// The TCP socket under every layer.
    Socket& socket() noexcept {
        return std::visit([](auto& ws) -> Socket& { return boost::beast::get_lowest_layer(ws); }, ws_);
    }
    Executor get_executor() noexcept { return socket().get_executor(); }

    /// Runs `f(ws)` on the WebSocket stream, whichever type it is.
    template <class F>
    decltype(auto) visit(F&& f) {
        return std::visit(std::forward<F>(f), ws_);
    }

private:
    using Variant = std::variant<Plain, Tls>;
    Variant ws_;
};

}  // namespace rpclb::detail
