// Membership: the listener, dialling, gossip of known_ nodes, one connection per pair.
// Dialling seeds, discovered and gossiped nodes is in mesh_dial.cpp; how links end (a lost
// peer, this node's bye and close) in mesh_loss.cpp; the failure detector's driver in
// mesh_probes.cpp; failed handshakes and refusals in mesh_refusals.cpp.
#include "membership/mesh.hpp"
#include "transport/call_channels.hpp"
#include "transport/tls.hpp"

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/log.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <random>
#include <utility>

namespace rpclb::detail {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A caller opens at most CallChannels::max_per_node channels to one node. The acceptor
// takes twice that from one peer: a channel the caller closed and this node has not yet
// seen close leaves room for its replacement, and a peer that opens channels without end
// (a bug, or another implementation) cannot take every descriptor of this node.
constexpr std::size_t max_accepted_channels = 2 * CallChannels::max_per_node;

// Accepted connections whose cookie handshake is not done, held at once. A peer has
// handshake_timeout to prove it holds the cookie, and each such connection holds at most
// max_handshake_message of input, so strangers hold bounded memory and descriptors; a
// node's genuine peers rarely have more than a few connections in their handshake. A
// connection beyond this is closed as soon as it is accepted.
constexpr std::size_t max_unauthenticated = 64;

// Refusals of unauthenticated peers are logged at most once per this interval, with the
// counts so far: a flood of them must not flood the log.
constexpr std::chrono::seconds refusal_log_interval{10};

// The node that dials when two nodes learn of each other: the smaller name. Both ends
// compute the same answer, so a pair normally gets exactly one connection.
bool dials_first(const std::string& a, const std::string& b) { return a < b; }

}  // namespace

Mesh::Mesh(MeshOptions options, const std::string& incarnation, asio::io_context& ioc, Groups& groups,
           RequestSink& sink)
    : options_(std::move(options)),
      ioc_(ioc),
      groups_(groups),
      sink_(sink),
      accept_retry_timer_(ioc),
      detector_(options_.name, incarnation, DetectorOptions::from_idle_timeout(options_.idle_timeout),
                std::random_device{}()),
      probe_timer_(ioc),
      pause_watch_(DetectorOptions::from_idle_timeout(options_.idle_timeout).probe_interval, options_.idle_timeout) {
    settings_.local = wire::PeerInfo{options_.name, incarnation, "", options_.client};
    settings_.cookie = options_.cookie;
    settings_.max_message_size = options_.max_message_size;
    settings_.max_batch_frames = options_.max_batch_frames;
    settings_.accept_channels = options_.call_channels;
    settings_.max_send_queue_bytes = options_.max_send_queue_bytes;
    settings_.handshake_timeout = options_.handshake_timeout;
    if (options_.load) settings_.load = options_.load;
    // Throws std::invalid_argument naming the field; a key or CA without a certificate too.
    if (options_.tls.enabled() || !options_.tls.key.empty() || !options_.tls.ca.empty())
        settings_.tls = std::make_shared<TlsCredentials>(options_.tls);
}

void Mesh::listen() {
    const auto endpoint = parse_listen_address(options_.listen);  // checked by the constructor too
    acceptor_.emplace(ioc_);
    acceptor_->open(endpoint.protocol());
    acceptor_->set_option(tcp::acceptor::reuse_address(true));
    boost::system::error_code ec;
    acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::system_error(ec, "cannot listen on " + options_.listen);
    bound_ = acceptor_->local_endpoint();
    // Peers dial what this node advertises: its bound address, or its name's host when it
    // listens on every address.
    settings_.local.listen = bound_->address().is_unspecified()
                                 ? options_.name.substr(options_.name.find('@') + 1) + ":" + std::to_string(bound_->port())
                                 : to_host_port(*bound_);
}

void Mesh::start() {
    groups_.set_incarnation(options_.name, settings_.local.incarnation);
    groups_.set_broadcast([weak = self_](std::string frame) {
        if (auto self = weak.lock()) self->broadcast(frame);
    });
    if (acceptor_) do_accept();
    for (const auto& seed : options_.seeds) {
        if (auto problem = dial_problem(seed)) {
            RPCLB_LOG("mesh", warning) << "seed \"" << seed << "\" " << *problem << "; it is never dialled";
            std::lock_guard lock(mutex_);
            bad_seeds_.insert(seed);
        }
        dial_seed(seed);
    }
    asio::post(ioc_, [self = self_.lock()] {
        std::lock_guard lock(self->detector_mutex_);
        self->next_reconnect_at_ = std::chrono::steady_clock::now() + self->options_.reconnect_interval;
        self->arm_probe_timer();
    });
}

