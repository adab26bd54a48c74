// TLS for mesh connections (internal): the OpenSSL context built from TlsOptions, the
// per-dial settings, and the reasons logged when a TLS handshake fails.
#pragma once

#include <rpclb/detail/handshake.hpp>
#include <rpclb/tls.hpp>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace rpclb::detail {

/// The context every TLS connection of a node shares: certificate and key, the CA to
/// verify peers with (mutual: a peer without a certificate is refused), the oldest
/// version. Throws std::invalid_argument whose what() is an OptionProblem's message
/// ("tls.cert ...") for the problems TlsOptions lists. `options.enabled()` must hold.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const TlsOptions& options);

/// A node's TLS credentials: the context each new connection takes (current()), and its
/// replacement by one built again from the same files (reload()). A connection keeps the
/// context it took for as long as it lives (its streams refer to it), so a reload never
/// touches an established link; the old context goes with the last connection made on it.
///
/// Thread safety: any thread (a short lock around the pointer; files are read outside it).
class TlsCredentials {
public:
    /// Loads `options`' files; throws std::invalid_argument as make_tls_context. A
    /// certificate outside its validity dates, or not verifying against tls.ca, is
    /// logged as a warning only.
    explicit TlsCredentials(TlsOptions options);

    /// The context for a connection being made now.
    std::shared_ptr<boost::asio::ssl::context> current() const;

    /// Builds a context from the files again and, when they load whole, makes it current;
    /// otherwise the current one stays and the problem (naming its field) is returned. A
    /// certificate outside its validity dates, or not verifying against tls.ca, is such a
    /// problem here.
    std::optional<OptionProblem> reload();

private:
    const TlsOptions options_;
    mutable std::mutex mutex_;
    std::shared_ptr<boost::asio::ssl::context> context_;
};

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
