// Call channels: the pool of BlockingChannels of a node's blocking calls (internal).
#pragma once

#include "transport/connection.hpp"

#include <rpclb/error.hpp>

#include <boost/asio/io_context.hpp>

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

/// The call channels of one node: per target node, a pool of BlockingChannels on which a
/// blocking call writes its request and reads its answer on the calling thread (no
/// hand-off to a network thread and back). doc/architecture.md "Threads" gives the rules.
///
/// A channel is dialled on first use (a quarter of the call's time left at most), used by
/// one call at a time and pooled for the next; a call that fails on it leaves it broken,
/// and it is closed. It has no keep-alive of its own: it lives while the pair's mesh link
/// does (drop()).
///
/// call() returns nullopt, and the caller uses the mesh link, when no channel can be had:
/// ClusterOptions::call_channels is false, the node uses TLS (channels are plain TCP
/// only), the peer accepts none or said bye, max_per_node are busy, a dial failed (then
/// none is tried for that node for redial_backoff), or the request is one the link must
/// refuse (arguments JSON cannot carry, over the size limit).
///
/// Thread safety: every member may be called from any thread.
class CallChannels {
public:
    /// Channels per node, busy and idle together.
    static constexpr std::size_t max_per_node = 16;
    /// After a failed dial, how long calls to that node use the mesh link only.
    static constexpr std::chrono::milliseconds redial_backoff{1000};

    /// `settings`: the node's connection settings (Mesh::settings()). `enabled`:
    /// ClusterOptions::call_channels.
    CallChannels(const ConnectionSettings& settings, bool enabled);
    ~CallChannels();
    CallChannels(const CallChannels&) = delete;
    CallChannels& operator=(const CallChannels&) = delete;

    /// Sends `request` to the node at the other end of the mesh link `link` on one of its
    /// channels and waits, on the calling thread, for the outcome (what Connection::request
    /// would complete with, by `deadline`). nullopt when no channel could be had (class
    /// comment) or the deadline has passed: `request` is then unsent and its arguments
    /// untouched. Never call it from a network thread.
    std::optional<RequestOutcome> call(const Connection& link, wire::Request& request,
                                       std::chrono::steady_clock::time_point deadline);

    /// Runs on a blocking caller's thread when a channel broke under its call (the peer's
    /// end reset or ended it without a WebSocket close while its link had not said bye):
    /// the peer is taken for lost, and the function (Mesh::drop_link) takes it out of every
    /// balancer before the call's failure is returned. `link` is the channel's mesh link;
    /// `reason` why the channel closed. Set before the first call().
    void set_on_lost(std::function<void(const Connection& link, const LinkClose& reason)> f) {
        on_lost_ = std::move(f);
    }

    /// The mesh link to `node` was lost for `why` (its close's LinkError): its idle
    /// channels close, and calls waiting on its busy ones fail now with `why` (one failure,
    /// one reason), unless the node said bye first (`said_bye`): a stopping node answers
    /// its channels until their callers close them, so those calls get their answers, and
    /// their channels close after them.
    void drop(const std::string& node, LinkError why, bool said_bye = false);
    /// The node is stopping: every channel closes as drop() does, and none opens again.
    void stop();

    /// Channels open now (busy, idle or being dialled) and blocking calls sent on one so far.
    std::size_t open() const;
    std::uint64_t calls() const noexcept { return calls_.load(std::memory_order_relaxed); }

private:
    struct Channel;
    using Clock = std::chrono::steady_clock;

    /// An idle usable channel to `link`'s node, or a new one dialled before `deadline`.
    std::unique_ptr<Channel> take(const Connection& link, Clock::time_point deadline);
    /// A channel back from a call or a dial: pooled while it may serve, else closed.
    void give_back(std::unique_ptr<Channel> channel);
    /// Takes out the idle channels of `node` (every node's when empty), to be closed
    /// outside the lock, and aborts the busy ones, or with `retire` lets them finish.
    std::vector<std::unique_ptr<Channel>> detach(std::string_view node, LinkError why, bool retire);

    const ConnectionSettings settings_;
    const bool enabled_;
    boost::asio::io_context ioc_{1};  // the channels' sockets belong to it; nobody runs it
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<std::unique_ptr<Channel>>, std::less<>> idle_;
    std::vector<Channel*> busy_;  // held by a call or a dial
    std::map<std::string, std::size_t, std::less<>> count_;  // channels per node, busy or idle
    std::map<std::string, Clock::time_point, std::less<>> no_dial_until_;  // after a failed dial
    bool stopped_ = false;
    std::atomic<std::uint64_t> next_id_{1};
    std::atomic<std::uint64_t> calls_{0};
    std::function<void(const Connection&, const LinkClose&)> on_lost_;
};

}  // namespace rpclb::detail
