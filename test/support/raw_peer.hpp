// A hand-driven WebSocket peer for tests that speak the mesh protocol (or break it) on
// purpose. Every operation is bounded by a deadline. Compiled once, in the test support
// library (raw_peer.cpp), so that the tests using it do not each compile a WebSocket stream.
#pragma once

#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>

#include <boost/json/object.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb::test {

/// One WebSocket connection to a node's listener, driven synchronously with deadlines
/// (each operation runs the private io_context until it completes or time runs out; a
/// timed-out operation closes the socket, so the peer is unusable afterwards).
///
/// Not thread-safe; one test thread drives it.
class RawPeer {
public:
    using Clock = std::chrono::steady_clock;

    /// Connects to 127.0.0.1:`port` and completes the WebSocket upgrade on /rpclb (not the
    /// cookie handshake). Throws std::runtime_error when either fails within `timeout`.
    explicit RawPeer(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5));
    ~RawPeer();

    RawPeer(const RawPeer&) = delete;
    RawPeer& operator=(const RawPeer&) = delete;

    /// The error of the last failed operation (timeouts read as operation_aborted).
    boost::system::error_code last_error() const noexcept { return last_error_; }

    /// Sends one text frame (binary when `binary`). False on error or timeout.
    bool send(std::string_view text, std::chrono::milliseconds timeout = std::chrono::seconds(5),
              bool binary = false);

    /// Sends a frame encoded by the codec.
    bool send(const rpclb::detail::wire::Frame& frame) { return send(rpclb::detail::wire::encode(frame)); }

    /// Reads one message; nullopt on error (closed connection included) or timeout.
    std::optional<std::string> read(std::chrono::milliseconds timeout);

    /// Reads messages until one parses as a JSON object satisfying `predicate` and returns
    /// it; nullopt when the connection ends or `timeout` passes first. Messages that don't
    /// match (gossip, group syncs) are skipped.
    std::optional<boost::json::object> read_until(const std::function<bool(const boost::json::object&)>& predicate,
                                                  std::chrono::milliseconds timeout);

    /// The "res" frame answering request `id`, or nullopt.
    std::optional<boost::json::object> read_response(std::uint64_t id, std::chrono::milliseconds timeout);

    /// Reads until the connection ends; true when it ends within `timeout`. Every message
    /// read on the way is passed to `seen` (when given).
    bool wait_closed(std::chrono::milliseconds timeout, const std::function<void(const std::string&)>& seen = {});

    /// Runs the dialer side of the cookie handshake as `local` with `cookie`; with
    /// `channel`, this connection asks to be a call channel (wire::Hello::channel). Returns
    /// nullopt on success, else what went wrong.
    std::optional<std::string> handshake(const rpclb::detail::wire::PeerInfo& local, const std::string& cookie,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                         bool channel = false);

    /// True when the last operation ran out of time (rather than failing).
    bool timed_out() const noexcept { return timed_out_; }

private:
    struct Stream;

    // Runs the io_context until `done` or `deadline`; on timeout closes the socket so the
    // pending operation completes (aborted) and the io_context is left idle.
    void run(bool& done, Clock::time_point deadline);

    std::unique_ptr<Stream> stream_;
    boost::system::error_code last_error_;
    bool timed_out_ = false;
};

}  // namespace rpclb::test
