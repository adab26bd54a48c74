// Membership: the listener, dialling, gossip of known nodes, one connection per pair,
// peer loss.
#include "cluster_impl.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/strand.hpp>

namespace rpclb {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using detail::Connection;
namespace wire = detail::wire;

namespace {

tcp::endpoint parse_endpoint(const std::string& address) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos)
        throw std::invalid_argument("listen address \"" + address + "\" is not HOST:PORT");
    auto host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "localhost") host = "127.0.0.1";
    boost::system::error_code ec;
    auto ip = asio::ip::make_address(host, ec);
    if (ec)
        throw std::invalid_argument("listen address \"" + address + "\": \"" + host +
                                    "\" is not an IP address");
    const auto port_text = address.substr(colon + 1);
    if (port_text.empty() || port_text.size() > 5 ||
        port_text.find_first_not_of("0123456789") != std::string::npos || std::stoul(port_text) > 65535)
        throw std::invalid_argument("listen address \"" + address + "\": port must be 0..65535");
    return {ip, static_cast<unsigned short>(std::stoul(port_text))};
}

// The node that dials when two nodes learn of each other: the smaller name. Both ends
// compute the same answer, so a pair normally gets exactly one connection.
bool dials_first(const std::string& a, const std::string& b) { return a < b; }

}  // namespace

void Cluster::Impl::start_listener() {
    const auto endpoint = parse_endpoint(options.listen);
    acceptor.emplace(ioc);
    acceptor->open(endpoint.protocol());
    acceptor->set_option(tcp::acceptor::reuse_address(true));
    boost::system::error_code ec;
    acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::system_error(ec, "cannot listen on " + options.listen);
    bound = acceptor->local_endpoint();
    auto advertised_host = bound->address().to_string();
    if (bound->address().is_unspecified()) advertised_host = options.name.substr(options.name.find('@') + 1);
    settings.local.listen = advertised_host + ":" + std::to_string(bound->port());
    do_accept();
}

void Cluster::Impl::do_accept() {
    acceptor->async_accept(asio::make_strand(ioc), [self = shared_from_this()](boost::system::error_code ec,
                                                                               Connection::Socket socket) {
        if (ec) {
            if (ec == asio::error::operation_aborted || self->stopping) return;
            RPCLB_LOG("mesh", warning) << "accept failed: " << ec.message();
        } else {
            auto c = std::make_shared<Connection>(std::move(socket), *self, self->settings);
            {
                std::lock_guard lock(self->mesh_mutex);
                self->connecting.insert(c);
            }
            c->start();
        }
        if (!self->stopping) self->do_accept();
    });
}

void Cluster::Impl::dial(const std::string& address) {
    if (stopping) return;
    std::shared_ptr<Connection> c;
    {
        std::lock_guard lock(mesh_mutex);
        if (dialing.contains(address) || self_targets.contains(address)) return;
        dialing.insert(address);
        c = std::make_shared<Connection>(asio::make_strand(ioc), address, *this, settings);
        connecting.insert(c);
    }
    RPCLB_LOG("mesh", debug) << "dialling " << address;
    c->start();
}

void Cluster::Impl::schedule_reconnect() {
    reconnect_timer.expires_after(options.reconnect_interval);
    reconnect_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (ec || self->stopping) return;
        std::vector<std::string> to_dial;
        {
            std::lock_guard lock(self->mesh_mutex);
            for (const auto& seed : self->options.seeds) {
                bool connected = false;
                for (const auto& [name, c] : self->peers)
                    if (c->peer().listen == seed || c->target() == seed) connected = true;
                if (!connected) to_dial.push_back(seed);
            }
        }
        {
            std::lock_guard lock(self->mesh_mutex);
            for (const auto& [name, k] : self->known)
                if (!self->peers.contains(name) && (self->options.client || dials_first(self->options.name, name)))
                    to_dial.push_back(k.info.listen);
        }
        for (const auto& address : to_dial) self->dial(address);
        self->schedule_reconnect();
    });
}