bool Mesh::dials(const std::string& node) const { return options_.client || dials_first(options_.name, node); }

void Mesh::do_accept() {
    acceptor_->async_accept(asio::make_strand(ioc_), [self = self_.lock()](boost::system::error_code ec,
                                                                               Connection::Socket socket) {
        if (ec) {
            if (ec == asio::error::operation_aborted || self->stopping_) return;
            if (!self->accept_failing_)
                RPCLB_LOG("mesh", warning) << "accept failed: " << ec.message()
                                           << "; retrying every 100 ms until an accept succeeds";
            self->accept_failing_ = true;
            self->accept_retry_timer_.expires_after(std::chrono::milliseconds(100));
            self->accept_retry_timer_.async_wait([self](boost::system::error_code ec) {
                if (!ec && !self->stopping_) self->do_accept();
            });
            return;
        }
        if (self->accept_failing_) RPCLB_LOG("mesh", info) << "accepting connections again";
        self->accept_failing_ = false;
        std::shared_ptr<Connection> c;
        {
            std::lock_guard lock(self->mutex_);
            if (self->unauthenticated_ < max_unauthenticated) {
                c = std::make_shared<Connection>(std::move(socket), *self, self->settings_);
                self->connecting_.insert(c);
                ++self->unauthenticated_;
            }
        }
        if (c)
            c->start();
        else
            self->refuse_unauthenticated(socket);
        if (!self->stopping_) self->do_accept();
    });
}

void Mesh::refuse_unauthenticated(Connection::Socket& socket) {
    ++unauthenticated_refused_;
    boost::system::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    // A reset, not a FIN: nothing the peer sent is read, and no TIME_WAIT is left behind.
    socket.set_option(asio::socket_base::linger(true, 0), ec);
    socket.close(ec);
    if (refusal_log_due(last_refused_log_))
        RPCLB_LOG("mesh", warning) << "closed a connection from "
                                   << (remote.address().is_unspecified() ? std::string("an incoming peer")
                                                                         : remote.address().to_string())
                                   << " at once: " << max_unauthenticated
                                   << " connections are in their cookie handshake, the most this node holds ("
                                   << unauthenticated_refused_.load() << " refused so far; logged at most every "
                                   << refusal_log_interval.count() << " s)";
}

bool Mesh::refusal_log_due(std::atomic<std::chrono::steady_clock::rep>& last_logged) noexcept {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(refusal_log_interval).count();
    auto last = last_logged.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval) return false;  // 0: never logged
    return last_logged.compare_exchange_strong(last, now, std::memory_order_relaxed);
}

void Mesh::on_oversize_before_handshake(const std::shared_ptr<Connection>& c) {
    ++oversize_before_handshake_;
    if (refusal_log_due(last_oversize_log_))
        RPCLB_LOG("mesh", warning) << c->describe_peer() << " sent a message over " << max_handshake_message
                                   << " bytes before its cookie handshake was done; closing it ("
                                   << oversize_before_handshake_.load() << " so far; logged at most every "
                                   << refusal_log_interval.count() << " s)";
}

void Mesh::forget_connecting(const std::shared_ptr<Connection>& c) {
    if (connecting_.erase(c) && c->role() == Role::acceptor) --unauthenticated_;
}

