#include "transport/blocking_channel.hpp"

#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/log.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <poll.h>
#include <sys/socket.h>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// The layer under the WebSocket (Beast's SyncStream): a TCP socket in Asio's non-blocking
// mode, so a read or write that would block returns at once and waits in poll() instead,
// never past `deadline` (then `timed_out`). abort() shuts the socket down, which ends a
// wait at once.
struct PollingSocket {
    using executor_type = tcp::socket::executor_type;
    explicit PollingSocket(asio::io_context& ioc) : socket(ioc) {}
    executor_type get_executor() noexcept { return socket.get_executor(); }

    bool wait(short events, error_code& ec) {
        for (;;) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0) break;
            pollfd watch{socket.native_handle(), events, 0};
            const int ready = ::poll(&watch, 1, static_cast<int>(std::min<std::int64_t>(left, INT_MAX)));
            if (ready > 0) return true;
            if (ready < 0 && errno != EINTR) return ec.assign(errno, boost::system::system_category()), false;
        }
        ec = asio::error::timed_out;
        return false;
    }
    template <class Buffers>
    std::size_t read_some(const Buffers& b, error_code& ec) {
        if (std::exchange(wait_first, false) && !wait(POLLIN, ec)) return 0;
        for (;;) {
            const auto n = socket.read_some(b, ec);
            if (ec != asio::error::would_block || !wait(POLLIN, ec)) return n;
        }
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& b, error_code& ec) {
        for (;;) {
            const auto n = socket.write_some(b, ec);
            if (ec != asio::error::would_block || !wait(POLLOUT, ec)) return n;
        }
    }
    // The throwing forms Beast's SyncStream check asks for; only the ones above are used.
    template <class Buffers>
    std::size_t read_some(const Buffers& b);
    template <class Buffers>
    std::size_t write_some(const Buffers& b);

    using Clock = BlockingChannel::Clock;
    tcp::socket socket;
    Clock::time_point deadline = Clock::time_point::max();
    bool wait_first = false;  // the next read polls before it reads: an answer is not in yet
};

// Beast's teardown after a close frame.
[[maybe_unused]] void teardown(beast::role_type, PollingSocket& s, error_code& ec) {
    s.socket.shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace

struct BlockingChannel::Stream {
    explicit Stream(asio::io_context& ioc) : ws(ioc) {}
    PollingSocket& layer() noexcept { return ws.next_layer(); }
    std::string_view text() const noexcept { return {static_cast<const char*>(buffer.data().data()), buffer.size()}; }
    ws::stream<PollingSocket> ws;
    beast::flat_buffer buffer;  // the last message read
};

BlockingChannel::BlockingChannel(asio::io_context& ioc, const ConnectionSettings& settings, std::string node,
                                 std::string incarnation)
    : settings_(settings), node_(std::move(node)), incarnation_(std::move(incarnation)),
      load_(NodeLoads::instance().of(node_)),
      stream_(std::make_unique<Stream>(ioc)) {}

BlockingChannel::~BlockingChannel() {
    std::lock_guard lock(abort_mutex_);
    error_code ignored;
    stream_->layer().socket.close(ignored);
}

void BlockingChannel::abort(const LinkClose& reason) {
    std::lock_guard lock(abort_mutex_);
    if (!aborted_) aborted_ = reason;
    if (auto& socket = stream_->layer().socket; socket.is_open()) ::shutdown(socket.native_handle(), SHUT_RDWR);
}

LinkClose BlockingChannel::fail(const error_code& ec, std::string detail) {
    broken_ = true;
    std::lock_guard lock(abort_mutex_);
    if (aborted_) return *aborted_;
    auto why = LinkClose::from(ec, std::move(detail));
    peer_lost_ = why.kind != LinkError::closed_by_peer;
    return why;
}

std::optional<std::string> BlockingChannel::open(const std::string& target, Clock::time_point deadline) {
    auto& s = *stream_;
    auto& socket = s.layer().socket;
    s.layer().deadline = deadline;
    const auto parts = split_host_port(target).value_or(HostPort{target, ""});
    error_code ec;
    tcp::endpoint endpoint;
    if (const auto address = asio::ip::make_address(parts.host, ec); !ec && parse_port(parts.port)) {
        endpoint = tcp::endpoint(address, *parse_port(parts.port));
    } else {
        const auto found = tcp::resolver(socket.get_executor()).resolve(parts.host, parts.port, ec);
        if (ec || found.empty()) return "resolve " + target + ": " + ec.message();
        endpoint = *found.begin();
    }
    {
        std::lock_guard lock(abort_mutex_);  // abort() shuts down only an open socket
        if (aborted_) return aborted_->describe();
        socket.open(endpoint.protocol(), ec);
        if (!ec) socket.non_blocking(true, ec);
        if (ec) return "socket: " + ec.message();
    }
    int error = ::connect(socket.native_handle(), endpoint.data(), endpoint.size()) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
        if (!s.layer().wait(POLLOUT, ec)) return fail(ec, "connect " + target).describe();
        socklen_t size = sizeof error;
        ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &size);
    }
    if (error != 0) return "connect " + target + ": " + error_code(error, boost::system::system_category()).message();
    socket.set_option(tcp::no_delay(true), ec);
    s.ws.binary(true);  // as Connection::configure
    s.ws.auto_fragment(true);
    s.ws.read_message_max(std::max(settings_.max_message_size * 2, wire::max_batch_bytes));
    s.ws.handshake(target, "/rpclb", ec);
    if (ec) return fail(ec, "websocket handshake").describe();
    // The cookie handshake, as a mesh link's dialer does it, with "channel" and no batches.
    Handshake handshake(Role::dialer, settings_.local, settings_.cookie, false, true, settings_.accept_channels);
    for (auto step = handshake.start();;) {
        for (const auto& frame : step.send) {
            s.ws.write(asio::buffer(wire::encode(frame)), ec);
            if (ec) return fail(ec, "handshake").describe();
        }
        if (step.error) return *step.error;
        if (step.done) break;
        s.buffer.clear();
        s.ws.read(s.buffer, ec);
        if (ec) return fail(ec, "handshake").describe();
        auto frame = wire::decode(s.text(), settings_.max_message_size);
        if (!frame) return "malformed frame during handshake: " + frame.error().message;
        step = handshake.on_frame(*frame);
    }
    // The address may now belong to another node, or to a new incarnation of this one.
    if (handshake.peer().node != node_ || handshake.peer().incarnation != incarnation_)
        return target + " is now " + handshake.peer().node + " (" + handshake.peer().incarnation + ")";
    broken_ = false;
    return std::nullopt;
}

