#include "transport/link_open.hpp"

#include "transport/link_settings.hpp"
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
    // Mesh checked a seed (dial_problem); a gossiped address is a peer's own listen
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

void configure_stream(MeshStream& ws, std::chrono::milliseconds handshake_timeout) {
    beast::websocket::stream_base::timeout t{};
    t.handshake_timeout = handshake_timeout;
    // No idle timeout and no pings: the mesh's failure detector watches the peer
    // (membership/failure_detector.hpp), one probe per member per interval for the whole
    // node instead of a timer per connection.
    t.idle_timeout = beast::websocket::stream_base::none();
    t.keep_alive_pings = false;
    ws.visit([&](auto& s) {
        // Until the cookie handshake is done a peer may be anyone who can reach the port:
        // Beast refuses a message over the handshake's own size from its frame header,
        // before reading its payload.
        s.read_message_max(max_handshake_message);
        // Binary frames: the payload is JSON text, but a string that is not valid UTF-8 must
        // cost one call (bad_request), not the whole connection, which Beast would close on a
        // text frame.
        s.binary(true);
        // A message goes out in frames of the write buffer's size (128 KiB), so control
        // frames (a close) can go out in between them; a 64 KiB call still goes out as one
        // frame, in one system call (at 64 KiB its last bytes made a second frame and a
        // second write on each side: bench/README.md, "Large payloads").
        s.auto_fragment(true);
        // A dialer also masks what it sends through this buffer: one system call per
        // 128 KiB instead of per 4 KiB (Beast's default) for a big message or a batch.
        s.write_buffer_bytes(128 * 1024);
        s.set_option(t);
    });
}

void configure_call_channel(MeshStream& ws) {
    // The dialer reads only while one of its calls waits, so a close waits briefly for its
    // answer (Beast times the close handshake with handshake_timeout).
    beast::websocket::stream_base::timeout t{};
    t.handshake_timeout = std::chrono::milliseconds(100);
    t.idle_timeout = beast::websocket::stream_base::none();
    ws.visit([&](auto& s) { s.set_option(t); });
    // Asio's asynchronous operations behave the same in either mode.
    error_code ignored;
    ws.socket().non_blocking(true, ignored);
}

LinkClose read_failure(MeshStream& ws, const error_code& ec, bool awaiting_cookie_answer) {
    auto reason = LinkClose::from(ec);
    if (reason.kind != LinkError::closed_by_peer) return reason;
    const auto why = ws.visit([](auto& s) { return s.reason(); });
    const std::string_view text(why.reason.data(), why.reason.size());
    if (why.code == beast::websocket::close_code::normal && text == refused_close_reason)
        reason.kind = LinkError::refused;
    if (why.code != beast::websocket::close_code::policy_error) return reason;
    if (text == cookie_refused_close_reason && awaiting_cookie_answer) reason.kind = LinkError::cookie_refused;
    if (text == name_taken_close_reason) reason.kind = LinkError::name_taken;
    if (text == declared_dead_close_reason) reason.kind = LinkError::declared_dead;
    return reason;
}

}  // namespace rpclb::detail
