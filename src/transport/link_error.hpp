// Why a connection between two nodes failed: a typed reason with its own error category
// (internal).
#pragma once

#include <rpclb/error.hpp>

#include <boost/system/error_category.hpp>
#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>
#include <type_traits>

namespace rpclb::detail {

/// Why a connection ended, or why a request never got onto one. Control flow tests these
/// values, never a text. Each has one stable text (link_category().message(), to_string()),
/// which a call that the failure ended carries in `details.reason` (doc/architecture.md
/// "Errors"). Values are stable; 0 is "no link failure".
enum class LinkError : int {
    closed_by_peer = 1,       ///< the peer closed it with a WebSocket close: a clean end
    reset = 2,                ///< it ended without a close: end of stream, reset, broken pipe
    timed_out = 3,            ///< the failure detector found the peer dead or this link broken
    handshake_timed_out = 4,  ///< not established within the handshake timeout
    resolve_failed = 5,       ///< the dialled address did not resolve
    connect_failed = 6,       ///< the TCP connect failed (refused, unreachable)
    handshake_failed = 7,     ///< the cookie handshake failed (version, malformed frame, wrong cookie)
    cookie_refused = 8,       ///< the acceptor refused this node's cookie (cookie_refused_close_reason)
    tls_failed = 9,           ///< the TLS handshake failed, or one side speaks TLS and the other not
    protocol_error = 10,      ///< the peer broke the WebSocket (or HTTP upgrade) protocol
    too_large = 11,           ///< the peer sent a message over the read limit
    peer_not_reading = 12,    ///< an in-place write found the socket's buffers full (call channel)
    io_error = 13,            ///< any other socket error
    refused = 14,             ///< this node, or the peer (refused_close_reason), did not keep it: a duplicate, itself, a name in use, a channel
    stopping = 15,            ///< this node is stopping
    channel_closed = 16,      ///< this node closed the call channel (given up by its pool)
    not_connected = 17,       ///< no open connection (or the peer said bye): the request was not sent
    name_taken = 18,          ///< the node's name is held by an older live incarnation (name_taken_close_reason)
    declared_dead = 19,       ///< this incarnation was declared dead there (declared_dead_close_reason)
};

/// The category of LinkError values; name() is "rpclb.link", message() the value's text.
const boost::system::error_category& link_category() noexcept;
/// Makes `e` an error_code of link_category().
boost::system::error_code make_error_code(LinkError e) noexcept;
/// The stable text of `e` ("closed by peer", "connection lost", ...).
std::string_view to_string(LinkError e) noexcept;

/// The one mapping from the Asio, Beast or OpenSSL error that ended a read, a write or the
/// WebSocket handshake of a connection to its LinkError, so that one failure has one
/// reason whichever operation saw it first: a WebSocket close → closed_by_peer; end of
/// stream, connection reset or aborted, broken pipe, a TLS stream cut short → reset;
/// Beast's idle timeout, ETIMEDOUT, and operation_aborted (what Beast gives the operations
/// after the first once its timeout tore the stream down) → timed_out; a full buffer
/// (EAGAIN) → peer_not_reading; a message or HTTP header over its limit → too_large; other
/// TLS errors → tls_failed; other WebSocket and HTTP errors → protocol_error; anything
/// else → io_error. Resolving and connecting have their own values, given by the code that
/// resolves and connects.
LinkError link_error(const boost::system::error_code& ec) noexcept;

/// Why a connection ended: its kind, for control flow and for the callers whose calls it
/// failed, and, for logs only, the error code and words that say more.
struct LinkClose {
    LinkError kind = LinkError::io_error;
    /// The Asio, Beast or OpenSSL error that ended it, when one did.
    boost::system::error_code ec{};
    /// What failed, for logs ("resolve HOST:PORT", a handshake's complaint); may be empty.
    std::string detail{};

    /// The close of a failed operation: link_error(ec), with `ec` and `detail`.
    static LinkClose from(const boost::system::error_code& ec, std::string detail = {}) {
        return LinkClose{link_error(ec), ec, std::move(detail)};
    }
    /// For logs: `detail` (else the kind's text), then ": " and the error's message when there
    /// is an error ("resolve db:7000: Host not found (authoritative)", "connection lost: End
    /// of file").
    std::string describe() const;
};

/// The outcome of a request sent on a connection (Connection::request, CallChannels::call):
/// the peer's answer or an error, and, when the link failed the request, why. `link` is
/// empty (0) when the outcome came from the peer, the deadline, or a check before sending
/// (too large, overloaded, NaN arguments).
struct RequestOutcome {
    RequestOutcome(CallResult r, LinkError why = {}) : result(std::move(r)), link(why) {}
    RequestOutcome(ErrorMessage e, LinkError why = {}) : result(std::move(e)), link(why) {}

    /// True when the request never left this node (LinkError::not_connected): there was no
    /// open connection, or the peer had said bye. Such a call ran nowhere, so a balancer
    /// may pick again. A request that was queued and then lost its connection is not.
    bool never_sent() const noexcept { return link == LinkError::not_connected; }

    CallResult result;
    LinkError link{};
};

/// The `service_unavailable` "noconnection" error (Failure::no_connection) of a call to
/// `node` that `why` failed; `details.reason` is to_string(why).
ErrorMessage link_failure(LinkError why, std::string_view node, std::string_view module, std::string_view function);

/// The outcome of a call to `node` refused before anything was sent (never_sent() is true
/// of it): link_failure(LinkError::not_connected, ...).
inline RequestOutcome unsent(std::string_view node, std::string_view module, std::string_view function) {
    return {link_failure(LinkError::not_connected, node, module, function), LinkError::not_connected};
}

}  // namespace rpclb::detail

template <>
struct boost::system::is_error_code_enum<rpclb::detail::LinkError> : std::true_type {};
