#include "transport/call_channels.hpp"

#include "transport/blocking_channel.hpp"

#include "json_fields.hpp"

#include <rpclb/detail/deadline.hpp>
#include <rpclb/detail/log.hpp>

#include <algorithm>

namespace rpclb::detail {

struct CallChannels::Channel final : BlockingChannel {
    using BlockingChannel::BlockingChannel;
    // The mesh link it was dialled beside: once that is closed the channel is not pooled
    // again (drop() may have run while it was being dialled).
    std::weak_ptr<const Connection> link;
    bool retired = false;  // its node said bye and its link closed: closed after this call (under mutex_)
    std::string frame;     // the last request's buffer, reused for the next
};

CallChannels::CallChannels(const ConnectionSettings& settings, bool enabled)
    : settings_(settings), enabled_(enabled && !settings.tls) {}

CallChannels::~CallChannels() { stop(); }

std::optional<RequestOutcome> CallChannels::call(const Connection& link, wire::Request& request,
                                                 Clock::time_point deadline) {
    if (!enabled_ || !link.peer_accepts_channels() || link.going_away()) return std::nullopt;
    for (const auto& arg : request.args)
        if (!json_fields::all_finite(arg)) return std::nullopt;  // the link refuses it unsent
    const auto now = Clock::now();
    if (deadline <= now) return std::nullopt;
    // A channel is only a faster road: dialling one may take a quarter of the call's time
    // left at most (never longer than a handshake may), and the caller sends on the mesh
    // link with what is left when it fails.
    const auto dial_limit = std::min<Clock::duration>((deadline - now) / 4, settings_.handshake_timeout);
    auto channel = take(link, now + dial_limit);
    if (!channel) return std::nullopt;
    // Once the peer has said bye on the link it may close its channels at any moment: the
    // request goes to the link, which refuses it unsent (never_sent()), as late as we can tell.
    if (link.going_away()) {
        give_back(std::move(channel));
        return std::nullopt;
    }
    request.id = next_id_.fetch_add(1, std::memory_order_relaxed);
    // The peer starts no handler for it after this long (RpcServer::run_unless_expired).
    request.timeout_ms = wire_timeout_ms(deadline, Clock::now());
    auto frame = wire::encode(request, std::move(channel->frame));
    if (frame.size() > settings_.max_message_size) {  // the link fails it with bad_request
        give_back(std::move(channel));
        return std::nullopt;
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
    auto result = channel->call(request.id, frame, deadline, request.module, request.function);
    if (frame.capacity() <= 64 * 1024) channel->frame = std::move(frame);
    // The channel broke under the call: the peer is gone, and the pair's mesh link may not
    // have noticed yet (another thread reads it). The peer leaves every balancer before
    // this caller, and so any call it makes next, learns of the loss.
    const bool lost = !result.result && channel->peer_lost() && !link.going_away() && !link.peer_quiet();
    give_back(std::move(channel));
    if (lost && on_lost_)
        on_lost_(link, LinkClose{result.link, {}, "a call channel to " + link.peer().node + " broke"});
    return result;
}

std::unique_ptr<CallChannels::Channel> CallChannels::take(const Connection& link, Clock::time_point deadline) {
    const auto& peer = link.peer();
    for (;;) {
        std::vector<std::unique_ptr<Channel>> stale;
        std::unique_ptr<Channel> found;
        {
            std::lock_guard lock(mutex_);
            if (stopped_) return nullptr;
            if (auto it = idle_.find(peer.node); it != idle_.end()) {
                auto& pool = it->second;
                while (!pool.empty() && !found) {
                    auto candidate = std::move(pool.back());
                    pool.pop_back();
                    (candidate->incarnation() == peer.incarnation ? found : stale.emplace_back()) = std::move(candidate);
                }
            }
            if (!stale.empty()) count_[peer.node] -= stale.size();
            if (found) busy_.push_back(found.get());
        }
        stale.clear();  // closed outside the lock
        if (!found) break;
        if (found->usable()) return found;
        give_back(std::move(found));  // the peer closed it while it sat idle: closed here too
    }
    {
        std::lock_guard lock(mutex_);
        auto& count = count_[peer.node];
        const auto until = no_dial_until_.find(peer.node);
        if ((until != no_dial_until_.end() && Clock::now() < until->second) || count >= max_per_node) return nullptr;
        ++count;  // the channel dialled below
    }
    // The address the link was dialled at, else the one the peer listens on.
    const auto& target = link.target().empty() ? peer.listen : link.target();
    auto channel = std::make_unique<Channel>(ioc_, settings_, peer.node, peer.incarnation);
    channel->link = link.weak_from_this();
    {
        std::lock_guard lock(mutex_);
        busy_.push_back(channel.get());  // from here drop() and stop() abort the dial
    }
    auto why = target.empty() ? std::optional<std::string>("no address") : channel->open(target, deadline);
    if (!why) {
        std::lock_guard lock(mutex_);
        no_dial_until_.erase(peer.node);
        return channel;
    }
    RPCLB_LOG("mesh", debug) << "no call channel to " << peer.node << " at " << target << ": " << *why
                             << "; calls use the mesh link";
    give_back(std::move(channel));  // broken: closed
    std::lock_guard lock(mutex_);
    no_dial_until_[peer.node] = Clock::now() + redial_backoff;
    return nullptr;
}

void CallChannels::give_back(std::unique_ptr<Channel> channel) {
    std::unique_lock lock(mutex_);
    std::erase(busy_, channel.get());
    const auto link = channel->link.lock();
    if (!channel->broken() && !channel->retired && link && !link->closed() && !stopped_) {
        idle_[channel->node()].push_back(std::move(channel));
        return;
    }
    if (auto it = count_.find(channel->node()); it != count_.end() && --it->second == 0) count_.erase(it);
    lock.unlock();
    channel.reset();  // closed outside the lock
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
    // closes the channel. Retired, it carries its call to the end first.
    for (auto* channel : busy_)
        if (node.empty() || channel->node() == node) {
            if (retire)
                channel->retired = true;
            else
                channel->abort(LinkClose{why, {}, node.empty() ? std::string() : "the mesh link was lost"});
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
    detach({}, LinkError::stopping, false);
}

std::size_t CallChannels::open() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [node, count] : count_) n += count;
    return n;
}

}  // namespace rpclb::detail
