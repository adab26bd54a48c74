// A node's state as the admin console shows it, gathered once per request, and its
// Prometheus exposition. Pure functions over plain structs, so they are unit-tested
// without a cluster. Private to librpclb.
#pragma once

#include <rpclb/admin.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/metrics.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rpclb::admin {

/// One hosted balancer.
struct BalancerView {
    std::string name;
    std::string algorithm;
    std::size_t members = 0;
    bool joined = false;
    std::int64_t in_flight = 0;  ///< calls this node sent through it, not finished
    std::int64_t serving = 0;    ///< calls routed here through it that this node runs now
    /// Of `in_flight`, per target node: every member (0 included), then any node that
    /// left with calls still running; sorted by node within each part.
    std::vector<std::pair<std::string, std::int64_t>> in_flight_by_member;
    LoadBalancer::HedgeStats hedging{};  ///< hedges and retries of the calls this node sent
};

/// BalancerView::in_flight_by_member of `balancer`, read now.
std::vector<std::pair<std::string, std::int64_t>> in_flight_per_member(const LoadBalancer& balancer);

/// Everything /metrics reports besides the predecessor's six metrics.
struct NodeView {
    std::string node;
    std::string incarnation;
    bool ready = false;  ///< /readyz answers 200 (admin::State::ready_now)
    bool drained = false;
    std::size_t connections = 0;
    ClusterStats health;
    AdminStats admin;
    std::vector<BalancerView> balancers;
    /// Metrics::snapshot() of the node's metrics.
    std::vector<Metrics::Series> series;
};

/// Calls this node routed through one balancer, from the predecessor's rpc.stop metrics (the
/// caller's side: calls this node made, not calls it served).
struct BalancerCalls {
    std::map<std::string, std::uint64_t> by_status;  ///< "ok" or an ErrorCode name -> calls
    std::uint64_t count = 0;
    double sum_ms = 0;
    /// Per-bucket (not cumulative) counts over the duration metric's bounds, plus +Inf.
    std::vector<std::uint64_t> buckets;
};

/// Per balancer name (non-empty), the calls in `series`.
std::map<std::string, BalancerCalls> balancer_calls(const std::vector<Metrics::Series>& series);

/// The bounds (ms) of the predecessor's duration histogram.
const std::vector<double>& duration_bounds_ms();

/// The `q` quantile (0..1) of a histogram with upper `bounds` and per-bucket `counts`
/// (bounds.size() + 1 of them, the last for +Inf), interpolating linearly inside the
/// bucket as Prometheus' histogram_quantile does (from 0 for the first bucket; a quantile
/// in the +Inf bucket is the last bound). nullopt when the histogram is empty.
std::optional<double> histogram_quantile(double q, const std::vector<double>& bounds,
                                         const std::vector<std::uint64_t>& counts);

/// The `rpclb_*` metric families of `view` in the Prometheus text format 0.0.4 (HELP and
/// TYPE lines, escaped label values); doc/reference/admin-protocol.md lists them.
std::string prometheus_families(const NodeView& view);

}  // namespace rpclb::admin
