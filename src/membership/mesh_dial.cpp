// Membership: dialling — seeds, nodes a discovery source names, nodes peers gossip — and
// the reconnect tick that dials again those that are not linked. The rest of Mesh is in
// mesh.cpp.
#include "membership/mesh.hpp"
#include "transport/tls.hpp"

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/log.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <random>

namespace rpclb::detail {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void Mesh::dial(const std::string& address) {
    if (stopping_) return;
    std::shared_ptr<Connection> c;
    {
        std::lock_guard lock(mutex_);
        if (dialing_.contains(address) || self_targets_.contains(address) || refused_.contains(address) ||
            bad_seeds_.contains(address) || name_lost_)
            return;
        dialing_.insert(address);
        c = std::make_shared<Connection>(asio::make_strand(ioc_), address, *this, settings_);
        connecting_.insert(c);
    }
    RPCLB_LOG("mesh", debug) << "dialling " << address;
    c->start();
}

bool Mesh::linked_to(const std::string& address) const {
    for (const auto& [name, c] : peers_)
        if (c->peer().listen == address || c->target() == address) return true;
    return false;
}

void Mesh::dial_seed(const std::string& seed) {
    if (!seed.starts_with(dns_seed_prefix)) return dial(seed);
    const auto parts = split_host_port(std::string_view(seed).substr(dns_seed_prefix.size()));
    {
        std::lock_guard lock(mutex_);
        if (!parts || stopping_ || bad_seeds_.contains(seed) || !resolving_.insert(seed).second) return;
    }
    auto resolver = std::make_shared<asio::ip::tcp::resolver>(ioc_);
    resolver->async_resolve(
        parts->host, parts->port,
        [self = self_.lock(), seed, resolver](boost::system::error_code ec, asio::ip::tcp::resolver::results_type found) {
            std::vector<std::string> to_dial;
            bool first_failure = false;
            {
                std::lock_guard lock(self->mutex_);
                self->resolving_.erase(seed);
                if (ec)
                    first_failure = self->warned_seeds_.insert(seed).second;
                else
                    for (const auto& entry : found)
                        if (auto address = to_host_port(entry.endpoint()); !self->linked_to(address))
                            to_dial.push_back(std::move(address));
            }
            if (first_failure && !self->stopping_)
                RPCLB_LOG("mesh", warning) << "seed \"" << seed << "\": cannot resolve: " << ec.message()
                                           << "; still retrying every " << self->options_.reconnect_interval.count()
                                           << " ms";
            for (const auto& address : to_dial) self->dial(address);
        });
}

std::vector<std::string> Mesh::discovered_to_dial() const {
    std::vector<std::string> to_dial;
    for (const auto& [name, address] : discovered_)
        if (name != options_.name && !peers_.contains(name) && !linked_to(address)) to_dial.push_back(address);
    return to_dial;
}

void Mesh::set_discovered(std::map<std::string, std::string, std::less<>> nodes) {
    std::vector<std::string> to_dial;
    {
        std::lock_guard lock(mutex_);
        discovered_ = std::move(nodes);
        to_dial = discovered_to_dial();
    }
    for (const auto& address : to_dial) dial(address);
}

void Mesh::reconnect_tick() {
    std::vector<std::string> seeds;
    std::vector<std::string> known;
    {
        std::lock_guard lock(mutex_);
        // A dns: seed is resolved again each time: the name's addresses may have changed.
        for (const auto& seed : options_.seeds)
            if (seed.starts_with(dns_seed_prefix) || !linked_to(seed)) seeds.push_back(seed);
        for (auto& address : discovered_to_dial()) seeds.push_back(std::move(address));
        for (const auto& [name, k] : known_)
            if (!peers_.contains(name) && dials(name)) known.push_back(k.info.listen);
    }
    for (const auto& seed : seeds) dial_seed(seed);
    for (const auto& address : known) dial(address);
    // Every tick while this node's links changed in the last settle_ticks, else every
    // regossip_ticks-th.
    if (view_changed_.exchange(false)) settling_until_ = ticks_ + settle_ticks;
    if (++ticks_ <= settling_until_ || ticks_ % regossip_ticks == 0) {
        // To one peer in turn, not to all: the whole mesh then sends N lists per round,
        // not N². The turn starts at a place of this node's own: with one start for all,
        // every node would send its list to about the same peer each round (their peers
        // sort alike), and a node could wait N rounds for one.
        std::shared_ptr<Connection> to;
        {
            std::lock_guard lock(mutex_);
            if (!peers_.empty())
                to = std::next(peers_.begin(),
                               static_cast<std::ptrdiff_t>((regossip_start_ + lists_sent_++) % peers_.size()))
                         ->second;
        }
        if (to) to->send_control(wire::encode(known_nodes()));
    }
}

wire::Nodes Mesh::known_nodes() const {
    wire::Nodes nodes;
    if (!options_.client) nodes.nodes.push_back(settings_.local);
    std::lock_guard lock(mutex_);
    for (const auto& [name, c] : peers_)
        if (!c->peer().client) nodes.nodes.push_back(c->peer());
    return nodes;
}

}  // namespace rpclb::detail