void Mesh::accept_channel(const std::shared_ptr<Connection>& c) {
    const auto& peer = c->peer();
    bool keep = false;
    bool too_many = false;
    {
        std::lock_guard lock(mutex_);
        forget_connecting(c);
        const auto it = peers_.find(peer.node);
        // Any linked peer's channel is taken, whether either side said bye. A stopping node
        // still takes one from a peer that has answered its bye: the caller may already be
        // writing a request on it, and close_all() waits for the caller to close it,
        // answering meanwhile (`draining` for a load-balanced request). A node not stopping
        // takes one from a peer that said bye: its handlers may call us until it closes (our
        // reply bye says so), and a new channel is how a blocking call does it.
        keep = options_.call_channels && it != peers_.end() && it->second->peer().incarnation == peer.incarnation;
        too_many = keep && channels_.count(peer.node) >= max_accepted_channels;
        if (keep && !too_many) channels_.emplace(peer.node, c);
    }
    if (too_many) {
        RPCLB_LOG("mesh", warning) << "refused a call channel from " << peer.node << ": it has "
                                   << max_accepted_channels << " open, the most one peer may have";
        return c->close(LinkError::refused, "too many call channels from " + peer.node + " (at most " +
                                                std::to_string(max_accepted_channels) + ")");
    }
    if (!keep)
        return c->close(LinkError::refused,
                        "a call channel from " + peer.node + ", which has no mesh link to this node");
    RPCLB_LOG("mesh", debug) << "call channel from " << peer.node;
}

std::vector<std::shared_ptr<Connection>> Mesh::take_channels(std::string_view node) {
    std::vector<std::shared_ptr<Connection>> taken;
    std::lock_guard lock(mutex_);
    auto [first, last] = channels_.equal_range(node);
    for (auto it = first; it != last; ++it) taken.push_back(it->second);
    channels_.erase(first, last);
    return taken;
}

std::size_t Mesh::accepted_channels() const {
    std::lock_guard lock(mutex_);
    return channels_.size();
}

