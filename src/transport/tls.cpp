#include "transport/tls.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <cstdio>
#include <system_error>

namespace rpclb {

std::string_view to_string(TlsVersion version) noexcept { return version == TlsVersion::v1_2 ? "1.2" : "1.3"; }

std::optional<TlsVersion> parse_tls_version(std::string_view text) noexcept {
    if (text == "1.2") return TlsVersion::v1_2;
    if (text == "1.3") return TlsVersion::v1_3;
    return std::nullopt;
}

}  // namespace rpclb

namespace rpclb::detail {
namespace asio = boost::asio;
namespace ssl = asio::ssl;

namespace {

// Thrown inside this file only: the problem of a TLS option.
struct Refusal {
    OptionProblem problem;
};

[[noreturn]] void refuse(const char* field, const std::string& reason) { throw Refusal{{field, reason}}; }

std::string quoted(const std::filesystem::path& file) { return "\"" + file.string() + "\""; }

// OpenSSL's reason for the last failure, and an empty error queue for whoever comes next.
std::string openssl_reason() {
    const auto code = ERR_peek_last_error();
    const char* text = code ? ERR_reason_error_string(code) : nullptr;
    ERR_clear_error();
    return text ? text : "unknown OpenSSL error";
}

// A file OpenSSL is about to read: refused with strerror when it cannot be opened, so that
// a typo reads "No such file or directory" rather than an OpenSSL "system lib". Only a
// regular file (or a link to one) is opened: a FIFO or a device could hold the reload
// for ever.
void readable(const char* field, const std::filesystem::path& file) {
    std::error_code ec;
    const auto status = std::filesystem::status(file, ec);
    if (std::filesystem::is_directory(status)) refuse(field, quoted(file) + " is a directory, not a PEM file");
    if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
        refuse(field, quoted(file) + " is not a regular file (a FIFO, a socket or a device), not a PEM file");
    std::FILE* f = std::fopen(file.c_str(), "rb");
    if (!f) refuse(field, quoted(file) + ": cannot read: " + std::generic_category().message(errno));
    std::fclose(f);
}

// The private key in `file` (PEM, unencrypted).
std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> read_key(const std::filesystem::path& file) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(file.c_str(), "rb"), &BIO_free);
    // An empty passphrase: an encrypted key fails here instead of prompting on the terminal.
    static char empty[] = "";
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
        bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, empty) : nullptr, &EVP_PKEY_free);
    if (!key)
        refuse("tls.key", quoted(file) + " holds no unencrypted PEM private key (OpenSSL: " + openssl_reason() + ")");
    return key;
}

bool is_certificate_alert(int alert) {
    switch (alert) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_CERTIFICATE_REQUIRED:
        return true;
    default:
        return false;
    }
}

// `time` as "2026-12-07 02:03:04 UTC".
std::string utc(const ASN1_TIME* time) {
    std::tm tm{};
    if (ASN1_TIME_to_tm(time, &tm) != 1) return "an unreadable date";
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return text;
}

// Why peers would refuse the certificate of `ctx` (from tls.cert) now: outside its
// validity dates, or, when the node verifies peers, not verifying against its own CA
// bundle (every node of a mesh verifies peers against the same bundle).
std::optional<OptionProblem> certificate_problem(SSL_CTX* ctx, const TlsOptions& o) {
    X509* cert = SSL_CTX_get0_certificate(ctx);
    if (!cert) return std::nullopt;
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0)
        return OptionProblem{"tls.cert", quoted(o.cert) + ": the certificate is not valid before " +
                                             utc(X509_get0_notBefore(cert)) + "; peers refuse it until then"};
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
        return OptionProblem{"tls.cert", quoted(o.cert) + ": the certificate expired on " +
                                             utc(X509_get0_notAfter(cert)) + "; peers refuse it"};
    if (o.ca.empty()) return std::nullopt;
    STACK_OF(X509)* chain = nullptr;
    SSL_CTX_get0_chain_certs(ctx, &chain);
    std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> check(X509_STORE_CTX_new(), &X509_STORE_CTX_free);
    if (!check || X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(ctx), cert, chain) != 1) {
        ERR_clear_error();
        return std::nullopt;
    }
    if (X509_verify_cert(check.get()) == 1) return std::nullopt;
    const auto reason = X509_verify_cert_error_string(X509_STORE_CTX_get_error(check.get()));
    ERR_clear_error();
    return OptionProblem{"tls.cert", quoted(o.cert) + ": the certificate does not verify against tls.ca " +
                                         quoted(o.ca) + " (" + reason + "); peers trusting that bundle refuse it"};
}

// What build_context does with a certificate_problem.
enum class CertificateCheck { refuse, warn, skip };

