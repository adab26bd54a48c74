// A hand-driven WebSocket peer for tests that speak the mesh protocol (or break it) on
// purpose. Every operation is bounded by a deadline.
#pragma once

#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/parse.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
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
    explicit RawPeer(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5))
        : ws_(ioc_) {
        namespace beast = boost::beast;
        const auto deadline = Clock::now() + timeout;
        const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), port);
        bool done = false;
        boost::system::error_code result;
        beast::get_lowest_layer(ws_).async_connect(endpoint, [&](boost::system::error_code ec) {
            result = ec;
            done = true;
        });
        run(done, deadline);
        if (result) throw std::runtime_error("connect to port " + std::to_string(port) + ": " + result.message());
        ws_.read_message_max(64u * 1024u * 1024u);
        ws_.auto_fragment(false);
        done = false;
        ws_.async_handshake("127.0.0.1:" + std::to_string(port), "/rpclb", [&](boost::system::error_code ec) {
            result = ec;
            done = true;
        });
        run(done, deadline);
        if (result) throw std::runtime_error("websocket handshake: " + result.message());
    }

    RawPeer(const RawPeer&) = delete;
    RawPeer& operator=(const RawPeer&) = delete;

    /// The error of the last failed operation (timeouts read as operation_aborted).
    boost::system::error_code last_error() const noexcept { return last_error_; }

    /// Sends one text frame (binary when `binary`). False on error or timeout.
    bool send(std::string_view text, std::chrono::milliseconds timeout = std::chrono::seconds(5),
              bool binary = false) {
        ws_.binary(binary);
        bool done = false;
        boost::system::error_code result;
        ws_.async_write(boost::asio::buffer(text.data(), text.size()),
                        [&](boost::system::error_code ec, std::size_t) {
                            result = ec;
                            done = true;
                        });
        run(done, Clock::now() + timeout);
        if (result) last_error_ = result;
        return !result;
    }

    /// Sends a frame encoded by the codec.
    bool send(const rpclb::detail::wire::Frame& frame) { return send(rpclb::detail::wire::encode(frame)); }

    /// Reads one message; nullopt on error (closed connection included) or timeout.
    std::optional<std::string> read(std::chrono::milliseconds timeout) {
        bool done = false;
        boost::system::error_code result;
        buffer_.clear();
        ws_.async_read(buffer_, [&](boost::system::error_code ec, std::size_t) {
            result = ec;
            done = true;
        });
        run(done, Clock::now() + timeout);
        if (result) {
            last_error_ = result;
            return std::nullopt;
        }
        const auto data = buffer_.cdata();
        return std::string(static_cast<const char*>(data.data()), data.size());
    }

    /// Reads messages until one parses as a JSON object satisfying `predicate` and returns
    /// it; nullopt when the connection ends or `timeout` passes first. Messages that don't
    /// match (gossip, group syncs) are skipped.
    std::optional<boost::json::object> read_until(const std::function<bool(const boost::json::object&)>& predicate,
                                                  std::chrono::milliseconds timeout) {
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return std::nullopt;
            auto text = read(left);
            if (!text) return std::nullopt;
            boost::system::error_code ec;
            auto v = boost::json::parse(*text, ec);
            if (ec || !v.is_object()) continue;
            if (predicate(v.as_object())) return std::move(v.as_object());
        }
    }

    /// The "res" frame answering request `id`, or nullopt.
    std::optional<boost::json::object> read_response(std::uint64_t id, std::chrono::milliseconds timeout) {
        return read_until(
            [id](const boost::json::object& o) {
                const auto* t = o.if_contains("t");
                const auto* i = o.if_contains("id");
                return t && t->is_string() && t->get_string() == "res" && i && i->is_number() &&
                       i->to_number<std::uint64_t>() == id;
            },
            timeout);
    }

    /// Reads until the connection ends; true when it ends within `timeout`. Every message
    /// read on the way is passed to `seen` (when given).
    bool wait_closed(std::chrono::milliseconds timeout,
                     const std::function<void(const std::string&)>& seen = {}) {
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return false;
            auto text = read(left);
            if (!text) return !timed_out_;
            if (seen) seen(*text);
        }
    }

    /// Runs the dialer side of the cookie handshake as `local` with `cookie`; with
    /// `channel`, this connection asks to be a call channel (wire::Hello::channel). Returns
    /// nullopt on success, else what went wrong.
    std::optional<std::string> handshake(const rpclb::detail::wire::PeerInfo& local, const std::string& cookie,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                         bool channel = false) {
        rpclb::detail::Handshake hs(rpclb::detail::Role::dialer, local, cookie, false, channel);
        auto step = hs.start();
        const auto deadline = Clock::now() + timeout;
        for (;;) {
            for (const auto& f : step.send)
                if (!send(f)) return "send failed: " + last_error_.message();
            if (step.error) return *step.error;
            if (step.done) return std::nullopt;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return std::string("handshake timed out");
            auto text = read(left);
            if (!text) return "read failed: " + last_error_.message();
            auto frame = rpclb::detail::wire::decode(*text);
            if (!frame) return "undecodable frame from the node: " + frame.error().message;
            step = hs.on_frame(*frame);
        }
    }

    /// True when the last operation ran out of time (rather than failing).
    bool timed_out() const noexcept { return timed_out_; }

private:
    // Runs the io_context until `done` or `deadline`; on timeout closes the socket so the
    // pending operation completes (aborted) and the io_context is left idle.
    void run(bool& done, Clock::time_point deadline) {
        timed_out_ = false;
        ioc_.restart();
        while (!done)
            if (ioc_.run_one_until(deadline) == 0) break;
        if (!done) {
            timed_out_ = true;
            boost::system::error_code ignored;
            boost::beast::get_lowest_layer(ws_).socket().close(ignored);
            ioc_.restart();
            while (!done)
                if (ioc_.run_one() == 0) break;
        }
    }

    boost::asio::io_context ioc_;
    boost::beast::websocket::stream<boost::beast::tcp_stream> ws_;
    boost::beast::flat_buffer buffer_;
    boost::system::error_code last_error_;
    bool timed_out_ = false;
};

}  // namespace rpclb::test