void Mesh::on_established(const std::shared_ptr<Connection>& c) {
    if (c->channel()) return accept_channel(c);
    const auto& peer = c->peer();
    std::shared_ptr<Connection> replaced;
    bool keep = true;
    bool clash = false;     // refused: an older incarnation holds the name
    bool displaced = false;  // `replaced` is a newer incarnation under the same name
    bool gave_up = false;    // refused: this node gave up its name
    bool refused_own_name = false;  // an older incarnation of this node's own name answered
    bool dead = false;       // refused: this node declared that incarnation dead
    bool replaced_dead = false;  // `replaced` is an incarnation this node declared dead
    {
        std::lock_guard lock(mutex_);
        forget_connecting(c);
        if (!c->target().empty()) {
            dialing_.erase(c->target());
            tls_refused_.erase(c->target());
        }
        // An incarnation this node declared dead loses its name to any other incarnation:
        // a frozen process that resumes does not take it back from its restart.
        const auto declared_dead = [&](const wire::PeerInfo& p) {
            const auto t = declared_dead_.find(p.node);
            return t != declared_dead_.end() && t->second == p.incarnation;
        };
        if (name_lost_) {
            keep = false;  // this node gave its name up: it takes no link
            gave_up = true;
        } else if (peer.node == options_.name && peer.incarnation == settings_.local.incarnation) {
            if (!c->target().empty()) self_targets_.insert(c->target());
            keep = false;
        } else if (peer.node == options_.name) {
            // Another live process under this node's own name, met directly (one is the
            // other's seed): the older keeps the name, as between third nodes below.
            keep = false;
            if (peer.incarnation > settings_.local.incarnation)
                clash = true;  // it is newer: refused with name_taken_close_reason
            else
                refused_own_name = true;  // it is older: this node is the one refused
        } else if (auto it = peers_.find(peer.node); it == peers_.end()) {
            peers_.emplace(peer.node, c);
            // Back while no other incarnation holds the name: it was wrongly declared dead
            // (too slow to refute), and it is alive again like any other.
            if (declared_dead(peer)) declared_dead_.erase(peer.node);
        } else if (it->second->peer().incarnation != peer.incarnation) {
            // Another incarnation under a name that is still connected: either the node
            // restarted and its old link is not yet known dead (the failure detector probes
            // it next; the newcomer's redial succeeds once it is dropped), or two live
            // processes use one name. The older incarnation (incarnations sort by start
            // time) keeps the name on every node, so a name claimed on both sides of a
            // partition has one owner everywhere after the heal, and the other is told
            // (name_taken_close_reason). One declared dead here loses to the other.
            const bool newcomer_dead = declared_dead(peer);
            const bool holder_dead = declared_dead(it->second->peer());
            if (newcomer_dead && !holder_dead) {
                keep = false;
                dead = true;
            } else if (holder_dead || peer.incarnation < it->second->peer().incarnation) {
                replaced = it->second;
                it->second = c;
                displaced = true;
                replaced_dead = holder_dead;
            } else {
                keep = false;
                clash = true;
            }
        } else {
            // Two connections for one pair (both dialled at once): keep the one dialled
            // by the smaller name, then the one with the smaller dialer nonce. Both ends
            // know both facts, so both reach the same verdict whatever the arrival order.
            const auto& existing = it->second;
            auto rank = [&](const Connection& conn) {
                const auto& dialer = conn.role() == Role::dialer ? options_.name : peer.node;
                return std::make_pair(dialer != std::min(options_.name, peer.node), conn.dialer_nonce());
            };
            if (rank(*c) < rank(*existing)) {
                replaced = existing;
                it->second = c;
            } else {
                keep = false;
            }
        }
    }
    if (!keep) {
        if (dead) {
            if (name_clash_due(peer.node + "\n" + peer.incarnation))
                RPCLB_LOG("mesh", warning) << "refused " << peer.node << " incarnation " << peer.incarnation
                                           << ": it was declared dead here (it stopped answering probes)";
            return c->close(LinkError::declared_dead,
                            "incarnation " + peer.incarnation + " of " + peer.node + " was declared dead");
        }
        if (refused_own_name) {
            on_name_taken(c);  // as if it had refused this node: the same window, the same end
            return c->close(LinkError::refused, "an older incarnation of this node's name answered");
        }
        if (peer.node == options_.name && !clash)
            RPCLB_LOG("mesh", debug) << "connected to itself via " << c->target() << "; ignored";
        if (clash) {
            if (name_clash_due(peer.node + "\n" + peer.incarnation))
                RPCLB_LOG("mesh", warning) << "refused " << peer.node << " incarnation " << peer.incarnation
                                           << ": an older incarnation of that name is connected";
            std::lock_guard lock(detector_mutex_);
            detector_.probe_next(peer.node);  // a restart gets in as soon as the old one is found dead
        }
        if (clash)
            c->close(LinkError::name_taken, "an older incarnation of " + peer.node + " is connected");
        else
            c->close(LinkError::refused, gave_up                    ? "this node gave up its name"
                                         : peer.node == options_.name ? "connected to itself"
                                                                      : "duplicate connection");
        return;
    }
    if (displaced) {
        RPCLB_LOG("mesh", warning) << "dropped " << peer.node << " incarnation " << replaced->peer().incarnation
                                   << (replaced_dead ? ": it was declared dead here, and incarnation "
                                                     : ": the older incarnation ")
                                   << peer.incarnation << " holds that name";
        // The replaced incarnation's memberships and channels go; the holder's sync follows.
        groups_.remove_node(peer.node);
        for (auto& channel : take_channels(peer.node)) channel->abort(LinkError::name_taken);
        if (replaced_dead)
            replaced->close(LinkError::declared_dead, "incarnation " + replaced->peer().incarnation + " of " +
                                                          peer.node + " was declared dead");
        else
            replaced->close(LinkError::name_taken, "an older incarnation of " + peer.node + " is connected");
    } else if (replaced) {
        replaced->close(LinkError::refused, "duplicate connection");
    }
    // Before its memberships arrive: a balancer tells a member that comes back from a
    // restart of it by this.
    groups_.set_incarnation(peer.node, peer.incarnation);
    FailureDetector::Actions told;  // this node's version, when it has refuted a suspicion
    {
        std::lock_guard lock(detector_mutex_);
        told = detector_.add(peer.node, peer.incarnation);
        arm_probe_timer();
    }
    act(std::move(told));
    if (!peer.client && !peer.listen.empty()) {
        std::lock_guard lock(mutex_);
        known_[peer.node] = KnownNode{peer, 0};
    }
    view_changed_ = true;
    // Two nodes that dialled each other at once keep one of the two links: the node was
    // connected already, and the second link is said once, at debug.
    if (replaced && !displaced)
        RPCLB_LOG("mesh", debug) << "kept the other of two crossed links to " << peer.node;
    else
        RPCLB_LOG("mesh", info) << "connected to " << peer.node << (peer.client ? " (client)" : "")
                                << " incarnation " << peer.incarnation;
    if (on_linked_) on_linked_(peer.node);
    // A node heard of already learnt the cluster from whoever heard of it first, and the
    // others were told about it then; a new one (or one lost and linked again) is sent
    // this node's list, and the others are told about it so that they connect to it too.
    bool fresh = true;
    if (!peer.client) {
        std::lock_guard lock(mutex_);
        fresh = remember(heard_, peer.node, peer.incarnation);
    }
    if (fresh) c->send_control(wire::encode(known_nodes()));
    c->send_control(groups_.local_sync_frame());
    if (fresh && !peer.client) {
        const auto frame = wire::encode(wire::Nodes{{peer}});
        std::lock_guard lock(mutex_);
        for (const auto& [name, other] : peers_)
            if (other != c) other->send_control(frame);
    }
}

