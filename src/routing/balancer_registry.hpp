// The balancers of one node: hosted ones and routing-only ones (internal).
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/supervisor.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// Loads algorithm plugin `name` from `plugins` and publishes `plugin.loaded` /
/// `plugin.rejected` on `bus` (only while someone listens). Thread-safe.
boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> load_algorithm(PluginRegistry& plugins,
                                                                                        TelemetryBus& bus,
                                                                                        const std::string& name);

/// An algorithm as a balancer's members announce it.
struct AnnouncedAlgorithm {
    std::string algorithm;        ///< "algorithm"; LoadBalancerOptions' default when absent
    boost::json::object options;  ///< "algorithm_opts"; empty when absent
    bool operator==(const AnnouncedAlgorithm&) const = default;
};

/// What the members of `group` announce (Groups::announcement): the first member's, in
/// name order, that announces anything, logging a warning when another member announces
/// something else; nullopt when no member announces. Routing-only balancers are built
/// from it and follow its changes. Takes the Groups' mutex.
std::optional<AnnouncedAlgorithm> announced_algorithm(const Groups& groups, std::string_view group);

/// Finds the balancer a call routes through and owns their life: hosted balancers
/// (started here, each a supervised subtree of the node's root Supervisor) and
/// routing-only ones (built on first use from what the group's members announce).
///
/// The call path reads an immutable table swapped on every change, so a call takes no
/// lock; plugin loading, an algorithm's `init`, group monitors and telemetry all run with
/// no lock held. Changes are serialised by a mutex no call takes.
///
/// Thread safety: every member may be called from any thread.
class BalancerRegistry {
public:
    using SupervisorEvents = std::function<void(const SupervisorEvent&)>;

    BalancerRegistry(Cluster& cluster, const ClusterOptions& options, Groups& groups, PluginRegistry& plugins,
                     TelemetryBus& bus, Supervisor& root, SupervisorEvents supervisor_events);

    /// Cluster::start_balancer.
    std::shared_ptr<LoadBalancer> start(LoadBalancerOptions options);
    /// Cluster::stop_balancer.
    bool stop(std::string_view name);
    /// The balancer to route `name` through: the hosted one, else a routing-only one
    /// (built now if needed). Errors: Failure::no_members when the group is empty; an
    /// announced algorithm that can't be loaded or started.
    Result<std::shared_ptr<LoadBalancer>> route(std::string_view name);
    /// The hosted balancer `name`, or an error naming it (for a call it must count).
    Result<std::shared_ptr<LoadBalancer>> hosted(std::string_view name) const;
    /// The hosted balancer `name` when this node is a live member of it and takes calls
    /// routed by it; null while it drains or after it left (callers then get `draining`).
    std::shared_ptr<LoadBalancer> accepting(std::string_view name) const;
    std::vector<std::string> hosted_names() const;
    /// Forgets every balancer (stop() of the node) and stops the routing-only ones; the
    /// hosted ones stop with the root Supervisor.
    void clear();

    /// Loads an algorithm plugin and publishes `plugin.loaded` / `plugin.rejected`.
    boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> create_algorithm(const std::string& name);

private:
    using Map = std::map<std::string, std::shared_ptr<LoadBalancer>, std::less<>>;
    struct Table {
        Map hosted;
        Map routing;
        /// The hosted balancer `name`, else the routing-only one, else null.
        std::shared_ptr<LoadBalancer> find(std::string_view name) const;
    };
    /// Applies `edit` to a copy of the table and publishes it (under edit_mutex_).
    void edit(const std::function<void(Table&)>& edit);
    Result<std::shared_ptr<LoadBalancer>> build_routing(std::string_view name);

    Cluster& cluster_;
    const ClusterOptions& options_;
    Groups& groups_;
    PluginRegistry& plugins_;
    TelemetryBus& bus_;
    Supervisor& root_;
    SupervisorEvents supervisor_events_;
    std::atomic<std::shared_ptr<const Table>> table_;
    std::mutex edit_mutex_;        // serialises edits of the table; never taken by a call
    std::set<std::string, std::less<>> starting_;  // names being started (guarded by edit_mutex_)
};

}  // namespace rpclb::detail
