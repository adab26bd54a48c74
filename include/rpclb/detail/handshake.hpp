// Mutual authentication with a shared cookie (sans-I/O state machine).
//
// Both sides prove they hold the cookie with HMAC-SHA256 (OpenSSL) over fresh nonces
// from each side; the cookie itself never crosses the wire. The dialer proves first and
// the acceptor proves only to a dialer that already proved (as the connecting side does
// first in Erlang distribution):
//
//   dialer   -> Hello{nonce Nd}
//   acceptor -> Hello{nonce Na}
//   dialer   -> Auth{proof = HMAC(cookie, "rpclb-dialer\n"+Na+"\n"+Nd+"\n"+D+"\n"+A)}
//   acceptor -> Ready{proof = HMAC(cookie, "rpclb-acceptor\n"+Nd+"\n"+Na+"\n"+A+"\n"+D)}
//
// where A and D are the acceptor's and dialer's node names. Each side checks the other's
// proof in constant time; a mismatch ends the handshake with an error. An acceptor whose
// check of the dialer's proof fails sends nothing more (in particular no proof of its own).
//
// Why this order: anyone who can reach a node's port can dial it. Had the acceptor proved
// first (in its Hello), such a stranger would get an HMAC under the cookie over nonces it
// knows and could brute-force the cookie offline. Now an unauthenticated dialer learns
// nothing it could attack offline: the acceptor's Hello carries only a fresh nonce, and
// its proof goes only to a dialer that already proved it holds the cookie.
//
// The trade-off (the same as Erlang's): a dialer that dials an impostor acceptor does
// reveal its proof, an HMAC the impostor could attack offline. Nodes only dial addresses
// they were configured with or learnt from authenticated peers, so this needs control of
// such an address or of the network path; the answer to that threat is TLS (which also
// authenticates the acceptor before any proof is sent), not the cookie handshake.
#pragma once

#include <rpclb/detail/wire.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// 32 bytes from OpenSSL's RAND_bytes, hex-encoded (64 lower-case characters).
/// Throws std::runtime_error if OpenSSL's generator fails.
std::string make_nonce();

/// HMAC-SHA256 (RFC 2104) of `message` under `key`, lower-case hex (64 characters).
/// Throws std::runtime_error if OpenSSL fails.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

/// Compares two strings in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

/// Largest WebSocket message, in bytes, a connection reads before its cookie handshake is
/// done. Each handshake message is one frame of a few hundred bytes (a Hello with node
/// names and listen addresses of a few hundred characters each, 64-digit nonces and
/// proofs), so this leaves ample margin while bounding what an unauthenticated peer makes
/// a node hold; a bigger message ends the connection (Connection). Once the handshake is
/// done the normal limit applies (ClusterOptions::max_message_size).
inline constexpr std::size_t max_handshake_message = 8 * 1024;

/// Which end of the connection this side is.
enum class Role { dialer, acceptor };

/// The handshake of one connection, driven by frames. Not thread-safe: one connection's
/// strand drives it.
class Handshake {
public:
    /// What to do after a step: frames to send (in order), whether the handshake is
    /// complete, or an error (then close the connection and log the error once).
    struct Step {
        std::vector<wire::Frame> send;
        bool done = false;
        std::optional<std::string> error;
        /// With `error`: the peer's proof did not verify (the cookies differ). An
        /// acceptor tells the dialer so in its WebSocket close (Connection), and the
        /// dialer then stops dialling it.
        bool wrong_cookie = false;
    };

    /// `batch`: this side reads batched messages and says so in its Hello
    /// (wire::Hello::batch). `channel` (dialer only): this connection is a call channel
    /// (wire::Hello::channel). `accept_channels`: this side accepts call channels and says
    /// so (wire::Hello::channels).
    Handshake(Role role, wire::PeerInfo local, std::string cookie, bool batch = false, bool channel = false,
              bool accept_channels = true);

    /// The first step: the dialer sends its Hello; the acceptor sends nothing. Call it
    /// once, before on_frame, in both roles (a frame before start() is an error).
    Step start();

    /// Feeds a frame from the peer. After `done` or an error, further frames are errors.
    /// Errors: "wrong cookie: <peer> failed the cookie check" (the peer's proof did not
    /// verify: the dialer's Auth at the acceptor, which then sends nothing; the
    /// acceptor's Ready at the dialer), "protocol version N, expected 1", "unexpected <type> frame during handshake".
    /// A peer Hello whose nonce is not 64 lower-case hex digits or whose node name is
    /// empty or holds a newline is refused too (they would make the HMAC input ambiguous).
    /// Never throws: an OpenSSL failure is reported as an error step.
    Step on_frame(const wire::Frame& frame);

    /// The peer reads batched messages (its Hello said "batch"); valid once its Hello has
    /// arrived.
    bool peer_batch() const noexcept { return peer_batch_; }
    /// The peer accepts call channels (its Hello said "channels"); valid once its Hello
    /// has arrived.
    bool peer_channels() const noexcept { return peer_channels_; }
    /// The peer reads "cancel" frames (its Hello said "cancel"); valid once its Hello has
    /// arrived.
    bool peer_cancel() const noexcept { return peer_cancel_; }
    /// The peer reads large frames in pieces (its Hello said "pieces"); valid once its
    /// Hello has arrived.
    bool peer_pieces() const noexcept { return peer_pieces_; }
    /// Acceptor: the dialer opened this connection as a call channel (its Hello said
    /// "channel"); valid once its Hello has arrived. Always false for a dialer.
    bool peer_channel() const noexcept { return peer_channel_; }

    /// The peer's identity; valid once the peer's Hello has arrived.
    const wire::PeerInfo& peer() const noexcept { return peer_; }

    Role role() const noexcept { return role_; }

    /// True for a dialer that sent its proof and waits for the acceptor's Ready: a close
    /// now most likely means the acceptor refused the proof (the cookies differ), since an
    /// acceptor that refuses says nothing more.
    bool awaiting_ready() const noexcept { return state_ == State::awaiting_ready; }

    /// The dialer's nonce of this connection (valid once the peer's Hello has arrived).
    /// Both ends know it, so it tells two connections of one pair apart the same way on
    /// both ends.
    const std::string& dialer_nonce() const noexcept {
        return role_ == Role::dialer ? local_nonce_ : peer_nonce_;
    }

private:
    enum class State { initial, awaiting_hello, awaiting_auth, awaiting_ready, done, failed };

    Step on_hello(const wire::Hello& hello);
    Step on_auth(const wire::Auth& auth);
    Step on_ready(const wire::Ready& ready);
    Step wrong_cookie();
    Step fail(std::string message);  ///< enters `failed` and reports `message`
    wire::Hello hello() const;       ///< this side's Hello

    Role role_;
    wire::PeerInfo local_;
    std::string cookie_;
    std::string local_nonce_;
    std::string peer_nonce_;
    bool batch_;
    bool channel_;
    bool accept_channels_;
    bool peer_batch_ = false;
    bool peer_channels_ = false;
    bool peer_cancel_ = false;
    bool peer_pieces_ = false;
    bool peer_channel_ = false;
    wire::PeerInfo peer_;
    State state_ = State::initial;
};

}  // namespace rpclb::detail