bool Mesh::remember(std::map<std::string, std::string, std::less<>>& names, const std::string& node,
                    const std::string& incarnation) {
    if (names.size() >= max_names && !names.contains(node)) names.clear();
    auto& known = names[node];
    if (known == incarnation) return false;
    known = incarnation;
    return true;
}

void Mesh::on_nodes(const wire::Nodes& nodes) {
    for (const auto& node : nodes.nodes) {
        // Only the nodes this one dials are remembered from gossip. The others dial this
        // node themselves, and an entry for one of them made from stale gossip (a peer
        // still listing a node that has already gone) would have no connection and no
        // redial to remove it.
        if (node.node == options_.name || node.client || node.listen.empty()) continue;
        {
            std::lock_guard lock(mutex_);
            remember(heard_, node.node, node.incarnation);
            if (!dials(node.node)) continue;
            auto& k = known_[node.node];
            if (k.info.incarnation != node.incarnation) k = KnownNode{node, 0};
            if (peers_.contains(node.node)) continue;
        }
        dial(node.listen);
    }
}

namespace {
// The end of the one warning a link gets for the frames it refuses or ignores.
constexpr const char* said_once = " (said once for this link; later ones are only counted)";
}  // namespace

void Mesh::on_frame(const std::shared_ptr<Connection>& c, wire::Frame&& frame) {
    const auto& node = c->peer().node;
    if (c->channel() && !std::holds_alternative<wire::Request>(frame)) {
        ++bad_frames_;
        if (first_bad_frame(*c))
            RPCLB_LOG("mesh", warning) << "unexpected " << wire::type_name(frame) << " frame on a call channel from "
                                       << node << "; ignored" << said_once;
        return;
    }
    const bool membership = std::holds_alternative<wire::Probe>(frame) ||
                            std::holds_alternative<wire::MemberState>(frame) ||
                            std::holds_alternative<wire::Nodes>(frame) || std::holds_alternative<wire::GroupSync>(frame) ||
                            std::holds_alternative<wire::GroupJoin>(frame) ||
                            std::holds_alternative<wire::GroupLeave>(frame);
    if (membership && !within_budget(c)) return;
    std::visit(
        [&](auto&& f) {
            using T = std::decay_t<decltype(f)>;
            if constexpr (std::is_same_v<T, wire::Request>) {
                sink_.serve_request(c, std::move(f));
            } else if constexpr (std::is_same_v<T, wire::Cast>) {
                sink_.serve_cast(std::move(f));
            } else if constexpr (std::is_same_v<T, wire::Cancel>) {
                sink_.cancel_request(*c, f.id);
            } else if constexpr (std::is_same_v<T, wire::Nodes>) {
                on_nodes(f);
            } else if constexpr (std::is_same_v<T, wire::GroupSync>) {
                accepted_by(node);
                if (!c->peer().client && holds_name(c)) groups_.apply_sync(node, f.groups);
            } else if constexpr (std::is_same_v<T, wire::GroupJoin>) {
                if (!c->peer().client && holds_name(c)) groups_.apply_join(node, f.group, std::move(f.meta));
            } else if constexpr (std::is_same_v<T, wire::GroupLeave>) {
                if (holds_name(c)) groups_.apply_leave(node, f.group);
            } else if constexpr (std::is_same_v<T, wire::Probe>) {
                drive([&](auto now) { return detector_.on_probe(now, node, f); });
            } else if constexpr (std::is_same_v<T, wire::MemberState>) {
                drive([&](auto now) { return detector_.on_member(now, node, f); });
            } else if constexpr (std::is_same_v<T, wire::Bye>) {
                if (f.reply) {
                    // The peer answers our bye: it sends nothing new. It is not stopping,
                    // so our handlers may still call it until we close.
                    c->set_peer_quiet();
                } else {
                    // The peer is stopping (it says bye once): send it nothing new, and say
                    // so. A node whose own stop has begun answers with its plain bye (once:
                    // say_goodbye sends no other), since it will not take requests until the
                    // peer closes; any other node answers with a reply.
                    c->set_going_away();
                    if (!stopping_)
                        c->send(wire::encode(wire::Bye{true}));
                    else if (c->mark_bye_sent())
                        c->send(wire::encode(wire::Bye{}));
                }
                {
                    std::lock_guard lock(mutex_);  // say_goodbye waits on this
                }
                changed_.notify_all();
                RPCLB_LOG("mesh", debug) << node << " said bye";
            } else {
                ++bad_frames_;
                if (first_bad_frame(*c))
                    RPCLB_LOG("mesh", warning) << "unexpected " << wire::type_name(frame) << " frame from " << node
                                               << "; ignored" << said_once;
            }
        },
        std::move(frame));
}

