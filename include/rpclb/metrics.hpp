// The predecessor's six metrics, aggregated in memory from the telemetry bus.
#pragma once

#include <rpclb/telemetry.hpp>

#include <boost/json/value.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpclb {

/// How a metric aggregates its event (the predecessor's Telemetry.Metrics kinds).
enum class MetricType {
    counter,       ///< counts events, whatever their measurement
    distribution,  ///< a histogram of the measurement over fixed bucket bounds
};

/// "counter" | "distribution".
std::string_view to_string(MetricType type) noexcept;

/// One metric: what it listens to, what it measures and how it splits series.
struct MetricDefinition {
    std::string name;         ///< dotted, as in the predecessor: "rpc_load_balancer.rpc.duration.milliseconds"
    MetricType type;
    EventName event;          ///< the event it aggregates
    std::string measurement;  ///< the Event field measured: "count", "duration", "members_count"
    std::vector<std::string> tags;  ///< Event metadata fields; one series per distinct values
    /// "millisecond" for the duration (converted from Event::duration's nanoseconds);
    /// "unit" (dimensionless, the predecessor's default) otherwise.
    std::string unit;
    /// distribution: ascending upper bounds, each inclusive (a value v lands in the first
    /// bound b with v <= b; above the last, in an implicit +Inf bucket). counter: empty.
    std::vector<double> buckets;
    std::string description;  ///< one line, for Prometheus' HELP
};

/// Exactly the predecessor's six definitions (`RpcLoadBalancer.Metrics.metrics()`,
/// predecessor-compatibility §5.4 and §7 case 36), in its order, with its names, tags and
/// bucket bounds:
///
/// | name | type | event | measurement | tags |
/// |---|---|---|---|---|
/// | rpc_load_balancer.rpc.request.start.count | counter | rpc.start | count | node, module, function, type, load_balancer |
/// | rpc_load_balancer.rpc.request.stop.count | counter | rpc.stop | count | the same + status |
/// | rpc_load_balancer.rpc.duration.milliseconds | distribution | rpc.stop | duration (ms) | the same + status |
/// | rpc_load_balancer.node.selected.count | counter | node_selected | count | algorithm, load_balancer, node |
/// | rpc_load_balancer.node.selected.empty.count | counter | node_selected.empty | count | algorithm, load_balancer |
/// | rpc_load_balancer.node.pool_size | distribution | node_selected | members_count | algorithm, load_balancer |
///
/// Duration buckets (ms): 0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
/// 10000, 30000, 60000. Pool size buckets: 1, 2, 3, 5, 10, 20, 50, 100, 250.
///
/// Thread safety: the vector is built once, on first use, and never changes.
const std::vector<MetricDefinition>& metric_definitions();

/// In-memory aggregation of metric_definitions() from a TelemetryBus, readable at any
/// time as a snapshot, Prometheus text or JSON.
///
/// Each metric keeps one series per distinct set of tag values (an empty value, e.g. no
/// load balancer, is a value like any other). Recording an event finds its series under a
/// shared lock and updates it with relaxed atomics; only the first event of a new tag set
/// takes the exclusive lock and allocates. Series are never dropped, so the tag values'
/// cardinality (nodes × functions × balancers...) bounds the memory.
///
/// Thread safety: distinct objects safe; shared objects safe. Events may be recorded from
/// any number of threads while snapshots are taken. A snapshot is not atomic across
/// series: events recorded meanwhile may be in some series and not in others, and a
/// distribution's sum may lag its bucket counts by those events.
class Metrics {
public:
    /// Connects to `bus` (a scoped connection) and aggregates every event it emits until
    /// this object is destroyed. `bus` may be destroyed first (aggregation then stops).
    ///
    /// Errors: std::bad_alloc.
    explicit Metrics(TelemetryBus& bus);
    ~Metrics();
    Metrics(const Metrics&) = delete;
    Metrics& operator=(const Metrics&) = delete;

    /// One series of one metric.
    struct Series {
        std::string metric;  ///< the definition's dotted name
        /// (tag, value) in the definition's tag order.
        std::vector<std::pair<std::string, std::string>> tags;
        std::uint64_t count;  ///< events recorded
        /// distribution: sum of the measured values, in the metric's unit; counter: count.
        double sum;
        /// distribution: per-bucket counts, NOT cumulative: element i counts values v with
        /// buckets[i-1] < v <= buckets[i]; the extra last element counts values above the
        /// last bound (+Inf). Their total is `count`. counter: empty.
        std::vector<std::uint64_t> bucket_counts;
    };

    /// Every series: metrics in metric_definitions() order, each metric's series in
    /// ascending order of their tag values. A metric with no event yet has no series.
    std::vector<Series> snapshot() const;

    /// The snapshot in the Prometheus text exposition format (version 0.0.4): per metric
    /// `# HELP` and `# TYPE`; names with '.' (and any character Prometheus doesn't allow)
    /// turned into '_'; counters as `<name>_total`; distributions as histograms
    /// `<name>_bucket{...,le="<bound>"}` (cumulative, ending with le="+Inf"), `<name>_sum`
    /// and `<name>_count`. Label values are escaped (\\, \", \n).
    std::string prometheus_text() const;

    /// The snapshot as JSON: `{"metrics": [{"name", "type", "event", "measurement",
    /// "unit", "tags": [..], "buckets": [..], "series": [{"tags": {tag: value},
    /// "count", "sum", "bucket_counts": [..]}]}]}`, one entry per definition.
    boost::json::value to_json() const;

private:
    struct State;
    std::shared_ptr<State> state_;  // shared with the listener, which may outlive us briefly
    TelemetryBus::ScopedConnection connection_;
};

}  // namespace rpclb
