#include "transport/link_error.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/websocket/error.hpp>

namespace rpclb::detail {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;

class LinkCategory final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "rpclb.link"; }
    std::string message(int value) const override {
        const auto text = to_string(static_cast<LinkError>(value));
        return text.empty() ? "unknown link error " + std::to_string(value) : std::string(text);
    }
};

}  // namespace

const boost::system::error_category& link_category() noexcept {
    static const LinkCategory category;
    return category;
}

boost::system::error_code make_error_code(LinkError e) noexcept { return {static_cast<int>(e), link_category()}; }

std::string_view to_string(LinkError e) noexcept {
    switch (e) {
        case LinkError::closed_by_peer: return "closed by peer";
        case LinkError::reset: return "connection lost";
        case LinkError::timed_out: return "no answer to probes (the peer is unresponsive)";
        case LinkError::handshake_timed_out: return "handshake timed out";
        case LinkError::resolve_failed: return "cannot resolve the address";
        case LinkError::connect_failed: return "cannot connect";
        case LinkError::handshake_failed: return "handshake failed";
        case LinkError::cookie_refused: return "cookie refused";
        case LinkError::tls_failed: return "TLS failed";
        case LinkError::protocol_error: return "WebSocket protocol error";
        case LinkError::too_large: return "message over the size limit";
        case LinkError::peer_not_reading: return "the peer is not reading (the socket's buffers are full)";
        case LinkError::io_error: return "socket error";
        case LinkError::refused: return "closed by this node (a duplicate or unwanted connection)";
        case LinkError::stopping: return "this node is stopping";
        case LinkError::channel_closed: return "call channel closed by this node";
        case LinkError::not_connected: return "not connected";
        case LinkError::name_taken: return "name held by another live incarnation";
        case LinkError::declared_dead: return "incarnation declared dead";
    }
    return {};
}

LinkError link_error(const boost::system::error_code& ec) noexcept {
    namespace ws = beast::websocket;
    namespace http = beast::http;
    if (ec == ws::error::closed) return LinkError::closed_by_peer;
    if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::connection_aborted ||
        ec == asio::error::broken_pipe || ec == asio::error::not_connected || ec == asio::error::shut_down ||
        ec == http::error::end_of_stream || ec == asio::ssl::error::stream_truncated)
        return LinkError::reset;
    // Beast tears a stream down itself only when a timeout fires, and hands
    // beast::error::timeout to the first operation that completes after; the others
    // complete with operation_aborted. A connection closing on its own never gets that
    // far (Connection::fail marks it closed first and ignores what completes after).
    if (ec == beast::error::timeout || ec == asio::error::timed_out || ec == asio::error::operation_aborted)
        return LinkError::timed_out;
    if (ec == asio::error::would_block || ec == asio::error::try_again) return LinkError::peer_not_reading;
    if (ec == ws::error::message_too_big || ec == ws::error::buffer_overflow || ec == http::error::buffer_overflow ||
        ec == http::error::header_limit || ec == http::error::body_limit)
        return LinkError::too_large;
    if (ec.category() == asio::error::get_ssl_category() || ec.category() == asio::ssl::error::get_stream_category())
        return LinkError::tls_failed;
    if (ec.category() == make_error_code(ws::error::closed).category() ||
        ec.category() == make_error_code(http::error::end_of_stream).category())
        return LinkError::protocol_error;
    return LinkError::io_error;
}

std::string LinkClose::describe() const {
    std::string text = detail.empty() ? std::string(to_string(kind)) : detail;
    if (ec) text += ": " + ec.message();
    return text;
}

ErrorMessage link_failure(LinkError why, std::string_view node, std::string_view module, std::string_view function) {
    auto error = call_failure(Failure::no_connection, node, module, function);
    error.details["reason"] = to_string(why);
    return error;
}

}  // namespace rpclb::detail