bool Mesh::within_budget(const std::shared_ptr<Connection>& c) {
    bool first_refusal = false;
    {
        std::lock_guard lock(budget_mutex_);
        auto& budget = link_frames_[c.get()].budget;
        if (budget.take(FrameBudget::Clock::now())) return true;
        first_refusal = budget.first_refusal();
    }
    ++bad_frames_;
    if (first_refusal)
        RPCLB_LOG("mesh", warning) << c->peer().node << " sends membership frames faster than "
                                   << FrameBudget::per_second << " a second (" << FrameBudget::burst
                                   << " at once); dropping those past that (said once for this link)";
    return false;
}

void Mesh::on_bad_frame(const std::shared_ptr<Connection>& c, const wire::DecodeError& error) {
    ++bad_frames_;
    // A bad frame before the handshake ends its connection: each is logged. On an
    // established link only the first is, and the rest are counted.
    const bool established = c->established();
    if (established && !first_bad_frame(*c)) return;
    RPCLB_LOG("mesh", warning) << "refused a frame from "
                               << (established ? c->peer().node : std::string("an unauthenticated peer"))
                               << " (" << wire::to_string(error.kind) << "): " << error.message
                               << (established ? said_once : "");
}

bool Mesh::first_bad_frame(const Connection& c) {
    std::lock_guard lock(budget_mutex_);
    return !std::exchange(link_frames_[&c].refusal_logged, true);
}

void Mesh::broadcast(const std::string& frame) {
    std::lock_guard lock(mutex_);
    for (const auto& [name, c] : peers_) c->send_control(frame);
}

std::shared_ptr<Connection> Mesh::connection_to(std::string_view node) const {
    std::lock_guard lock(mutex_);
    auto it = peers_.find(node);
    if (it == peers_.end() || it->second->going_away()) return nullptr;
    return it->second;
}

MeshStats Mesh::stats() const noexcept {
    MeshStats stats;
    stats.bad_frames = bad_frames_.load();
    stats.auth_failures = auth_failures_.load();
    stats.peers_lost = peers_lost_.load();
    stats.frames_sent = settings_.counters->frames_sent.load(std::memory_order_relaxed);
    stats.messages_sent = settings_.counters->messages_sent.load(std::memory_order_relaxed);
    stats.overloaded = settings_.counters->overloaded.load(std::memory_order_relaxed);
    stats.known_nodes = known_count();
    stats.cookie_refusals = cookie_refusals_.load();
    stats.tls_failures = tls_failures_.load();
    stats.unauthenticated_refused = unauthenticated_refused_.load();
    stats.oversize_before_handshake = oversize_before_handshake_.load();
    stats.name_conflicts = name_conflicts_.load();
    return stats;
}

std::size_t Mesh::known_count() const {
    std::lock_guard lock(mutex_);
    return known_.size();
}

std::vector<std::string> Mesh::connected_nodes() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& [name, c] : peers_) names.push_back(name);
    return names;
}

std::vector<std::string> Mesh::routable_nodes() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> nodes;
    for (const auto& [name, c] : peers_)
        if (!c->peer().client && !c->going_away()) nodes.push_back(name);
    return nodes;
}

}  // namespace rpclb::detail
