#include "transport/link_open.hpp"

#include "transport/tls.hpp"

#include <rpclb/detail/host_port.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>

#include <array>
#include <memory>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

std::optional<OpenFailure> failed(const error_code& ec, std::string what) {
    return OpenFailure{LinkClose::from(ec, std::move(what)), std::nullopt};
}
std::optional<OpenFailure> tls_failed(std::string problem) {
    return OpenFailure{{LinkError::tls_failed, {}, "TLS handshake: " + problem}, std::move(problem)};
}

void accept_websocket(MeshStream& ws, asio::const_buffer first_bytes, OpenDone done) {
    ws.visit([&](auto& s) {
        s.async_accept(first_bytes, [done = std::move(done)](error_code ec) {
            done(ec ? failed(ec, "websocket accept") : std::nullopt);
        });
    });
}

void dial_websocket(MeshStream& ws, const std::string& target, OpenDone done) {
    ws.visit([&](auto& s) {
        s.async_handshake(target, "/rpclb", [&ws, done = std::move(done)](error_code ec) {
            if (!ec) return done(std::nullopt);
            // In TLS 1.3 the acceptor checks this side's certificate after this side's
            // handshake has completed: its refusal arrives here, as an alert.
            if (ws.tls() && ec.category() == asio::error::get_ssl_category())
                return done(tls_failed(describe_tls_failure(ec, ws.tls_layer().native_handle(), Role::dialer)));
            if (ws.tls() && ec == asio::ssl::error::stream_truncated)
                return done(tls_failed("the peer closed the connection right after the TLS handshake (" +
                                       ec.message() + "); it may have refused this node's certificate"));
            // A TLS acceptor closes on a plaintext upgrade without answering it.
            if (!ws.tls() && link_error(ec) == LinkError::reset)
                return done(tls_failed("the peer closed the connection without answering the WebSocket upgrade "
                                       "(websocket handshake: " + ec.message() +
                                       "); is it a TLS node? This node is plaintext (no tls.cert)"));
            done(failed(ec, "websocket handshake"));
        });
    });
}

void on_connected(MeshStream& ws, const std::string& target, const std::string& host, OpenDone done) {
    error_code ignored;
    ws.socket().set_option(tcp::no_delay(true), ignored);
    if (!ws.tls()) return dial_websocket(ws, target, std::move(done));
    prepare_tls_dial(ws.tls_layer().native_handle(), host);
    ws.tls_layer().async_handshake(asio::ssl::stream_base::client,
                                   [&ws, target, done = std::move(done)](error_code ec) mutable {
                                       if (!ec) return dial_websocket(ws, target, std::move(done));
                                       done(tls_failed(describe_tls_failure(ec, ws.tls_layer().native_handle(),
                                                                            Role::dialer)));
                                   });
}

}  // namespace

void open_accepted(MeshStream& ws, OpenDone done) {
    error_code ignored;
    ws.socket().set_option(tcp::no_delay(true), ignored);
    if (ws.tls()) {
        ws.tls_layer().async_handshake(asio::ssl::stream_base::server, [&ws, done = std::move(done)](error_code ec) {
            if (ec) return done(tls_failed(describe_tls_failure(ec, ws.tls_layer().native_handle(), Role::acceptor)));
            accept_websocket(ws, {}, std::move(done));
        });
        return;
    }
    // Whatever the peer sent first: a TLS record starts with its content type, 22 for a
    // handshake (RFC 8446 section 5.1), where a WebSocket upgrade starts with "GET".
    auto first = std::make_shared<std::array<char, 512>>();
    ws.socket().async_read_some(asio::buffer(*first), [&ws, first, done = std::move(done)](error_code ec,
                                                                                            std::size_t n) {
        if (ec) return done(failed(ec, "websocket accept"));
        if ((*first)[0] == 22) return done(tls_failed("the peer speaks TLS and this node is plaintext (no tls.cert)"));
        // Beast copies the bytes handed to the accept before it returns.
        accept_websocket(ws, asio::buffer(first->data(), n), std::move(done));
    });
}

void open_dialled(MeshStream& ws, const std::string& target, OpenDone done) {
    // Mesh checked the seed (seed_problem); a gossiped address is a peer's own listen
    // address, written by to_host_port.
    auto parts = split_host_port(target).value_or(HostPort{target, ""});
    // A numeric address needs no resolver (whose first use starts a thread).
    error_code numeric;
    const auto address = asio::ip::make_address(parts.host, numeric);
    if (const auto port = parse_port(parts.port); !numeric && port) {
        const std::array endpoints{tcp::endpoint(address, *port)};
        asio::async_connect(ws.socket(), endpoints,
                            [&ws, target, host = parts.host, done = std::move(done)](error_code ec, const tcp::endpoint&) {
                                if (ec) return done(OpenFailure{{LinkError::connect_failed, ec, "connect " + target}, {}});
                                on_connected(ws, target, host, std::move(done));
                            });
        return;
    }
    auto resolver = std::make_shared<tcp::resolver>(ws.get_executor());
    resolver->async_resolve(
        parts.host, parts.port,
        [&ws, resolver, target, host = parts.host, done = std::move(done)](error_code ec,
                                                                            tcp::resolver::results_type results) {
            if (ec) return done(OpenFailure{{LinkError::resolve_failed, ec, "resolve " + target}, {}});
            asio::async_connect(ws.socket(), results,
                                [&ws, target, host, done](error_code ec, const tcp::endpoint&) {
                                    if (ec) return done(OpenFailure{{LinkError::connect_failed, ec, "connect " + target}, {}});
                                    on_connected(ws, target, host, done);
                                });
        });
}

}  // namespace rpclb::detail
