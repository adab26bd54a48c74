// One node, composed of its parts (doc/architecture.md "The parts"). Each part has one
// job; Cluster only wires them together and runs the node's start and stop.
#pragma once

#include "lifecycle/member_wait.hpp"
#include "lifecycle/runtime.hpp"
#include "membership/etcd_discovery.hpp"
#include "membership/mesh.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/cluster_link.hpp"
#include "routing/router.hpp"
#include "rpc/rpc_server.hpp"
#include "transport/call_channels.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/supervisor.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/array.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// The node's parts and their wiring. It is what the parts below reach of the node
/// through their own interfaces: the balancers' ClusterLink and the registry's
/// BalancerSupervisor (the root Supervisor's subtrees). Lives in a shared_ptr that the
/// parts' asynchronous operations share (wire_up), so it outlives the Cluster while they
/// run.
///
/// Thread safety: as Cluster's (every override may be called from any thread).
struct Cluster::Impl final : detail::ClusterLink, detail::BalancerSupervisor {
    explicit Impl(ClusterOptions options);

    /// Gives the parts with asynchronous operations their aliases of `self` (call once,
    /// right after make_shared: their operations then keep the whole node alive).
    static void wire_up(const std::shared_ptr<Impl>& self);

    void start();
    void stop();

    // detail::ClusterLink
    const std::string& node_name() const noexcept override { return options.name; }
    const std::vector<std::string>& excluded_node_patterns() const noexcept override {
        return options.excluded_node_patterns;
    }
    Groups& groups() noexcept override { return node_groups; }
    PluginRegistry& plugins() noexcept override { return plugin_registry; }
    TelemetryBus& telemetry() noexcept override { return bus; }
    boost::asio::any_io_executor workers() override;
    /// Where a completion runs when its handler names no executor: the worker pool, or,
    /// once the pool has stopped, the system executor.
    boost::asio::any_completion_executor completion_fallback();
    void serve(std::string module, std::string function, Handler handler) override;
    void call(std::string node, std::string module, std::string function, boost::json::array args,
              std::chrono::milliseconds timeout, CallCompletion handler) override;

    // detail::BalancerSupervisor
    void supervise(const std::shared_ptr<LoadBalancer>& balancer) override;
    void unsupervise(std::string_view name) override;

    ClusterOptions options;
    std::string incarnation;
    std::mutex name_lost_mutex;
    std::function<void(const std::string&)> name_lost_handler;  // Cluster::on_name_lost
    detail::Runtime runtime;
    std::shared_ptr<detail::LoadGauge> load;  // this node's load (Cluster::report_load, the worker pool)
    TelemetryBus bus;
    Groups node_groups;
    PluginRegistry plugin_registry;
    // The root of the node's supervision tree: one one_for_all subtree per hosted
    // balancer (its algorithm's services, then the LoadBalancer), named after it.
    Supervisor root;
    detail::BalancerRegistry balancers;
    detail::RpcServer rpc;
    detail::Mesh mesh;
    std::weak_ptr<detail::Mesh> mesh_ref;  // the mesh, for callbacks that may run after stop()
    // Discovery through etcd (ClusterOptions::discovery), from start() on; null without it.
    std::shared_ptr<detail::EtcdDiscovery> discovery;
    detail::CallChannels channels;
    detail::Router router;
    detail::MemberWaits waits;  // Cluster::wait_for_members
    // Cluster::wait_for_node waits on it; notified (under the mutex) when a link comes up,
    // the node is locked out, gives up its name, or stops.
    std::mutex link_wait_mutex;
    std::condition_variable link_changed;
    void notify_link_waits();
    std::atomic<bool> running{false};
    std::atomic<bool> stopping{false};
};

}  // namespace rpclb
