#include "support/raw_peer.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/parse.hpp>

#include <stdexcept>

namespace rpclb::test {

struct RawPeer::Stream {
    boost::asio::io_context ioc;
    boost::beast::websocket::stream<boost::beast::tcp_stream> ws{ioc};
    boost::beast::flat_buffer buffer;
};

RawPeer::RawPeer(std::uint16_t port, std::chrono::milliseconds timeout) : stream_(std::make_unique<Stream>()) {
    namespace beast = boost::beast;
    auto& ws = stream_->ws;
    const auto deadline = Clock::now() + timeout;
    const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), port);
    bool done = false;
    boost::system::error_code result;
    beast::get_lowest_layer(ws).async_connect(endpoint, [&](boost::system::error_code ec) {
        result = ec;
        done = true;
    });
    run(done, deadline);
    if (result) throw std::runtime_error("connect to port " + std::to_string(port) + ": " + result.message());
    ws.read_message_max(64u * 1024u * 1024u);
    ws.auto_fragment(false);
    done = false;
    ws.async_handshake("127.0.0.1:" + std::to_string(port), "/rpclb", [&](boost::system::error_code ec) {
        result = ec;
        done = true;
    });
    run(done, deadline);
    if (result) throw std::runtime_error("websocket handshake: " + result.message());
}

RawPeer::~RawPeer() = default;

bool RawPeer::send(std::string_view text, std::chrono::milliseconds timeout, bool binary) {
    auto& ws = stream_->ws;
    ws.binary(binary);
    bool done = false;
    boost::system::error_code result;
    ws.async_write(boost::asio::buffer(text.data(), text.size()), [&](boost::system::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    run(done, Clock::now() + timeout);
    if (result) last_error_ = result;
    return !result;
}

std::optional<std::string> RawPeer::read(std::chrono::milliseconds timeout) {
    bool done = false;
    boost::system::error_code result;
    stream_->buffer.clear();
    stream_->ws.async_read(stream_->buffer, [&](boost::system::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    run(done, Clock::now() + timeout);
    if (result) {
        last_error_ = result;
        return std::nullopt;
    }
    const auto data = stream_->buffer.cdata();
    return std::string(static_cast<const char*>(data.data()), data.size());
}

std::optional<boost::json::object> RawPeer::read_until(
    const std::function<bool(const boost::json::object&)>& predicate, std::chrono::milliseconds timeout) {
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

std::optional<boost::json::object> RawPeer::read_response(std::uint64_t id, std::chrono::milliseconds timeout) {
    return read_until(
        [id](const boost::json::object& o) {
            const auto* t = o.if_contains("t");
            const auto* i = o.if_contains("id");
            return t && t->is_string() && t->get_string() == "res" && i && i->is_number() &&
                   i->to_number<std::uint64_t>() == id;
        },
        timeout);
}

bool RawPeer::wait_closed(std::chrono::milliseconds timeout, const std::function<void(const std::string&)>& seen) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return false;
        auto text = read(left);
        if (!text) return !timed_out_;
        if (seen) seen(*text);
    }
}

std::optional<std::string> RawPeer::handshake(const rpclb::detail::wire::PeerInfo& local, const std::string& cookie,
                                              std::chrono::milliseconds timeout, bool channel) {
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

void RawPeer::run(bool& done, Clock::time_point deadline) {
    auto& ioc = stream_->ioc;
    timed_out_ = false;
    ioc.restart();
    while (!done)
        if (ioc.run_one_until(deadline) == 0) break;
    if (!done) {
        timed_out_ = true;
        boost::system::error_code ignored;
        boost::beast::get_lowest_layer(stream_->ws).socket().close(ignored);
        ioc.restart();
        while (!done)
            if (ioc.run_one() == 0) break;
    }
}

}  // namespace rpclb::test
