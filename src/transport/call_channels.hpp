// Call channels: connections on which a blocking caller does its own I/O (internal).
#pragma once

#include "transport/connection.hpp"

#include <rpclb/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// The call channels of one node: for a blocking call, a WebSocket of its own to the
/// target node, driven by the calling thread through a private io_context, so that the
/// request is written and the response read on the thread that waits for it (no hand-off
/// to a network thread and back; brpc's "pooled" connection type works the same way).
/// doc/architecture.md "Call channels" gives the design and its trade-offs.
///
/// A channel is dialled on first use to a node (TLS and the cookie handshake as for a
/// mesh link, with wire::Hello::channel set), used by one call at a time, and kept in a
/// pool per node for the next blocking call. It has no keep-alive of its own: it lives
/// while the pair's mesh link does (drop() ends a node's channels when that link is lost;
/// the peer closes its end likewise). A call on a channel keeps every promise of a call
/// on the mesh link: the same errors (Connection::request), its deadline, and failure at
/// once when the connection or the link drops.
///
/// Limits: at most max_per_node channels per node (busy or idle); a blocking call that
/// finds none free, a node that does not accept channels (an older version), a failed
/// dial (then none is tried for that node for redial_backoff) or ClusterOptions::
/// call_channels = false make call() return nullopt, and the caller uses the mesh link.
///
/// Thread safety: every member may be called from any thread. A channel is used by one
/// thread at a time, and its callbacks run on that thread.
class CallChannels {
public:
    /// Channels per node, busy and idle together.
    static constexpr std::size_t max_per_node = 16;
    /// After a failed dial, how long calls to that node use the mesh link only.
    static constexpr std::chrono::milliseconds redial_backoff{1000};
    /// A pooled channel is checked for input the peer sent while it sat idle (a close, the
    /// end of the stream, a late answer) before a request goes out on it, unless it was
    /// given back less than this long ago and owes no late answer: then the check, one
    /// system call, is skipped. A peer that closes the channel inside that window (it
    /// crashed; a stopping node keeps its channels open until their callers close them)
    /// fails that one call as closed by the peer instead of having it sent elsewhere. The
    /// same trade as HikariCP's `aliveBypassWindowMs` (500 ms there) for pooled connections.
    static constexpr std::chrono::microseconds idle_recheck{1000};

    /// `settings`: the node's connection settings (Mesh::settings()), copied with
    /// `channel` set. `enabled`: ClusterOptions::call_channels.
    CallChannels(const ConnectionSettings& settings, bool enabled);
    ~CallChannels();
    CallChannels(const CallChannels&) = delete;
    CallChannels& operator=(const CallChannels&) = delete;

    /// Sends `request` to the node at the other end of the mesh link `link` on one of
    /// its channels, from the calling thread, and waits there for the outcome (what
    /// Connection::request would complete with, bounded by `timeout`). nullopt when no
    /// channel could be had (see the class comment): `request` is then untouched and the
    /// caller sends it on `link` with the time left (a dial that fails takes at most a
    /// quarter of `timeout`). Never call it from a network thread.
    std::optional<RequestOutcome> call(const Connection& link, wire::Request& request,
                                       std::chrono::milliseconds timeout);

    /// Runs on a blocking caller's thread when a channel broke under its call (the peer's
    /// end closed or reset it, no WebSocket close, while its link had not said bye): the
    /// peer is taken for lost, and the function (Mesh::drop_link) takes it out of every
    /// balancer before the call's failure is returned. `link` is the channel's mesh link;
    /// `reason` why the channel closed. Set before the first call().
    void set_on_lost(std::function<void(const Connection& link, const LinkClose& reason)> f) {
        on_lost_ = std::move(f);
    }

    /// The mesh link to `node` was lost for `why` (its close's LinkError): its idle
    /// channels close. Calls waiting on its busy ones fail now with `why`, as calls on the
    /// link did (one failure, one reason), unless the node said bye first (`said_bye`): a
    /// stopping node keeps reading and answering its channels until their callers close
    /// them (Mesh::close_all), so those calls get their answers, and their channels close
    /// after them.
    void drop(const std::string& node, LinkError why, bool said_bye = false);
    /// The node is stopping: every channel closes as drop() does, and none opens again.
    void stop();

    /// Channels open now (busy and idle) and blocking calls sent on a channel so far.
    std::size_t open() const;
    std::uint64_t calls() const noexcept { return calls_.load(std::memory_order_relaxed); }

private:
    struct Channel;
    using Clock = std::chrono::steady_clock;

    /// An idle channel to `link`'s node, or a new one dialled before `deadline`; null
    /// when none can be had.
    std::unique_ptr<Channel> take(const Connection& link, Clock::time_point deadline);
    /// Dials a channel to `link`'s node on the calling thread; null on failure.
    std::unique_ptr<Channel> dial(const Connection& link, Clock::time_point deadline);
    /// A channel back from a call: pooled while it is healthy and `keep`, destroyed
    /// otherwise.
    void give_back(std::unique_ptr<Channel> channel, bool keep = true);
    /// A pooled channel may carry a request: what the peer sent while it sat idle has been
    /// read, and it is still open. On the holding thread.
    static bool usable(Channel& channel);
    void mark_busy(Channel* channel) { busy_.push_back(channel); }
    void mark_idle(Channel* channel) { std::erase(busy_, channel); }
    /// Removes the idle channels of `node` (every node's when empty) and aborts the busy
    /// ones with `why`, or with `retire` lets them finish their calls and be closed after;
    /// returns the idle ones, to be destroyed outside the lock.
    std::vector<std::unique_ptr<Channel>> detach(std::string_view node, LinkError why, bool retire = false);

    ConnectionSettings settings_;
    const bool enabled_;
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<std::unique_ptr<Channel>>, std::less<>> idle_;
    std::vector<Channel*> busy_;  // held by a call (a vector: no allocation per call)
    std::map<std::string, std::size_t, std::less<>> count_;          // channels per node, busy or idle
    std::map<std::string, Clock::time_point, std::less<>> no_dial_until_;  // after a failed dial
    bool stopped_ = false;
    std::atomic<std::uint64_t> calls_{0};
    std::function<void(const Connection&, const LinkClose&)> on_lost_;
};

}  // namespace rpclb::detail