wire::Nodes Cluster::Impl::known_nodes() const {
    wire::Nodes nodes;
    if (!options.client) nodes.nodes.push_back(settings.local);
    std::lock_guard lock(mesh_mutex);
    for (const auto& [name, c] : peers)
        if (!c->peer().client) nodes.nodes.push_back(c->peer());
    return nodes;
}

void Cluster::Impl::on_established(const std::shared_ptr<Connection>& c) {
    const auto& peer = c->peer();
    std::shared_ptr<Connection> replaced;
    bool keep = true;
    bool clash = false;
    {
        std::lock_guard lock(mesh_mutex);
        connecting.erase(c);
        if (!c->target().empty()) dialing.erase(c->target());
        if (peer.node == options.name) {
            if (!c->target().empty()) self_targets.insert(c->target());
            keep = false;
        } else if (auto it = peers.find(peer.node); it == peers.end()) {
            peers.emplace(peer.node, c);
        } else if (it->second->peer().incarnation != peer.incarnation) {
            // Another incarnation under a name that is still connected: either the node
            // restarted and its old connection is not yet known dead (the keep-alive will
            // drop it within the idle timeout, then the newcomer's redial succeeds), or two
            // processes use one name. Either way the connected one stays, as Erlang refuses
            // a second node of the same name.
            keep = false;
            clash = true;
        } else {
            // Two connections for one pair (both dialled at once): keep the one dialled
            // by the smaller name, then the one with the smaller dialer nonce. Both ends
            // know both facts, so both reach the same verdict whatever the arrival order.
            const auto& existing = it->second;
            auto rank = [&](const Connection& conn) {
                const auto& dialer = conn.role() == detail::Role::dialer ? options.name : peer.node;
                return std::make_pair(dialer != std::min(options.name, peer.node), conn.dialer_nonce());
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
        if (peer.node == options.name)
            RPCLB_LOG("mesh", debug) << "connected to itself via " << c->target() << "; ignored";
        if (clash)
            RPCLB_LOG("mesh", warning) << "refused " << peer.node << " incarnation " << peer.incarnation
                                       << ": that name is connected as another incarnation";
        c->close(peer.node == options.name ? "connected to itself"
                 : clash                   ? "name in use by a connected incarnation"
                                           : "duplicate connection");
        return;
    }
    if (replaced) replaced->close("duplicate connection");
    if (!peer.client && !peer.listen.empty()) {
        std::lock_guard lock(mesh_mutex);
        known[peer.node] = KnownNode{peer, 0};
    }
    RPCLB_LOG("mesh", info) << "connected to " << peer.node << (peer.client ? " (client)" : "")
                            << " incarnation " << peer.incarnation;
    c->send(wire::encode(known_nodes()));
    c->send(groups.local_sync_frame());
    // Tell the others about the newcomer so they connect to it too.
    if (!peer.client) {
        const auto frame = wire::encode(wire::Nodes{{peer}});
        std::lock_guard lock(mesh_mutex);
        for (const auto& [name, other] : peers)
            if (other != c) other->send(frame);
    }
}

void Cluster::Impl::on_nodes(const wire::Nodes& nodes) {
    for (const auto& node : nodes.nodes) {
        if (node.node == options.name || node.client || node.listen.empty()) continue;
        {
            std::lock_guard lock(mesh_mutex);
            auto& k = known[node.node];
            if (k.info.incarnation != node.incarnation) k = KnownNode{node, 0};
            if (peers.contains(node.node)) continue;
        }
        if (options.client || dials_first(options.name, node.node)) dial(node.listen);
    }
}

void Cluster::Impl::on_frame(const std::shared_ptr<Connection>& c, wire::Frame&& frame) {
    const auto& node = c->peer().node;
    std::visit(
        [&](auto&& f) {
            using T = std::decay_t<decltype(f)>;
            if constexpr (std::is_same_v<T, wire::Request>) {
                serve_request(c, std::move(f));
            } else if constexpr (std::is_same_v<T, wire::Cast>) {
                serve_cast(std::move(f));
            } else if constexpr (std::is_same_v<T, wire::Nodes>) {
                on_nodes(f);
            } else if constexpr (std::is_same_v<T, wire::GroupSync>) {
                if (!c->peer().client) groups.apply_sync(node, f.groups);
            } else if constexpr (std::is_same_v<T, wire::GroupJoin>) {
                if (!c->peer().client) groups.apply_join(node, f.group, std::move(f.meta));
            } else if constexpr (std::is_same_v<T, wire::GroupLeave>) {
                groups.apply_leave(node, f.group);
            } else if constexpr (std::is_same_v<T, wire::Bye>) {
                // The peer is stopping (or answers our bye): send it nothing new.
                c->set_going_away();
                if (c->mark_bye_sent()) c->send(wire::encode(wire::Bye{}));
                RPCLB_LOG("mesh", debug) << node << " said bye";
            } else {
                ++bad_frames;
                RPCLB_LOG("mesh", warning) << "unexpected " << wire::type_name(frame) << " frame from "
                                           << node << "; ignored";
            }
        },
        std::move(frame));
}

void Cluster::Impl::on_closed(const std::shared_ptr<Connection>& c, const std::string& reason,
                              bool established) {
    bool lost = false;
    {
        std::lock_guard lock(mesh_mutex);
        connecting.erase(c);
        if (!c->target().empty()) dialing.erase(c->target());
        if (established) {
            auto it = peers.find(c->peer().node);
            if (it != peers.end() && it->second == c) {
                peers.erase(it);
                lost = true;
            }
        }
    }
    if (!established && !c->target().empty()) {
        std::lock_guard lock(mesh_mutex);
        for (auto it = known.begin(); it != known.end(); ++it) {
            if (it->second.info.listen != c->target() || peers.contains(it->first)) continue;
            if (++it->second.failures >= max_redials) {
                RPCLB_LOG("mesh", info) << "giving up on " << it->first << " after " << max_redials
                                        << " failed dials";
                known.erase(it);
            }
            break;
        }
    }
    if (!lost) {
        if (!established && !stopping)
            RPCLB_LOG("mesh", debug) << "connection " << (c->target().empty() ? "from a peer" : "to " + c->target())
                                     << " ended before joining: " << reason;
        return;
    }
    ++peers_lost;
    if (!stopping) RPCLB_LOG("mesh", info) << "lost " << c->peer().node << ": " << reason;
    groups.remove_node(c->peer().node);
}

void Cluster::Impl::on_bad_frame(const std::shared_ptr<Connection>& c, const wire::DecodeError& error) {
    ++bad_frames;
    RPCLB_LOG("mesh", warning) << "refused a frame from "
                               << (c->established() ? c->peer().node : std::string("an unauthenticated peer"))
                               << " (" << wire::to_string(error.kind) << "): " << error.message;
}

void Cluster::Impl::on_handshake_failed(const std::shared_ptr<Connection>& c, const std::string& reason) {
    ++auth_failures;
    RPCLB_LOG("mesh", warning) << "handshake with "
                               << (c->target().empty() ? std::string("an incoming peer") : c->target())
                               << " failed: " << reason;
}

void Cluster::Impl::broadcast(const std::string& frame) {
    std::lock_guard lock(mesh_mutex);
    for (const auto& [name, c] : peers) c->send(frame);
}

std::shared_ptr<Connection> Cluster::Impl::connection_to(std::string_view node) const {
    std::lock_guard lock(mesh_mutex);
    auto it = peers.find(node);
    if (it == peers.end() || it->second->going_away()) return nullptr;
    return it->second;
}

void Cluster::Impl::say_goodbye(std::chrono::milliseconds limit) {
    std::vector<std::shared_ptr<Connection>> all;
    {
        std::lock_guard lock(mesh_mutex);
        for (auto& [name, c] : peers) all.push_back(c);
    }
    for (auto& c : all)
        if (c->mark_bye_sent()) c->send(wire::encode(wire::Bye{}));
    // Requests that crossed our bye on the wire are still served meanwhile; each peer's
    // answer is the last frame it sends us before going quiet.
    const auto deadline = std::chrono::steady_clock::now() + limit;
    auto answered = [&] {
        for (auto& c : all)
            if (!c->going_away() && !c->closed()) return false;
        return true;
    };
    while (!answered() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (!answered()) RPCLB_LOG("mesh", warning) << "some peers did not answer bye in time";
}

}  // namespace rpclb
