// The balancers of one node: hosted ones and routing-only ones (internal).
#pragma once

#include "routing/cluster_link.hpp"
#include "rpc/served_balancers.hpp"

#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/object.hpp>

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

/// An algorithm and the outlier options as a balancer's members announce them
/// (LoadBalancer::announcement()).
struct AnnouncedAlgorithm {
    std::string algorithm;        ///< "algorithm"; LoadBalancerOptions' default when absent
    boost::json::object options;  ///< "algorithm_opts"; empty when absent
    /// "outlier_detection"; the defaults when absent (a member that does not announce
    /// them) or malformed (a warning is logged).
    OutlierDetection outlier_detection;
    /// "slow_start"; off when absent or malformed (without a warning: off is what a member
    /// that announces nothing runs).
    SlowStart slow_start;
    /// "hedging"; HedgingPolicy's defaults when absent or malformed (without a warning, as
    /// slow start).
    HedgingPolicy hedging;
    bool operator==(const AnnouncedAlgorithm& other) const;
};

/// What the members of `group` announce (Groups::announcement): the first member's, in
/// name order, that announces anything, logging a warning when another member announces
/// another algorithm or other outlier options; nullopt when no member announces.
/// Routing-only balancers are built from it and follow its changes. Never throws for what
/// a peer announced. Takes the Groups' mutex.
std::optional<AnnouncedAlgorithm> announced_algorithm(const Groups& groups, std::string_view group);

/// How hosted balancers run: each with its algorithm's services as one supervised unit,
/// restarted together (predecessor-compatibility §1.1, §3.6;
/// doc/explanation/supervision.md). Implemented by Cluster (lifecycle) on the node's root
/// Supervisor.
///
/// Thread safety: both members may be called from any thread; calls for the same name are
/// not concurrent (BalancerRegistry reserves a name while it starts it).
class BalancerSupervisor {
public:
    virtual ~BalancerSupervisor() = default;
    /// Starts `balancer`'s services (LoadBalancer::prepare()) and then the balancer, under
    /// a supervisor named after it. Returns once it is started (joined when it matches).
    /// Throws what a failing start throws (std::runtime_error naming the balancer); then
    /// nothing of it is left running.
    virtual void supervise(const std::shared_ptr<LoadBalancer>& balancer) = 0;
    /// Stops what supervise() started for `name`: the balancer (leave, drain), then its
    /// services. No effect for an unknown name.
    virtual void unsupervise(std::string_view name) = 0;
};

/// Finds the balancer a call routes through and owns their life: hosted balancers
/// (started here, each run by the BalancerSupervisor) and routing-only ones (built on
/// first use from what the group's members announce). It is also the serving side's
/// ServedBalancers: a request routed here counts on the hosted balancer that routed it.
///
/// The call path reads an immutable table swapped on every change, so a call takes no
/// lock; plugin loading, an algorithm's `init`, group monitors and telemetry all run with
/// no lock held. Changes are serialised by a mutex no call takes.
///
/// Thread safety: every member may be called from any thread.
class BalancerRegistry final : public ServedBalancers {
public:
    /// `client`: a client node, whose hosted balancers never join their group.
    BalancerRegistry(ClusterLink& node, bool client, BalancerSupervisor& supervisor);

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

    // ServedBalancers: accepting(name), its served calls counted (LoadBalancer::track_served).
    Handle admit(std::string_view name) noexcept override;
    void release(const Handle& handle) noexcept override;
    /// Forgets every balancer (stop() of the node) and stops the routing-only ones; the
    /// hosted ones stop with their supervisor (the node's root Supervisor).
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

    ClusterLink& node_;
    const bool client_;
    BalancerSupervisor& supervisor_;
    std::atomic<std::shared_ptr<const Table>> table_;
    std::mutex edit_mutex_;        // serialises edits of the table; never taken by a call
    std::set<std::string, std::less<>> starting_;  // names being started (guarded by edit_mutex_)
};

}  // namespace rpclb::detail
