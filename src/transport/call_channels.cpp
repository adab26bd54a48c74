#include "transport/call_channels.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>

namespace rpclb::detail {
namespace asio = boost::asio;

// One channel: a private io_context, run only by the thread that holds the channel, and
// the connection on it. The channel is the connection's owner; its callbacks run inside
// that io_context, so on the holding thread.
struct CallChannels::Channel final : ConnectionOwner {
    Channel(const ConnectionSettings& settings, const Connection& link, std::string target)
        : node(link.peer().node),
          incarnation(link.peer().incarnation),
          link(link.weak_from_this()),
          connection(std::make_shared<Connection>(asio::make_strand(ioc), std::move(target), *this, settings)) {}

    ~Channel() override {
        // End the connection here, then let the io_context free what is left.
        connection->abort(LinkError::channel_closed);
        ioc.restart();
        ioc.poll();
    }

    /// Runs handlers until `done()` or `deadline`; false when the deadline passed first
    /// or nothing is left to run.
    template <class Done>
    bool run_until(Done done, Clock::time_point deadline) {
        while (!done()) {
            if (ioc.stopped()) ioc.restart();
            if (ioc.run_one_until(deadline) == 0 && (Clock::now() >= deadline || ioc.stopped())) return done();
        }
        return true;
    }

    // ConnectionOwner: every method runs on the holding thread.
    void on_established(const std::shared_ptr<Connection>&) override {}
    void on_frame(const std::shared_ptr<Connection>&, wire::Frame&& frame) override {
        RPCLB_LOG("mesh", warning) << "unexpected " << wire::type_name(frame) << " frame on a call channel to "
                                   << node << "; ignored";
    }
    void on_closed(const std::shared_ptr<Connection>&, const LinkClose& reason, bool) override {
        close_reason = reason.describe();
        close_kind = reason.kind;
    }
    void on_bad_frame(const std::shared_ptr<Connection>&, const wire::DecodeError& error) override {
        RPCLB_LOG("mesh", warning) << "refused a frame on a call channel to " << node << ": " << error.message;
    }
    void on_handshake_failed(const std::shared_ptr<Connection>&, const std::string& reason) override {
        close_reason = reason;
    }
    void on_tls_failed(const std::shared_ptr<Connection>&, const std::string& reason) override {
        close_reason = reason;
    }
    void on_cookie_refused(const std::shared_ptr<Connection>&) override { close_reason = "cookie refused"; }

