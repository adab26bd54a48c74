#include <rpclb/detail/handshake.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <climits>
#include <exception>
#include <stdexcept>
#include <utility>

namespace rpclb::detail {
namespace {

constexpr std::size_t nonce_bytes = 32;

std::string to_hex(const unsigned char* data, std::size_t size) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(size * 2, '\0');
    for (std::size_t i = 0; i < size; ++i) {
        out[2 * i] = digits[data[i] >> 4];
        out[2 * i + 1] = digits[data[i] & 0x0f];
    }
    return out;
}

// Nonces are concatenated with "\n" separators into the HMAC input, so only accepting
// what make_nonce() produces keeps that input unambiguous.
bool well_formed_nonce(std::string_view nonce) noexcept {
    if (nonce.size() != 2 * nonce_bytes) return false;
    for (char c : nonce)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

bool well_formed_node(std::string_view node) noexcept {
    return !node.empty() && node.find('\n') == std::string_view::npos;
}

std::string acceptor_proof(std::string_view cookie, std::string_view dialer_nonce,
                           std::string_view acceptor_nonce, std::string_view acceptor,
                           std::string_view dialer) {
    std::string message = "rpclb-acceptor\n";
    message.append(dialer_nonce).append("\n").append(acceptor_nonce).append("\n");
    message.append(acceptor).append("\n").append(dialer);
    return hmac_sha256_hex(cookie, message);
}

std::string dialer_proof(std::string_view cookie, std::string_view acceptor_nonce,
                         std::string_view dialer_nonce, std::string_view dialer,
                         std::string_view acceptor) {
    std::string message = "rpclb-dialer\n";
    message.append(acceptor_nonce).append("\n").append(dialer_nonce).append("\n");
    message.append(dialer).append("\n").append(acceptor);
    return hmac_sha256_hex(cookie, message);
}

}  // namespace

std::string make_nonce() {
    std::array<unsigned char, nonce_bytes> bytes;
    if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1)
        throw std::runtime_error("OpenSSL RAND_bytes failed to produce a nonce");
    return to_hex(bytes.data(), bytes.size());
}

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
    if (key.size() > static_cast<std::size_t>(INT_MAX))
        throw std::length_error("hmac_sha256_hex: key too long");
    // A null key pointer means "reuse the previous key" to OpenSSL's HMAC init, so an
    // empty key still gets a valid address.
    static constexpr unsigned char empty = 0;
    const void* key_data = key.empty() ? &empty : static_cast<const void*>(key.data());
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest;
    unsigned int digest_size = 0;
    if (!HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()),
              reinterpret_cast<const unsigned char*>(message.data()), message.size(),
              digest.data(), &digest_size))
        throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
    return to_hex(digest.data(), digest_size);
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Handshake::Handshake(Role role, wire::PeerInfo local, std::string cookie, bool batch, bool channel,
                     bool accept_channels)
    : role_(role),
      local_(std::move(local)),
      cookie_(std::move(cookie)),
      batch_(batch),
      channel_(channel),
      accept_channels_(accept_channels) {}

wire::Hello Handshake::hello() const {
    wire::Hello hello{wire::protocol_version, local_, local_nonce_, batch_};
    hello.channels = accept_channels_;
    hello.channel = channel_;
    hello.cancel = true;
    hello.pieces = true;
    return hello;
}

Handshake::Step Handshake::start() {
    if (state_ != State::initial) return fail("handshake started twice");
    try {
        local_nonce_ = make_nonce();
    } catch (const std::exception& e) {
        return fail(e.what());
    }
    state_ = State::awaiting_hello;
    Step step;
    if (role_ == Role::dialer)
        step.send.emplace_back(hello());
    return step;
}

Handshake::Step Handshake::on_frame(const wire::Frame& frame) {
    try {
        switch (state_) {
        case State::initial: return fail("frame received before the handshake started");
        case State::done: return fail("handshake already complete");
        case State::failed: return fail("handshake already failed");
        case State::awaiting_hello:
            if (const auto* hello = std::get_if<wire::Hello>(&frame)) return on_hello(*hello);
            break;
        case State::awaiting_auth:
            if (const auto* auth = std::get_if<wire::Auth>(&frame)) return on_auth(*auth);
            break;
        case State::awaiting_ready:
            if (const auto* ready = std::get_if<wire::Ready>(&frame)) return on_ready(*ready);
            break;
        }
        return fail("unexpected " + std::string(wire::type_name(frame)) + " frame during handshake");
    } catch (const std::exception& e) {
        // Only OpenSSL failures or allocation can throw here; the caller wants a Step.
        return fail(e.what());
    }
}

Handshake::Step Handshake::on_hello(const wire::Hello& hello) {
    if (hello.version != wire::protocol_version)
        return fail("protocol version " + std::to_string(hello.version) + ", expected " +
                    std::to_string(wire::protocol_version));
    if (!well_formed_node(hello.peer.node)) return fail("peer sent a malformed node name");
    if (!well_formed_nonce(hello.nonce))
        return fail("malformed nonce from " + hello.peer.node);
    peer_ = hello.peer;
    peer_nonce_ = hello.nonce;
    peer_batch_ = hello.batch;
    peer_channels_ = hello.channels;
    peer_cancel_ = hello.cancel;
    peer_pieces_ = hello.pieces;
    // Only a dialer opens a call channel; an acceptor's "channel" means nothing.
    peer_channel_ = role_ == Role::acceptor && hello.channel;

    Step step;
    if (role_ == Role::acceptor) {
        // No proof yet: the acceptor proves itself only to a dialer that proved first
        // (see the header), so a stranger gets nothing to attack offline.
        step.send.emplace_back(this->hello());
        state_ = State::awaiting_auth;
        return step;
    }

    step.send.emplace_back(
        wire::Auth{dialer_proof(cookie_, peer_nonce_, local_nonce_, local_.node, peer_.node)});
    state_ = State::awaiting_ready;
    return step;
}

Handshake::Step Handshake::on_auth(const wire::Auth& auth) {
    const auto expected = dialer_proof(cookie_, local_nonce_, peer_nonce_, peer_.node, local_.node);
    // A dialer that failed gets nothing more, in particular not the acceptor's proof.
    if (!constant_time_equal(auth.proof, expected)) return wrong_cookie();
    auto proof = acceptor_proof(cookie_, peer_nonce_, local_nonce_, local_.node, peer_.node);
    state_ = State::done;
    Step step;
    step.send.emplace_back(wire::Ready{std::move(proof)});
    step.done = true;
    return step;
}

Handshake::Step Handshake::on_ready(const wire::Ready& ready) {
    const auto expected = acceptor_proof(cookie_, local_nonce_, peer_nonce_, peer_.node, local_.node);
    if (!constant_time_equal(ready.proof, expected)) return wrong_cookie();
    state_ = State::done;
    return Step{{}, true, std::nullopt, false};
}

Handshake::Step Handshake::wrong_cookie() {
    auto step = fail("wrong cookie: " + peer_.node + " failed the cookie check");
    step.wrong_cookie = true;
    return step;
}

Handshake::Step Handshake::fail(std::string message) {
    state_ = State::failed;
    return Step{{}, false, std::move(message), false};
}

}  // namespace rpclb::detail
