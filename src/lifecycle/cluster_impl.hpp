// One node, composed of its parts (doc/architecture.md "The parts"). Each part has one
// job; Cluster only wires them together and runs the node's start and stop.
#pragma once

#include "lifecycle/runtime.hpp"
#include "membership/mesh.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/router.hpp"
#include "rpc/rpc_server.hpp"
#include "transport/call_channels.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/supervisor.hpp>

#include <atomic>
#include <memory>
#include <string>

namespace rpclb {

struct Cluster::Impl {
    Impl(Cluster& owner, ClusterOptions options);

    /// Gives the parts with asynchronous operations their aliases of `self` (call once,
    /// right after make_shared: their operations then keep the whole node alive).
    static void wire_up(const std::shared_ptr<Impl>& self);

    void start();
    void stop();

    ClusterOptions options;
    std::string incarnation;
    detail::Runtime runtime;
    TelemetryBus bus;
    Groups groups;
    PluginRegistry plugins;
    // The root of the node's supervision tree: one one_for_all subtree per hosted
    // balancer (its algorithm's services, then the LoadBalancer), named after it.
    Supervisor root;
    detail::BalancerRegistry balancers;
    detail::RpcServer rpc;
    detail::Mesh mesh;
    detail::CallChannels channels;
    detail::Router router;
    std::atomic<bool> running{false};
    std::atomic<bool> stopping{false};
};

}  // namespace rpclb
