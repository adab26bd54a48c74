// TLS for mesh connections (internal): the OpenSSL context built from TlsOptions, the
// per-dial settings, and the reasons logged when a TLS handshake fails.
#pragma once

#include <rpclb/detail/handshake.hpp>
#include <rpclb/tls.hpp>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <stdexcept>
#include <string>

namespace rpclb::detail {

/// The context every TLS connection of a node shares: certificate and key, the CA to
/// verify peers with (mutual: a peer without a certificate is refused), the oldest
/// version. Throws std::invalid_argument whose what() is an OptionProblem's message
/// ("tls.cert ...") for the problems TlsOptions lists. `options.enabled()` must hold.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const TlsOptions& options);

/// Prepares `ssl` (a dialling connection's, before its handshake) for `host`, the HOST of
/// the HOST:PORT dialled (split_host_port: an IPv6 address without its brackets): SNI for
/// a host name, and the name or address the peer's certificate must carry when the
/// context verifies peers.
void prepare_tls_dial(SSL* ssl, const std::string& host);

/// Why a TLS handshake failed, for the log: the certificate check that refused the peer
/// (read from `ssl`, which may be null), a peer that is not speaking TLS, an alert from
/// the peer, or `ec`'s own message.
std::string describe_tls_failure(const boost::system::error_code& ec, const SSL* ssl, Role role);

}  // namespace rpclb::detail
