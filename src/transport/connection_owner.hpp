// What a connection tells the node that owns it, and where a connection is in its life
// (internal).
#pragma once

#include "transport/link_error.hpp"

#include <rpclb/detail/wire.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace rpclb::detail {

class Connection;

/// What a connection tells the node that owns it. Every method runs on the
/// connection's strand.
class ConnectionOwner {
public:
    virtual ~ConnectionOwner() = default;
    /// The cookie handshake succeeded; the connection may now carry traffic.
    virtual void on_established(const std::shared_ptr<Connection>& connection) = 0;
    /// A decoded frame other than a handshake frame or a Response.
    virtual void on_frame(const std::shared_ptr<Connection>& connection, wire::Frame&& frame) = 0;
    /// The connection is closed, for `reason` (its kind for decisions, describe() for
    /// logs); `established` tells whether on_established ran. Runs before the requests
    /// still pending on it fail, so that what the owner does about the loss (the mesh takes
    /// the peer out of every balancer) is done before any caller learns of it.
    virtual void on_closed(const std::shared_ptr<Connection>& connection, const LinkClose& reason,
                           bool established) = 0;
    /// A frame the codec refused (already answered when it was a request).
    virtual void on_bad_frame(const std::shared_ptr<Connection>& connection,
                              const wire::DecodeError& error) = 0;
    /// The handshake failed (wrong cookie, version, protocol).
    virtual void on_handshake_failed(const std::shared_ptr<Connection>& connection,
                                     const std::string& reason) = 0;
    /// The TLS handshake failed, or the peer's use of TLS differs from this node's (a
    /// TLS node and a plaintext node); `reason` says which. Runs just before on_closed.
    virtual void on_tls_failed(const std::shared_ptr<Connection>& connection, const std::string& reason) = 0;
    /// This side dialled, sent its proof, and the acceptor refused it explicitly (its
    /// close carried cookie_refused_close_reason): the cookies differ. Runs instead of
    /// on_handshake_failed, just before on_closed.
    virtual void on_cookie_refused(const std::shared_ptr<Connection>& connection) = 0;
    /// The peer sent a message over max_handshake_message before the cookie handshake was
    /// done; the connection closes next (on_closed follows).
    virtual void on_oversize_before_handshake(const std::shared_ptr<Connection>&) {}
    /// The peer closed this connection because an older live incarnation of this node's
    /// name holds it there (name_taken_close_reason). Runs just before on_closed.
    virtual void on_name_taken(const std::shared_ptr<Connection>&) {}
    /// The peer closed this connection because it declared this node's incarnation dead
    /// (declared_dead_close_reason). Runs just before on_closed.
    virtual void on_declared_dead(const std::shared_ptr<Connection>&) {}
    /// The peer answered probe `seq` (Connection::probe). On the connection's strand.
    virtual void on_probe_answered(const std::shared_ptr<Connection>&, std::uint64_t /*seq*/) {}
};

/// Where a connection is in its life. Each state follows the one before it, except that
/// any state may go to `closed`, and `handshaking` may go straight to `saying_bye`.
enum class LinkState : std::uint8_t {
    connecting,   ///< dialling or accepting: TCP, TLS, the WebSocket upgrade
    handshaking,  ///< the WebSocket is open; the cookie handshake runs
    open,         ///< established: calls, casts and membership frames flow
    saying_bye,   ///< close() ran: what is queued goes out, then the WebSocket close
    closed,       ///< ended; pending calls have failed
};

}  // namespace rpclb::detail
