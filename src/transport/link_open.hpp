// Opening a link's WebSocket in either role: TCP, TLS, the upgrade (internal).
#pragma once

#include "transport/link_error.hpp"
#include "transport/mesh_stream.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace rpclb::detail {

/// How opening a link failed: the close to report and, when TLS is to blame (its
/// handshake failed, or one side speaks TLS and the other does not), the words that say how.
struct OpenFailure {
    LinkClose close;
    std::optional<std::string> tls_problem;
};
/// Called once, on the stream's strand: nullopt when the WebSocket is open.
using OpenDone = std::function<void(std::optional<OpenFailure>)>;

/// Acceptor: over TLS, the TLS handshake; over plain TCP, a look at the first bytes, since
/// a TLS ClientHello there means the peer speaks TLS and this node does not; then the
/// WebSocket accept. `ws` must outlive the operation (`done` keeps its owner alive). Runs
/// on the stream's strand.
void open_accepted(MeshStream& ws, OpenDone done);

/// Dialer: resolves `target` ("host:port"; a numeric address needs no resolver), connects,
/// then the TLS handshake (the host as server name) and the WebSocket upgrade. Nothing here
/// bounds the time: the caller's handshake timer closes the socket. As open_accepted.
void open_dialled(MeshStream& ws, const std::string& target, OpenDone done);

/// Sets up a link's WebSocket before it opens: binary messages, at most
/// max_handshake_message bytes read per message (raised once the cookie handshake is
/// done), `handshake_timeout` for the opening and closing handshakes, no idle timeout and
/// no keep-alive pings (the mesh's failure detector probes the peer).
void configure_stream(MeshStream& ws, std::chrono::milliseconds handshake_timeout);
/// Sets up an accepted call channel once established: a short close handshake, and a
/// non-blocking socket, so that a worker's lent write (StreamLoan) never waits.
void configure_call_channel(MeshStream& ws);

/// Why a read on an open WebSocket failed with `ec`. A close from the peer whose reason
/// is name_taken_close_reason is LinkError::name_taken; one with refused_close_reason is
/// LinkError::refused; one with cookie_refused_close_reason
/// is LinkError::cookie_refused when `awaiting_cookie_answer` (this dialer sent its proof
/// and waits for the acceptor's word).
LinkClose read_failure(MeshStream& ws, const boost::system::error_code& ec, bool awaiting_cookie_answer);

}  // namespace rpclb::detail
