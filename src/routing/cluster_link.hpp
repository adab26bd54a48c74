// What a balancer reaches of the node that hosts it (internal).
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/handler.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/json/array.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace rpclb::detail {

/// The node as its balancers see it (LoadBalancer, its BalancerHost, the BalancerRegistry
/// that builds them): its name and node filter exclusions, its groups, plugins and
/// telemetry, the worker pool, serving a function and a direct call, nothing more.
/// Implemented by Cluster (lifecycle), which outlives every balancer it hosts or routes
/// through while it runs.
///
/// Thread safety: every member may be called from any thread, concurrently. The
/// references returned stay valid as long as the node.
class ClusterLink {
public:
    /// The completion of call(): `void(CallResult)`.
    using CallCompletion = boost::asio::any_completion_handler<void(CallResult)>;

    virtual ~ClusterLink() = default;

    /// This node's name, `short@host`.
    virtual const std::string& node_name() const noexcept = 0;
    /// ClusterOptions::excluded_node_patterns, for matching node_match_list.
    virtual const std::vector<std::string>& excluded_node_patterns() const noexcept = 0;
    /// The node's replicated groups (one per balancer).
    virtual Groups& groups() noexcept = 0;
    /// The plugin loader algorithms come from.
    virtual PluginRegistry& plugins() noexcept = 0;
    /// The node's telemetry bus.
    virtual TelemetryBus& telemetry() noexcept = 0;
    /// The executor of the worker pool (post short work, build timers).
    virtual boost::asio::any_io_executor workers() = 0;
    /// Cluster::register_function with default HandlerOptions. Throws std::bad_alloc.
    virtual void serve(std::string module, std::string function, Handler handler) = 0;
    /// Cluster::async_call of a direct call to `node` with `timeout`: no balancer, so
    /// nothing is picked, counted or retried. `handler` runs on its associated executor
    /// (default: workers()), never inside call(); errors as Cluster::call's.
    virtual void call(std::string node, std::string module, std::string function, boost::json::array args,
                      std::chrono::milliseconds timeout, CallCompletion handler) = 0;

protected:
    ClusterLink() = default;
    ClusterLink(const ClusterLink&) = delete;
    ClusterLink& operator=(const ClusterLink&) = delete;
};

}  // namespace rpclb::detail
