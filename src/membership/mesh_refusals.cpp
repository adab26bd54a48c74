// Membership: what the mesh hears when a handshake fails (a bad cookie, a refused cookie,
// a TLS failure), whether those refusals leave this node locked out of its cluster, and
// the reload of its TLS credentials.
// The rest of Mesh is in mesh.cpp, mesh_dial.cpp, mesh_loss.cpp and mesh_probes.cpp.
#include "membership/mesh.hpp"

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/log.hpp>

namespace rpclb::detail {

void Mesh::on_handshake_failed(const std::shared_ptr<Connection>& c, const std::string& reason) {
    ++auth_failures_;
    RPCLB_LOG("mesh", warning) << "handshake with "
                               << (c->target().empty() ? std::string("an incoming peer") : c->target())
                               << " failed: " << reason;
}

void Mesh::on_cookie_refused(const std::shared_ptr<Connection>& c) {
    ++auth_failures_;
    ++cookie_refusals_;
    const auto& node = c->peer().node;
    {
        std::lock_guard lock(mutex_);
        refused_.emplace(c->target(), node);
        // Forget it, or the redial loop would come back to it under its gossiped address.
        for (auto it = known_.begin(); it != known_.end();)
            it = it->first == node || it->second.info.listen == c->target() ? known_.erase(it) : std::next(it);
    }
    RPCLB_LOG("mesh", error) << "wrong cookie: " << node << " at " << c->target()
                             << " refused this node's cookie; not dialling it again (give every node the same cookie)";
    // Calls waiting for a route have nothing left to wait for once nothing is reachable.
    if (on_cookie_refused_ && shut_out()) on_cookie_refused_();
    tell_if_locked_out();
}

void Mesh::on_tls_failed(const std::shared_ptr<Connection>& c, const std::string& reason) {
    ++tls_failures_;
    if (stopping_) return;
    if (!c->target().empty()) {
        std::lock_guard lock(mutex_);
        if (tls_refused_.size() >= 1024) tls_refused_.clear();
        tls_refused_.insert_or_assign(c->target(), reason);
    }
    // An incoming peer is known by its IP address only: each redial comes from a new port.
    auto who = c->target();
    if (who.empty()) {
        who = c->remote();
        if (auto parts = split_host_port(who)) who = parts->host;
    }
    bool first = false;
    {
        std::lock_guard lock(mutex_);
        if (tls_warned_.size() >= 1024) tls_warned_.clear();
        first = tls_warned_.insert(who + "\n" + reason).second;
    }
    if (first)
        RPCLB_LOG("mesh", warning) << "TLS handshake with " << c->describe_peer() << " failed: " << reason
                                   << " (repeats are logged at debug level)";
    else
        RPCLB_LOG("mesh", debug) << "TLS handshake with " << c->describe_peer() << " failed: " << reason;
    if (!c->target().empty()) tell_if_locked_out();
}

std::optional<OptionProblem> Mesh::reload_tls() {
    auto problem = settings_.tls->reload();
    if (!problem) {
        // Whatever fails from now on fails with other credentials: worth a warning again.
        std::lock_guard lock(mutex_);
        tls_warned_.clear();
    }
    return problem;
}

std::optional<std::string> Mesh::refused_by(std::string_view node) const {
    std::lock_guard lock(mutex_);
    for (const auto& [address, name] : refused_)
        if (address == node || name == node) return name;
    return std::nullopt;
}

std::optional<std::string> Mesh::shut_out() const {
    std::lock_guard lock(mutex_);
    if (refused_.empty() || !peers_.empty()) return std::nullopt;
    for (const auto& seed : options_.seeds)
        if (!refused_.contains(seed) && !self_targets_.contains(seed) && !bad_seeds_.contains(seed))
            return std::nullopt;
    for (const auto& [name, k] : known_)
        if (dials(name)) return std::nullopt;
    for (const auto& [name, address] : discovered_)
        if (name != options_.name && !refused_.contains(address)) return std::nullopt;
    return refused_.begin()->second;
}

std::optional<LockedOut> Mesh::locked_out() const {
    std::lock_guard lock(mutex_);
    if (!peers_.empty() || (refused_.empty() && tls_refused_.empty())) return std::nullopt;
    const auto refused = [&](const std::string& address) {
        return refused_.contains(address) || tls_refused_.contains(address);
    };
    for (const auto& seed : options_.seeds)
        if (!refused(seed) && !self_targets_.contains(seed) && !bad_seeds_.contains(seed)) return std::nullopt;
    for (const auto& [name, k] : known_)
        if (dials(name) && !refused(k.info.listen)) return std::nullopt;
    for (const auto& [name, address] : discovered_)
        if (name != options_.name && !refused(address)) return std::nullopt;
    if (!refused_.empty()) return LockedOut{refused_.begin()->second, {}};
    return LockedOut{tls_refused_.begin()->first, tls_refused_.begin()->second};
}

void Mesh::tell_if_locked_out() {
    if (!on_locked_out_) return;
    if (auto why = locked_out()) on_locked_out_(*why);
}

}  // namespace rpclb::detail