bool BlockingChannel::usable() {
    if (broken_) return false;
    char byte;
    const auto n = ::recv(stream_->layer().socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    broken_ = n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);  // a close, the end, an error
    return !broken_;
}

RequestOutcome BlockingChannel::call(std::uint64_t id, std::string_view frame, Clock::time_point deadline,
                                 std::string_view module, std::string_view function) {
    auto& s = *stream_;
    s.layer().deadline = deadline;
    error_code ec;
    broken_ = true;  // until the answer is in
    peer_lost_ = false;
    auto lost = [&](LinkError why) { return RequestOutcome{link_failure(why, node_, module, function), why}; };
    auto failed = [&]() -> RequestOutcome {
        if (ec == asio::error::timed_out) return call_failure(Failure::timeout, node_, module, function);
        return lost(fail(ec).kind);
    };
    settings_.counters->frames_sent.fetch_add(1, std::memory_order_relaxed);
    settings_.counters->messages_sent.fetch_add(1, std::memory_order_relaxed);
    s.ws.write(asio::buffer(frame.data(), frame.size()), ec);
    if (ec) return failed();
    s.layer().wait_first = true;
    for (;;) {
        s.buffer.clear();
        s.ws.read(s.buffer, ec);
        if (ec) return failed();
        auto decoded = wire::decode(s.text(), settings_.max_message_size);
        if (!decoded) {  // the channel is not used again either way
            if (wire::peek_frame_id(s.text(), "res") != id) return lost(LinkError::protocol_error);
            return call_error(ErrorCode::internal_server_error, "malformed response: " + decoded.error().message,
                              node_, module, function);
        }
        auto* response = std::get_if<wire::Response>(&*decoded);
        if (!response || response->id != id) {  // the acceptor sends nothing else
            RPCLB_LOG("mesh", warning) << "unexpected " << wire::type_name(*decoded) << " frame on a call channel to "
                                       << node_ << "; ignored";
            continue;
        }
        note_load(*load_, response->load, response->load_problem, node_);
        broken_ = false;
        return std::move(response->result);
    }
}

}  // namespace rpclb::detail
