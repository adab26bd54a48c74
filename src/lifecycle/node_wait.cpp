// Waiting for a connection to a node (Cluster::wait_for_node).
#include "lifecycle/cluster_impl.hpp"
#include "lifecycle/member_wait.hpp"
#include <rpclb/error.hpp>

#include <string>

namespace rpclb {
namespace {

// `e`, made for a wait on a balancer, turned into one for a wait on node `peer`.
ErrorMessage for_peer(ErrorMessage e, std::string_view peer) {
    e.details.erase("load_balancer");
    e.details["peer"] = peer;
    return e;
}

}  // namespace

void Cluster::Impl::notify_link_waits() {
    { std::lock_guard lock(link_wait_mutex); }  // a waiter between its check and its wait gets this
    link_changed.notify_all();
}

Result<void> Cluster::wait_for_node(std::string_view node, std::chrono::milliseconds timeout) {
    auto& impl = *impl_;
    const auto failure = [&](Failure f) { return for_peer(detail::wait_failure(f, name(), ""), node); };
    if (impl.runtime.on_network_thread()) {
        auto e = failure(Failure::would_deadlock);
        e.message = "blocking wait_for_node from a network thread would deadlock";
        return e;
    }
    if (node == name()) return {};
    if (!impl.running) {
        auto e = failure(Failure::node_stopping);
        if (!impl.stopping) {
            e.message = "node not started";
            e.reason = {};
        }
        return e;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(impl.link_wait_mutex);
    for (bool last = false;; last = impl.link_changed.wait_until(lock, deadline) == std::cv_status::timeout) {
        if (impl.mesh.connection_to(node)) return {};
        if (impl.stopping) return failure(Failure::node_stopping);
        if (auto why = impl.mesh.name_lost()) return for_peer(detail::name_taken_failure(*why, name(), ""), node);
        if (auto out = impl.mesh.locked_out()) return for_peer(detail::locked_out_failure(*out, name(), ""), node);
        if (last) {
            auto e = failure(Failure::timeout);
            e.message = std::string(node) + " is not connected after " + std::to_string(timeout.count()) + " ms";
            return e;
        }
    }
}

}  // namespace rpclb