// The context of `o`, or throws Refusal.
std::shared_ptr<ssl::context> build_context(const TlsOptions& o, CertificateCheck check) {
    if (o.cert.empty()) refuse("tls.cert", "is required when tls.key or tls.ca is set");
    if (o.key.empty()) refuse("tls.key", "is required with tls.cert (the certificate's private key)");
    readable("tls.cert", o.cert);
    readable("tls.key", o.key);
    if (!o.ca.empty()) readable("tls.ca", o.ca);

    ERR_clear_error();
    auto context = std::make_shared<ssl::context>(ssl::context::tls);
    SSL_CTX* ctx = context->native_handle();
    SSL_CTX_set_min_proto_version(ctx, o.min_version == TlsVersion::v1_2 ? TLS1_2_VERSION : TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    // Connections live as long as the nodes: no session is ever resumed, so TLS 1.3
    // servers need not send tickets after each handshake.
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);

    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert.c_str()) != 1)
        refuse("tls.cert", quoted(o.cert) + " holds no PEM certificate (OpenSSL: " + openssl_reason() + ")");
    const auto key = read_key(o.key);
    if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        refuse("tls.key", quoted(o.key) + " does not match the certificate in tls.cert " + quoted(o.cert));
    }
    if (!o.ca.empty()) {
        if (SSL_CTX_load_verify_locations(ctx, o.ca.c_str(), nullptr) != 1)
            refuse("tls.ca", quoted(o.ca) + " holds no PEM CA certificate (OpenSSL: " + openssl_reason() + ")");
        // Both roles: a dialler checks the acceptor, an acceptor demands and checks the
        // dialler's certificate.
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    if (check != CertificateCheck::skip) {
        if (auto problem = certificate_problem(ctx, o)) {
            if (check == CertificateCheck::refuse) throw Refusal{std::move(*problem)};
            RPCLB_LOG("mesh", warning) << problem->message();
        }
    }
    return context;
}

}  // namespace

std::shared_ptr<ssl::context> make_tls_context(const TlsOptions& options) {
    try {
        return build_context(options, CertificateCheck::warn);
    } catch (const Refusal& r) {
        throw std::invalid_argument(r.problem.message());
    }
}

TlsCredentials::TlsCredentials(TlsOptions options)
    : options_(std::move(options)), context_(make_tls_context(options_)) {}

std::shared_ptr<ssl::context> TlsCredentials::current() const {
    std::lock_guard lock(mutex_);
    return context_;
}

std::optional<OptionProblem> TlsCredentials::reload() {
    std::shared_ptr<ssl::context> fresh;
    try {
        fresh = build_context(options_, CertificateCheck::refuse);
    } catch (const Refusal& r) {
        return r.problem;
    }
    std::lock_guard lock(mutex_);
    context_.swap(fresh);
    return std::nullopt;  // the old context goes with `fresh`, or with its last connection
}

std::optional<OptionProblem> check_tls(const TlsOptions& options) {
    if (!options.enabled() && options.key.empty() && options.ca.empty()) return std::nullopt;
    try {
        build_context(options, CertificateCheck::skip);
    } catch (const Refusal& r) {
        return r.problem;
    }
    return std::nullopt;
}

void prepare_tls_dial(SSL* ssl, const std::string& host) {
    boost::system::error_code ec;
    const bool ip = (asio::ip::make_address(host, ec), !ec);
    auto* param = SSL_get0_param(ssl);
    if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());  // IP subjectAltName (RFC 5280)
    } else {
        SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI only carries names (RFC 6066)
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
    // Without a CA the context does not verify, and these checks are not made.
}

std::string describe_tls_failure(const boost::system::error_code& ec, const SSL* ssl, Role role) {
    if (ssl) {
        if (const auto verdict = SSL_get_verify_result(ssl); verdict != X509_V_OK)
            return std::string("the peer's certificate was refused: ") + X509_verify_cert_error_string(verdict);
    }
    if (ec == ssl::error::stream_truncated || ec == asio::error::eof || ec == asio::error::connection_reset)
        // A TLS 1.3 acceptor answers a ClientHello before it sees the dialler's
        // certificate, so a dialler's handshake ended by a close means a peer that did not
        // answer in TLS at all.
        return role == Role::dialer
                   ? "peer is not speaking TLS: it closed the connection without answering the TLS handshake "
                     "(" + ec.message() + "); is it a node without TLS?"
                   : "the peer closed the connection during the TLS handshake (" + ec.message() +
                         "); it may have refused this node's certificate";
    if (ec.category() == asio::error::get_ssl_category()) {
        const auto code = static_cast<unsigned long>(ec.value());
        const int reason = ERR_GET_REASON(code);
        const char* text = ERR_reason_error_string(code);
        const std::string what = text ? text : ec.message();
        switch (reason) {
        case SSL_R_HTTP_REQUEST:
        case SSL_R_HTTPS_PROXY_REQUEST:
        case SSL_R_WRONG_VERSION_NUMBER:
        case SSL_R_PACKET_LENGTH_TOO_LONG:
        case SSL_R_UNKNOWN_PROTOCOL:
            return role == Role::acceptor ? "plaintext peer: it did not start a TLS handshake (OpenSSL: " + what +
                                                "); is it a node without TLS?"
                                          : "peer is not speaking TLS (OpenSSL: " + what +
                                                "); is it a node without TLS?";
        default:
            break;
        }
        if (reason > SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
            const bool certificate = is_certificate_alert(reason - SSL_AD_REASON_OFFSET);
            return "the peer refused the handshake with the alert \"" + what + "\"" +
                   (certificate ? " (it did not accept this node's certificate)" : "");
        }
        return what;
    }
    return ec.message();
}

}  // namespace rpclb::detail
