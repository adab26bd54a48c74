// Membership: how the mesh's links end. A peer is lost (its link closed or dropped by
// drop_link: it leaves every group before its calls fail), or this node leaves (the bye
// exchange, then closing every link). The rest of Mesh is in mesh.cpp.
#include "membership/mesh.hpp"
#include "transport/block_cache.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>

namespace rpclb::detail {
namespace asio = boost::asio;

void Mesh::on_closed(const std::shared_ptr<Connection>& c, const LinkClose& reason, bool established) {
    if (established) sink_.connection_closed(*c);
    {
        std::lock_guard lock(budget_mutex_);
        link_frames_.erase(c.get());
    }
    if (established && c->channel()) {
        {
            std::lock_guard lock(mutex_);
            auto [first, last] = channels_.equal_range(c->peer().node);
            for (auto it = first; it != last; ++it)
                if (it->second == c) {
                    channels_.erase(it);
                    break;
                }
        }
        changed_.notify_all();
        return;
    }
    bool lost = false;
    {
        // Held until the peer has left every group: a link that drop_link() took out of
        // peers_ meanwhile fails its calls (after this returns) only once that is done.
        std::lock_guard loss(loss_mutex_);
        {
            std::lock_guard lock(mutex_);
            forget_connecting(c);
            if (!c->target().empty()) dialing_.erase(c->target());
            if (established) {
                auto it = peers_.find(c->peer().node);
                if (it != peers_.end() && it->second == c) {
                    peers_.erase(it);
                    lost = true;
                }
            }
        }
        // Before the connection fails its pending calls (Connection::fail): no caller
        // learns of the loss while a balancer may still pick the peer.
        if (lost) groups_.remove_node(c->peer().node);
    }
    if (lost) {
        std::lock_guard lock(detector_mutex_);
        detector_.remove(c->peer().node);
    }
    if (!established && !c->target().empty()) {
        std::lock_guard lock(mutex_);
        for (auto it = known_.begin(); it != known_.end(); ++it) {
            if (it->second.info.listen != c->target() || peers_.contains(it->first)) continue;
            if (++it->second.failures >= max_redials) {
                RPCLB_LOG("mesh", info) << "giving up on " << it->first << " after " << max_redials
                                        << " failed dials";
                known_.erase(it);
            }
            break;
        }
    }
    if (lost) forget_unless_redialled(c->peer().node);
    changed_.notify_all();
    if (!established && (reason.kind == LinkError::resolve_failed || reason.kind == LinkError::connect_failed)) {
        bool first = false;
        {
            std::lock_guard lock(mutex_);
            const bool seed =
                std::find(options_.seeds.begin(), options_.seeds.end(), c->target()) != options_.seeds.end();
            first = seed && warned_seeds_.insert(c->target()).second;
        }
        if (first && !stopping_)
            RPCLB_LOG("mesh", warning) << "seed \"" << c->target() << "\": cannot " << reason.describe()
                                       << "; still retrying every " << options_.reconnect_interval.count() << " ms";
    }
    if (!lost) {
        if (!established && !stopping_)
            RPCLB_LOG("mesh", debug) << "connection " << (c->target().empty() ? "from a peer" : "to " + c->target())
                                     << " ended before joining: " << reason.describe();
        return;
    }
    peer_lost(c, reason, (c->going_away() || c->peer_quiet()) && reason.kind == LinkError::closed_by_peer);
}

void Mesh::forget_unless_redialled(const std::string& node) {
    std::lock_guard lock(mutex_);
    // A lost peer this node doesn't redial is forgotten now: the table of known
    // nodes holds only nodes that are connected or being redialled.
    if (!dials(node)) known_.erase(node);
    heard_.erase(node);  // linked again, it is sent a list and announced again
}

void Mesh::peer_lost(const std::shared_ptr<Connection>& c, const LinkClose& reason, bool clean) {
    view_changed_ = true;
    ++peers_lost_;
    // A link that timed out while this node was not running: its own pause, said once.
    const auto now = std::chrono::steady_clock::now();
    const auto paused =
        !stopping_ && reason.kind == LinkError::timed_out ? pause_watch_.paused(now) : std::nullopt;
    if (paused && pause_watch_.first_report(now))
        RPCLB_LOG("mesh", warning) << "this node was not running for at least "
                                   << std::chrono::duration<double>(*paused).count()
                                   << " s (stopped, or starved of CPU): its links timed out and its members may have "
                                      "dropped it; relinking them";
    if (!stopping_)
        RPCLB_LOG("mesh", info) << "lost " << c->peer().node << ": "
                                << (paused ? std::string("the link timed out while this node was not running")
                                           : reason.describe());
    // Call channels live with the pair's mesh link, both ways. One exception: a link that
    // a stopping node closed cleanly after the byes leaves the channels its peer opened to
    // close_all(), which lets their callers close them, so that a request on one is read
    // and answered rather than dropped unread.
    if (!(stopping_ && clean))
        for (auto& channel : take_channels(c->peer().node))
            channel->abort(reason.kind, "the mesh link was lost: " + reason.describe());
    if (on_peer_lost_) on_peer_lost_(c->peer().node, reason.kind, clean);
}

void Mesh::drop_link(const Connection& link, const LinkClose& reason) {
    std::shared_ptr<Connection> c;
    {
        std::lock_guard loss(loss_mutex_);
        {
            std::lock_guard lock(mutex_);
            const auto it = peers_.find(link.peer().node);
            // Gone already (its own close got there first), replaced, or saying bye: a
            // stopping peer closes its channels itself, and has left its groups.
            if (it == peers_.end() || it->second.get() != &link || link.going_away() || link.peer_quiet()) return;
            c = it->second;
            peers_.erase(it);
        }
        groups_.remove_node(c->peer().node);
    }
    {
        std::lock_guard lock(detector_mutex_);
        detector_.remove(c->peer().node);
    }
    forget_unless_redialled(c->peer().node);
    changed_.notify_all();
    // Its pending calls fail now, after the peer has left every group; its own on_closed
    // finds it gone from peers_ and leaves the rest to peer_lost() here.
    c->abort(reason.kind, reason.detail);
    peer_lost(c, reason, false);
}

void Mesh::say_goodbye(std::chrono::milliseconds limit) {
    std::vector<std::shared_ptr<Connection>> all;
    {
        std::lock_guard lock(mutex_);
        for (auto& [name, c] : peers_) all.push_back(c);
    }
    for (auto& c : all)
        if (c->mark_bye_sent()) c->send(wire::encode(wire::Bye{}));
    // Requests that crossed our bye on the wire are still served meanwhile; each peer's
    // answer is the last frame it sends us before going quiet.
    auto answered = [&] {
        for (auto& c : all)
            if (!c->going_away() && !c->peer_quiet() && !c->closed()) return false;
        return true;
    };
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, limit, answered))
        RPCLB_LOG("mesh", warning) << "some peers did not answer bye in time";
}

