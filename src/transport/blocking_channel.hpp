// One call channel, driven by the calling thread with blocking socket calls (internal).
#pragma once

#include "transport/link_error.hpp"
#include "transport/link_settings.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace rpclb::detail {

/// A plain-TCP WebSocket of its own to one node, on which one thread at a time makes
/// blocking calls: it writes the request frame and reads the answer itself (brpc's
/// "pooled" connection type). Beast's blocking reads and writes run over a socket in
/// non-blocking mode that waits in poll(2) with the time left to the call's deadline, so
/// none outlives it. It shares nothing with the strands and io_context of the mesh.
///
/// Life: open() (TCP connect, WebSocket upgrade, cookie handshake with wire::Hello::channel
/// set), then call() any number of times. Any failure (the deadline, a drop, abort())
/// leaves the channel broken(), and its owner closes it: a late answer to a timed-out
/// call can then never be taken for the next call's.
///
/// Thread safety: open(), call(), usable() and the destructor on the thread holding the
/// channel; abort() from any thread while the channel exists.
class BlockingChannel {
public:
    using Clock = std::chrono::steady_clock;

    /// `ioc` only owns the socket's registration (nobody runs it). `node`, `incarnation`:
    /// whom open() must find at the other end.
    BlockingChannel(boost::asio::io_context& ioc, const ConnectionSettings& settings, std::string node,
                    std::string incarnation);
    ~BlockingChannel();  // closes the socket, with no close handshake

    /// Dials `target` ("host:port") and completes both handshakes before `deadline`
    /// (a host name is resolved by the system's resolver, which no deadline bounds).
    /// nullopt on success, else why it failed (the channel is then broken).
    std::optional<std::string> open(const std::string& target, Clock::time_point deadline);

    /// Writes `frame`, the encoded Request `id` to `module`.`function`, and waits for its
    /// answer until `deadline`. Errors as Connection::request: `request_timeout`
    /// (Failure::timeout) when the deadline passes; `service_unavailable`
    /// (Failure::no_connection, with the LinkError in the outcome and in `details.reason`:
    /// it may have been sent) when the channel drops or abort() ends it.
    RequestOutcome call(std::uint64_t id, std::string_view frame, Clock::time_point deadline,
                        std::string_view module, std::string_view function);

    /// Ends the channel from another thread: a caller waiting on it wakes at once and its
    /// call fails with `reason`. Idempotent (the first reason stays).
    void abort(const LinkClose& reason);

    /// The channel broke on its own while a call waited: the peer's end reset or ended it
    /// without a WebSocket close (a crash, a lost route), not abort(), not a deadline.
    /// Meaningful after a call() that failed.
    bool peer_lost() const noexcept { return peer_lost_; }

    /// An idle channel may carry a request: not broken, and the peer sent nothing while it
    /// sat idle (it sends nothing unasked but a close). One non-blocking peek.
    bool usable();
    bool broken() const noexcept { return broken_; }
    const std::string& node() const noexcept { return node_; }
    const std::string& incarnation() const noexcept { return incarnation_; }

private:
    struct Stream;
    /// Marks the channel broken; why, for `ec`: abort()'s reason if it ran.
    LinkClose fail(const boost::system::error_code& ec, std::string detail = {});

    const ConnectionSettings& settings_;
    const std::string node_;
    const std::string incarnation_;
    const std::shared_ptr<NodeLoad> load_;  // the peer's load record (NodeLoads)
    std::unique_ptr<Stream> stream_;
    bool broken_ = true;  // until open() succeeds
    std::mutex abort_mutex_;  // abort() against the socket's open and close
    std::optional<LinkClose> aborted_;
    bool peer_lost_ = false;
};

}  // namespace rpclb::detail
