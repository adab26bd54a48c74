// The TLS record work of one round trip, with nothing else: OpenSSL alone, in one
// process, through a BIO pair (bench/README.md, "TLS on the mesh").
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

namespace bench {

/// Microseconds per round trip of OpenSSL's record work alone: the client encrypts a
/// `record_bytes` request (SSL_write), the server decrypts it (SSL_read), encrypts an
/// answer of the same size, and the client decrypts it. Both SSL objects come from
/// `context` (the mesh's own, rpclb::detail::make_tls_context, so the same settings as
/// rpc_roundtrip's TLS stack) and talk through an in-memory BIO pair: no socket, event
/// loop or thread is involved. The least mean of `blocks` blocks of `per_block` round
/// trips. Throws std::runtime_error when OpenSSL fails.
inline double tls_record_work_us(SSL_CTX* context, std::size_t record_bytes = 64, int blocks = 5,
                                 int per_block = 20000) {
    const std::unique_ptr<SSL, decltype(&SSL_free)> client_ssl(SSL_new(context), SSL_free),
        server_ssl(SSL_new(context), SSL_free);
    SSL* client = client_ssl.get();
    SSL* server = server_ssl.get();
    if (!client || !server) throw std::runtime_error("tls_record_work_us: SSL_new failed");
    BIO *client_bio = nullptr, *server_bio = nullptr;
    BIO_new_bio_pair(&client_bio, 1 << 16, &server_bio, 1 << 16);
    SSL_set_bio(client, client_bio, client_bio);
    SSL_set_bio(server, server_bio, server_bio);
    SSL_set_connect_state(client);
    SSL_set_accept_state(server);
    for (int i = 0; i < 20 && !(SSL_is_init_finished(client) && SSL_is_init_finished(server)); ++i) {
        SSL_do_handshake(client);
        SSL_do_handshake(server);
    }
    if (!SSL_is_init_finished(client) || !SSL_is_init_finished(server))
        throw std::runtime_error("tls_record_work_us: the handshake did not finish");

    const std::string request(record_bytes, 'q'), answer(record_bytes, 'a');
    std::string buffer(record_bytes, '\0');
    std::size_t n = 0;
    const auto move = [&](SSL* from, SSL* to, const std::string& bytes) {
        if (SSL_write_ex(from, bytes.data(), bytes.size(), &n) != 1 ||
            SSL_read_ex(to, buffer.data(), buffer.size(), &n) != 1 || n != bytes.size())
            throw std::runtime_error("tls_record_work_us: a record did not get through");
    };
    double best = 1e300;
    for (int b = 0; b < blocks; ++b) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_block; ++i) {
            move(client, server, request);
            move(server, client, answer);
        }
        const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - t0;
        best = std::min(best, took.count() / per_block);
    }
    return best;
}

}  // namespace bench