void Mesh::close_all(std::chrono::milliseconds limit, bool served_all) {
    stopping_ = true;
    asio::post(ioc_, [self = self_.lock()] {
        boost::system::error_code ignored;
        self->accept_retry_timer_.cancel();
        if (self->acceptor_) self->acceptor_->close(ignored);
    });
    std::vector<std::shared_ptr<Connection>> all;
    std::size_t links = 0;
    {
        std::lock_guard lock(mutex_);
        for (auto& [name, c] : peers_) all.push_back(c);
        all.insert(all.end(), connecting_.begin(), connecting_.end());
        for (auto& [name, c] : channels_) all.push_back(c);
        links = served_all ? all.size() - channels_.size() : all.size();
    }
    // The call channels peers opened to this node are theirs to close: each caller closes
    // its channels when it sees the link close after our bye (an idle one at once, a busy
    // one once its call is answered). Until then this node keeps reading and answering
    // them, so a request written on a channel just before the caller saw the bye is never
    // dropped unread (balancers have stopped by now: a load-balanced one gets `draining`).
    // When served calls outlived stop_timeout, what waits on a channel would wait for
    // nothing: the channels close with the links.
    for (std::size_t i = 0; i < links; ++i) all[i]->close(LinkError::stopping);
    // Each close first writes what is queued, then the close handshake; on_closed wakes us
    // (and takes a closed channel out of channels_, where one accepted meanwhile appears).
    const auto all_closed = [&] {
        for (auto& c : all)
            if (!c->closed()) return false;
        return channels_.empty();
    };
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, limit, all_closed)) {
        // A peer that does not answer (stopped, or cut off) would leave its connection
        // open, and requests to it queued on a strand that no thread runs once the network
        // threads stop: end such connections now, so that what waits on them fails.
        for (auto& [name, c] : channels_) all.push_back(c);
        lock.unlock();
        for (auto& c : all)
            if (!c->closed()) c->abort(LinkError::stopping, "the peer did not answer the close");
        lock.lock();
        changed_.wait_for(lock, std::chrono::seconds(1), all_closed);
    }
    lock.unlock();
    {
        // Probes ran meanwhile, so a peer cut off during the close was dropped.
        std::lock_guard detector(detector_mutex_);
        detector_stopped_ = true;
        asio::post(ioc_, [self = self_.lock()] {
            std::lock_guard lock(self->detector_mutex_);
            self->probe_timer_.cancel();
        });
    }
    // No trim tick of this node's will free the decoded large values' kept blocks
    // any more (another node of the process that uses them only refills them).
    BlockCache::instance().trim(true);
}

}  // namespace rpclb::detail
