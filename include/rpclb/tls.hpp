// TLS on the mesh: the options of ClusterOptions::tls.
#pragma once

#include <rpclb/detail/option_problem.hpp>

#include <filesystem>
#include <optional>
#include <string_view>

namespace rpclb {

/// The oldest TLS version a node accepts on its mesh connections.
enum class TlsVersion {
    v1_2,  ///< TLS 1.2 (RFC 5246) or newer: only for peers that cannot do 1.3
    v1_3,  ///< TLS 1.3 (RFC 8446) only: the default
};

/// "1.2" or "1.3". Thread safety: pure function.
std::string_view to_string(TlsVersion version) noexcept;

/// The TlsVersion written `text` ("1.2", "1.3"); nullopt for anything else.
/// Thread safety: pure function.
std::optional<TlsVersion> parse_tls_version(std::string_view text) noexcept;

/// TLS for every mesh connection of a node (listener and dials), over OpenSSL.
///
/// TLS is on when `cert` is set, and then every peer must speak TLS: a TLS node and a
/// plaintext node refuse each other (each logs why). The cookie handshake still runs,
/// inside TLS. With `ca` set, TLS is mutual: each side checks that the other's
/// certificate chains to `ca`, and the dialling side also checks that the certificate
/// names the host it dialled (the HOST of the HOST:PORT seed or advertised address: an
/// IP address must be an IP subjectAltName, a host name a DNS one). Without `ca` the
/// traffic is encrypted but nobody's certificate is checked.
///
/// The files are read when the Cluster is constructed (Cluster's constructor throws
/// std::invalid_argument naming the field, `tls.cert` ...): a missing or unreadable file,
/// a file that is not PEM, a key that does not match the certificate, `key` or `ca`
/// without `cert`, `cert` without `key`. detail::check_tls gives the same verdict without
/// building a node. Cluster::reload_tls() reads the same paths again while the node runs,
/// for the connections made from then on (certificate and CA rotation).
///
/// Thread safety: a plain value.
struct TlsOptions {
    /// PEM file: this node's certificate, optionally followed by intermediate CA
    /// certificates (leaf first). Empty: TLS off (the default).
    std::filesystem::path cert;
    /// PEM file: the private key of `cert`, unencrypted. Required with `cert`.
    std::filesystem::path key;
    /// PEM file: the CA certificate(s) that peers' certificates must chain to. Empty: no
    /// peer verification (encryption only). Requires `cert`.
    std::filesystem::path ca;
    /// The oldest TLS version accepted. Default TlsVersion::v1_3. Ignored while TLS is off.
    TlsVersion min_version = TlsVersion::v1_3;

    /// True when TLS is on (`cert` is set).
    bool enabled() const noexcept { return !cert.empty(); }
};

}  // namespace rpclb

namespace rpclb::detail {

/// The first problem of the TLS options, or nullopt when TLS is off or its files load:
/// reads `cert`, `key` and `ca` with OpenSSL exactly as the Cluster constructor does.
/// Problems, each naming its field (`tls.cert`, `tls.key`, `tls.ca`): `key` or `ca` set
/// without `cert`; `cert` without `key`; a file that cannot be read (its strerror); a
/// file without a PEM certificate or key (OpenSSL's reason); a key that does not match
/// the certificate. `min_version` needs no check (an enum). Not a pure function (reads
/// files); thread safety: safe from any thread.
std::optional<OptionProblem> check_tls(const TlsOptions& options);

}  // namespace rpclb::detail
