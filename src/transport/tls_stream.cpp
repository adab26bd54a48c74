#include "transport/tls_stream.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>

#include <sys/socket.h>

#include <cerrno>
#include <stdexcept>
#include <utility>

namespace rpclb::detail {
namespace asio = boost::asio;

struct TlsEngine::Socket {
    int fd = -1;
    int error = 0;     // errno of the last failed recv or send (other than "try again")
    bool eof = false;  // recv returned 0
};

namespace {

TlsEngine::Socket& state(BIO* bio) { return *static_cast<TlsEngine::Socket*>(BIO_get_data(bio)); }

bool try_again(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

int bio_write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
    auto& s = state(bio);
    BIO_clear_retry_flags(bio);
    const auto n = ::send(s.fd, data, size, MSG_NOSIGNAL);
    if (n >= 0) {
        *written = static_cast<std::size_t>(n);
        return 1;
    }
    if (try_again(errno))
        BIO_set_retry_write(bio);
    else
        s.error = errno;
    return 0;
}

int bio_read(BIO* bio, char* data, std::size_t size, std::size_t* read) {
    auto& s = state(bio);
    BIO_clear_retry_flags(bio);
    const auto n = ::recv(s.fd, data, size, 0);
    if (n > 0) {
        *read = static_cast<std::size_t>(n);
        return 1;
    }
    if (n == 0)
        s.eof = true;
    else if (try_again(errno))
        BIO_set_retry_read(bio);
    else
        s.error = errno;
    return 0;
}

long bio_ctrl(BIO* bio, int command, long, void*) {
    switch (command) {
    case BIO_CTRL_FLUSH:  // every write went to the socket already
        return 1;
    case BIO_CTRL_EOF:
        return state(bio).eof ? 1 : 0;
    default:
        return 0;
    }
}

int bio_create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
}

// The BIO method, made once for the process.
BIO_METHOD* socket_method() {
    static BIO_METHOD* const method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "rpclb socket");
        if (!m || BIO_meth_set_write_ex(m, bio_write) != 1 || BIO_meth_set_read_ex(m, bio_read) != 1 ||
            BIO_meth_set_ctrl(m, bio_ctrl) != 1 || BIO_meth_set_create(m, bio_create) != 1)
            throw std::runtime_error("TLS: cannot create the socket BIO method");
        return m;
    }();
    return method;
}

}  // namespace

TlsEngine::TlsEngine(asio::ssl::context& context)
    : ssl_(SSL_new(context.native_handle())), socket_(std::make_unique<Socket>()) {
    if (!ssl_) throw std::runtime_error("TLS: SSL_new failed");
    // A write that had to wait is retried from the same bytes, which may have moved (a
    // gathered write's copy); Asio's engine sets the same mode. Read-ahead lets one recv
    // bring in every record that has arrived, not a header and then a body.
    SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_read_ahead(ssl_, 1);
}

TlsEngine::~TlsEngine() { SSL_free(ssl_); }

void TlsEngine::attach(int fd, asio::ssl::stream_base::handshake_type type) {
    BIO* bio = BIO_new(socket_method());
    if (!bio) throw std::runtime_error("TLS: BIO_new failed");
    socket_->fd = fd;
    BIO_set_data(bio, socket_.get());
    SSL_set_bio(ssl_, bio, bio);  // one reference, owned by ssl_ from here
    if (type == asio::ssl::stream_base::client)
        SSL_set_connect_state(ssl_);
    else
        SSL_set_accept_state(ssl_);
}

TlsEngine::Outcome TlsEngine::handshake() {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    return r == 1 ? Outcome{} : outcome(r);
}

TlsEngine::Outcome TlsEngine::read(void* data, std::size_t size) {
    if (size == 0) return {};
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_read_ex(ssl_, data, size, &n);
    return r == 1 ? Outcome{Want::nothing, {}, n} : outcome(r);
}

TlsEngine::Outcome TlsEngine::write(const void* data, std::size_t size) {
    if (size == 0) return {};
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_write_ex(ssl_, data, size, &n);
    return r == 1 ? Outcome{Want::nothing, {}, n} : outcome(r);
}

TlsEngine::Outcome TlsEngine::shutdown() {
    ERR_clear_error();
    const int r = SSL_shutdown(ssl_);
    if (r >= 0) return {};  // close_notify sent (0: the peer's is not awaited)
    auto o = outcome(r);
    // Only the sending matters: a shutdown that would wait to read, or one after the
    // peer has gone, has nothing left to do.
    if (o.want == Want::read || o.ec) return {};
    return o;
}

TlsEngine::Outcome TlsEngine::outcome(int result) {
    namespace ssl = asio::ssl;
    switch (SSL_get_error(ssl_, result)) {
    case SSL_ERROR_WANT_READ:
        return {Want::read, {}, 0};
    case SSL_ERROR_WANT_WRITE:
        return {Want::write, {}, 0};
    case SSL_ERROR_ZERO_RETURN:
        return {Want::nothing, asio::error::eof, 0};
    case SSL_ERROR_SYSCALL:
        if (const int e = std::exchange(socket_->error, 0); e != 0)
            return {Want::nothing, boost::system::error_code(e, boost::system::system_category()), 0};
        return {Want::nothing, ssl::error::stream_truncated, 0};
    default: {
        // As Asio's engine: the first error OpenSSL queued, in the SSL category, except a
        // TCP close without close_notify, which is a truncated stream.
        const unsigned long e = ERR_get_error();
        ERR_clear_error();
        if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) return {Want::nothing, ssl::error::stream_truncated, 0};
        if (e == 0) return {Want::nothing, make_error_code(boost::system::errc::protocol_error), 0};
        return {Want::nothing, boost::system::error_code(static_cast<int>(e), asio::error::get_ssl_category()), 0};
    }
    }
}

}  // namespace rpclb::detail