    const std::string node;
    const std::string incarnation;
    // The mesh link it was dialled beside: once that is closed the channel is not pooled
    // again (drop() may have run before the dial marked it busy).
    const std::weak_ptr<const Connection> link;
    bool link_closed() const {
        auto l = link.lock();
        return !l || l->closed();
    }
    // Open and closed are the connection's own flags (established(), closed()).
    bool established() const noexcept { return connection->established(); }
    bool closed() const noexcept { return connection->closed(); }
    std::string close_reason;  // for the log, when a dial fails; why it closed
    std::optional<LinkError> close_kind;  // why it closed, once it has
    // This side aborted it (drop(), stop(), the wait's backstop): its close says nothing
    // about the peer.
    std::atomic<bool> aborted{false};
    /// The peer's end broke while a call waited: the connection closed on its own, not by
    /// a WebSocket close (a peer that means to close a channel says so; one that crashed or
    /// dropped this node's link does not).
    bool broke() const {
        return closed() && !aborted.load() && close_kind && *close_kind != LinkError::closed_by_peer &&
               *close_kind != LinkError::peer_not_reading;
    }
    bool retired = false;      // its node's link closed after a bye: closed after this call (under mutex_)
    Clock::time_point idle_since;  // when it was last pooled (under mutex_)
    asio::io_context ioc{1};
    std::shared_ptr<Connection> connection;
};

CallChannels::CallChannels(const ConnectionSettings& settings, bool enabled)
    : settings_(settings), enabled_(enabled) {
    settings_.channel = true;
}

CallChannels::~CallChannels() { stop(); }

std::optional<RequestOutcome> CallChannels::call(const Connection& link, wire::Request& request,
                                                 std::chrono::milliseconds timeout) {
    if (!enabled_ || !link.peer_accepts_channels() || link.going_away()) return std::nullopt;
    const auto now = Clock::now();
    // A channel is only a faster road: dialling one may take a quarter of the call's time
    // at most (never longer than a handshake may), and the caller sends on the mesh link
    // with what is left when it fails.
    const auto dial_limit = std::min<std::chrono::milliseconds>(
        timeout / 4, std::chrono::duration_cast<std::chrono::milliseconds>(settings_.handshake_timeout));
    auto channel = take(link, now + dial_limit);
    if (!channel) return std::nullopt;
    // Once the peer has said bye on the link it may close its channels at any moment: the
    // request goes to the link, which refuses it unsent (LinkError::not_connected), as late
    // as we can tell.
    if (link.going_away()) {
        give_back(std::move(channel));
        return std::nullopt;
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
    std::optional<RequestOutcome> result;
    channel->connection->request(std::move(request), timeout, [&result](RequestOutcome r) { result = std::move(r); });
    // The connection's deadline timer ends the wait at `timeout`, and its failure (a drop,
    // or abort() from drop() and stop()) completes it at once; the time limit here is only
    // a backstop.
    channel->run_until([&] { return result.has_value(); }, Clock::time_point::max());
    if (!result) {
        channel->aborted = true;
        channel->connection->abort(LinkError::channel_closed, "the call's wait ended without an outcome");
        channel->run_until([&] { return result.has_value(); }, Clock::now() + std::chrono::seconds(1));
    }
    // The call failed because the channel broke: the peer is gone, and the pair's mesh link
    // may not have noticed yet (another thread reads it). The peer leaves every balancer
    // before this caller, and so any call it makes next, learns of the loss.
    const bool broke = result && !result->result && channel->broke() && !link.going_away() && !link.peer_quiet();
    const auto why = broke ? *channel->close_kind : LinkError::io_error;
    give_back(std::move(channel));
    if (broke && on_lost_) on_lost_(link, LinkClose{why, {}, "a call channel to " + link.peer().node + " broke"});
    if (!result)  // cannot happen: the connection completes every request it takes (moved from: no names)
        return RequestOutcome{link_failure(LinkError::channel_closed, link.peer().node, {}, {}),
                              LinkError::channel_closed};  // it may have been sent: not never_sent()
    return result;
}

std::unique_ptr<CallChannels::Channel> CallChannels::take(const Connection& link, Clock::time_point deadline) {
    const auto& peer = link.peer();
    std::size_t skipped = 0;
    for (;;) {
        std::vector<std::unique_ptr<Channel>> stale;
        std::unique_ptr<Channel> found;
        {
            std::lock_guard lock(mutex_);
            if (stopped_) return nullptr;
            if (auto it = idle_.find(peer.node); it != idle_.end()) {
                auto& pool = it->second;
                for (auto i = pool.size(); i-- > 0 && !found;) {
                    auto& candidate = pool[i];
                    // A channel whose timed-out call's answer has not come stays in the pool,
                    // counted: the peer reads nothing on it until its worker has answered
                    // (Connection::answer_later), so a call sent there would wait behind a
                    // handler it never asked for. Once the answer is in, usable() drops it.
                    if (candidate->incarnation == peer.incarnation && candidate->connection->late_answers_owed() > 0 &&
                        !candidate->connection->input_waiting())
                        continue;
                    if (candidate->incarnation == peer.incarnation)
                        found = std::move(candidate);
                    else
                        stale.push_back(std::move(candidate));
                    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
                }
                // An emptied pool stays in the map (detach() removes it): a call does not
                // free the entry and its vector for give_back to make them again.
            }
            if (!stale.empty()) count_[peer.node] -= stale.size();
            if (found) mark_busy(found.get());
        }
        stale.clear();  // outside the lock: their destructors run their connections' last handlers
        if (!found) break;
        if (!usable(*found)) {
            give_back(std::move(found), false);
            continue;
        }
        if (found->connection->late_answers_owed() == 0) return found;
        // Input came, but not (all of) the late answers: back to the pool, and the next
        // round skips it unless more has come.
        give_back(std::move(found));
        if (++skipped > max_per_node) break;
    }
    {
        std::lock_guard lock(mutex_);
        auto& count = count_[peer.node];
        const auto until = no_dial_until_.find(peer.node);
        if ((until != no_dial_until_.end() && Clock::now() < until->second) || count >= max_per_node) {
            if (count == 0) count_.erase(peer.node);
            return nullptr;
        }
        ++count;  // reserved for the dial below
    }
    // A channel being dialled counts as busy (dial() marks it), so that drop() and stop()
    // abort the dial at once instead of letting it run to its time limit.
    auto dialled = dial(link, deadline);
    std::unique_lock lock(mutex_);
    if (!dialled || stopped_) {
        if (dialled) mark_idle(dialled.get());
        if (--count_[peer.node] == 0) count_.erase(peer.node);
        if (!dialled) no_dial_until_[peer.node] = Clock::now() + redial_backoff;
        lock.unlock();
        return nullptr;  // `dialled` (if any) is destroyed after the lock is released
    }
    no_dial_until_.erase(peer.node);
    return dialled;
}

bool CallChannels::usable(Channel& channel) {
    // The caller's end reads only while a call waits, so whatever the peer sent while the
    // channel sat idle is read now: a late answer to a call that timed out is dropped, and
    // a close or the end of the stream closes the connection. A request must never go out
    // on a channel the peer closed.
    // One peek when nothing came (the usual case); a few rounds of reading when something
    // did, and the channel is kept only if it then holds nothing more.
    // Given back a moment ago with no answer owed and nothing received ahead: the peer has
    // had no time worth a system call to send anything (see idle_recheck).
    if (channel.connection->late_answers_owed() == 0 && !channel.connection->input_ahead() &&
        Clock::now() - channel.idle_since < idle_recheck)
        return !channel.closed();
    for (int round = 0; round < 4; ++round) {
        if (channel.closed()) return false;
        if (!channel.connection->input_waiting()) return true;
        channel.connection->read_waiting_input();
        channel.ioc.restart();
        channel.ioc.poll();
    }
    return false;
}

std::unique_ptr<CallChannels::Channel> CallChannels::dial(const Connection& link, Clock::time_point deadline) {
    const auto& peer = link.peer();
    // The address the link was dialled at, else the one the peer listens on.
    const auto& target = link.target().empty() ? peer.listen : link.target();
    if (target.empty()) return nullptr;
    auto channel = std::make_unique<Channel>(settings_, link, target);
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return nullptr;
        mark_busy(channel.get());  // from here drop() and stop() abort the dial
    }
    channel->connection->start();
    const bool up = channel->run_until([&] { return channel->established() || channel->closed(); }, deadline);
    // The acceptor must be the link's node: an address may now belong to another one.
    if (up && channel->established() && !channel->closed() && channel->connection->peer().node == peer.node &&
        channel->connection->peer().incarnation == peer.incarnation)
        return channel;  // still marked busy: the caller's now
    {
        std::lock_guard lock(mutex_);
        mark_idle(channel.get());
    }
    RPCLB_LOG("mesh", debug) << "no call channel to " << peer.node << " at " << target << ": "
                             << (channel->close_reason.empty() ? std::string("not established in time")
                                                               : channel->close_reason)
                             << "; calls use the mesh link";
    return nullptr;
}

void CallChannels::give_back(std::unique_ptr<Channel> channel, bool keep) {
    std::unique_lock lock(mutex_);
    mark_idle(channel.get());
    if (keep && !channel->closed() && !channel->retired && !channel->link_closed() && !stopped_) {
        channel->idle_since = Clock::now();
        idle_[channel->node].push_back(std::move(channel));
        return;
    }
    if (auto it = count_.find(channel->node); it != count_.end() && --it->second == 0) count_.erase(it);
    lock.unlock();
    channel.reset();  // outside the lock: its destructor runs the connection's last handlers
}

std::vector<std::unique_ptr<CallChannels::Channel>> CallChannels::detach(std::string_view node, LinkError why,
                                                                         bool retire) {
    std::vector<std::unique_ptr<Channel>> idle;
    std::lock_guard lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end();) {
        if (!node.empty() && it->first != node) {
            ++it;
            continue;
        }
        if (auto c = count_.find(it->first); c != count_.end()) {
            c->second -= std::min(c->second, it->second.size());
            if (c->second == 0) count_.erase(c);
        }
        for (auto& channel : it->second) idle.push_back(std::move(channel));
        it = idle_.erase(it);
    }
    // A busy channel is its caller's: the abort wakes it, its call fails, and give_back
    // then destroys the channel. Retired, it carries its call to the end first.
    for (auto* channel : busy_)
        if (node.empty() || channel->node == node) {
            if (retire) {
                channel->retired = true;
            } else {
                channel->aborted = true;
                channel->connection->abort(why, node.empty() ? std::string() : "the mesh link was lost");
            }
        }
    return idle;
}

void CallChannels::drop(const std::string& node, LinkError why, bool said_bye) {
    auto idle = detach(node, why, said_bye);
    std::lock_guard lock(mutex_);
    no_dial_until_.erase(node);
}

void CallChannels::stop() {
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
    }
    detach({}, LinkError::stopping);
}

std::size_t CallChannels::open() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [node, count] : count_) n += count;
    return n;
}

}  // namespace rpclb::detail
