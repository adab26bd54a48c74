#include "admin/node_view.hpp"
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <stdexcept>
#include <utility>

namespace rpclb::admin {

namespace {

constexpr std::string_view stop_count_metric = "rpc_load_balancer.rpc.request.stop.count";
constexpr std::string_view duration_metric = "rpc_load_balancer.rpc.duration.milliseconds";
constexpr std::string_view selected_metric = "rpc_load_balancer.node.selected.count";

std::string_view tag(const Metrics::Series& s, std::string_view name) {
    for (const auto& [k, v] : s.tags)
        if (k == name) return v;
    return {};
}

using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// Writes families one after the other: HELP and TYPE once, then samples.
class Exposition {
public:
    void family(std::string_view name, std::string_view type, std::string_view help) {
        out_ += "# HELP ";
        out_ += name;
        out_ += ' ';
        out_ += help;  // our own one-line texts: nothing to escape
        out_ += "\n# TYPE ";
        out_ += name;
        out_ += ' ';
        out_ += type;
        out_ += '\n';
    }

    template <class Number>
    void sample(std::string_view name, Labels labels, Number value, std::string_view le = {}) {
        out_ += name;
        if (labels.size() || !le.empty()) {
            out_ += '{';
            bool first = true;
            for (const auto& [k, v] : labels) {
                if (!first) out_ += ',';
                first = false;
                label(k, v);
            }
            if (!le.empty()) {
                if (!first) out_ += ',';
                label("le", le);
            }
            out_ += '}';
        }
        out_ += ' ';
        number(out_, value);
        out_ += '\n';
    }

    static void number(std::string& out, double value) {
        char buffer[32];
        out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
    }
    static void number(std::string& out, std::uint64_t value) {
        char buffer[24];
        out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
    }
    static void number(std::string& out, std::int64_t value) {
        char buffer[24];
        out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
    }

    std::string take() { return std::move(out_); }

private:
    void label(std::string_view key, std::string_view value) {
        out_ += key;
        out_ += "=\"";
        for (const char c : value) {
            if (c == '\\') out_ += "\\\\";
            else if (c == '"') out_ += "\\\"";
            else if (c == '\n') out_ += "\\n";
            else out_ += c;
        }
        out_ += '"';
    }

    std::string out_;
};

std::uint64_t u(bool b) { return b ? 1u : 0u; }

}  // namespace

const std::vector<double>& duration_bounds_ms() {
    static const std::vector<double> bounds = [] {
        for (const auto& d : metric_definitions())
            if (d.name == duration_metric) return d.buckets;
        throw std::logic_error("the predecessor's duration metric is missing");
    }();
    return bounds;
}

std::map<std::string, BalancerCalls> balancer_calls(const std::vector<Metrics::Series>& series) {
    std::map<std::string, BalancerCalls> calls;
    for (const auto& s : series) {
        const auto lb = tag(s, "load_balancer");
        if (lb.empty()) continue;
        if (s.metric == stop_count_metric) {
            auto& c = calls[std::string(lb)];
            c.by_status[std::string(tag(s, "status"))] += s.count;
        } else if (s.metric == duration_metric) {
            auto& c = calls[std::string(lb)];
            c.count += s.count;
            c.sum_ms += s.sum;
            if (c.buckets.size() < s.bucket_counts.size()) c.buckets.resize(s.bucket_counts.size());
            for (std::size_t i = 0; i < s.bucket_counts.size(); ++i) c.buckets[i] += s.bucket_counts[i];
        }
    }
    return calls;
}

std::optional<double> histogram_quantile(double q, const std::vector<double>& bounds,
                                         const std::vector<std::uint64_t>& counts) {
    std::uint64_t total = 0;
    for (auto c : counts) total += c;
    if (total == 0 || bounds.empty()) return std::nullopt;
    q = std::clamp(q, 0.0, 1.0);
    const double rank = q * static_cast<double>(total);
    std::uint64_t below = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const auto in_bucket = counts[i];
        if (in_bucket > 0 && static_cast<double>(below + in_bucket) >= rank) {
            if (i >= bounds.size()) return bounds.back();
            const double lower = i == 0 ? 0.0 : bounds[i - 1];
            const double fraction = (rank - static_cast<double>(below)) / static_cast<double>(in_bucket);
            return lower + (bounds[i] - lower) * fraction;
        }
        below += in_bucket;
    }
    return bounds.back();
}

std::vector<std::pair<std::string, std::int64_t>> in_flight_per_member(const LoadBalancer& balancer) {
    const auto members = balancer.members();
    auto counts = balancer.in_flight_by_member();
    std::vector<std::pair<std::string, std::int64_t>> out;
    out.reserve(members->nodes.size() + counts.size());
    for (const auto& node : members->nodes) {
        const auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == node; });
        out.emplace_back(node, it == counts.end() ? 0 : it->second);
        if (it != counts.end()) it->second = 0;
    }
    for (auto& [node, n] : counts)
        if (n > 0) out.emplace_back(std::move(node), n);
    return out;
}

std::string prometheus_families(const NodeView& v) {
    Exposition x;
    x.family("rpclb_node_info", "gauge", "Always 1; labels name the node and its incarnation.");
    x.sample("rpclb_node_info", {{"node", v.node}, {"incarnation", v.incarnation}}, std::uint64_t{1});
    x.family("rpclb_node_ready", "gauge", "1 when /readyz answers 200.");
    x.sample("rpclb_node_ready", {}, u(v.ready));
    x.family("rpclb_node_drained", "gauge", "1 between an admin drain and undrain.");
    x.sample("rpclb_node_drained", {}, u(v.drained));
    x.family("rpclb_peers_connected", "gauge", "Nodes with an established connection.");
    x.sample("rpclb_peers_connected", {}, static_cast<std::uint64_t>(v.connections));
    const std::tuple<const char*, const char*, std::uint64_t> health[] = {
        {"rpclb_bad_frames_total", "Frames refused by the codec.", v.health.bad_frames},
        {"rpclb_auth_failures_total", "Handshakes that failed the cookie check.", v.health.auth_failures},
        {"rpclb_peers_lost_total", "Established peers that went away.", v.health.peers_lost},
        {"rpclb_unauthenticated_refused_total",
         "Accepted connections closed at once: too many connections were in their cookie handshake.",
         v.health.unauthenticated_refused},
        {"rpclb_oversize_before_handshake_total",
         "Connections closed for a message over 8 KiB before their cookie handshake was done.",
         v.health.oversize_before_handshake},
        {"rpclb_slow_inline_runs_total", "Inline handler runs over their slow threshold.", v.health.slow_inline_runs},
        {"rpclb_expired_requests_total", "Requests not run: they waited for a worker past their caller's timeout, their connection closed meanwhile, or their caller cancelled them.",
         v.health.expired_requests},
        {"rpclb_bad_traceparents_total", "Requests whose traceparent was malformed: each started a new trace.",
         v.health.bad_traceparents},
    };
    for (const auto& [name, help, value] : health) {
        x.family(name, "counter", help);
        x.sample(name, {}, value);
    }
    x.family("rpclb_channel_calls_total", "counter", "Blocking calls this node sent on a call channel.");
    x.sample("rpclb_channel_calls_total", {}, v.health.channel_calls);
    x.family("rpclb_call_channels_open", "gauge", "Call channels open now, dialled by this node or accepted.");
    x.sample("rpclb_call_channels_open", {}, v.health.channels_open);

    x.family("rpclb_balancer_members", "gauge", "Members of a hosted balancer's group.");
    for (const auto& b : v.balancers)
        x.sample("rpclb_balancer_members", {{"load_balancer", b.name}, {"algorithm", b.algorithm}},
                 static_cast<std::uint64_t>(b.members));
    x.family("rpclb_balancer_joined", "gauge", "1 when this node is a member of the balancer's group.");
    for (const auto& b : v.balancers) x.sample("rpclb_balancer_joined", {{"load_balancer", b.name}}, u(b.joined));
    x.family("rpclb_balancer_in_flight", "gauge", "Calls this node sent through the balancer, not finished.");
    for (const auto& b : v.balancers) x.sample("rpclb_balancer_in_flight", {{"load_balancer", b.name}}, b.in_flight);
    x.family("rpclb_balancer_member_in_flight", "gauge",
             "Calls this node sent through the balancer to one node, not finished.");
    for (const auto& b : v.balancers)
        for (const auto& [node, n] : b.in_flight_by_member)
            x.sample("rpclb_balancer_member_in_flight", {{"load_balancer", b.name}, {"node", node}}, n);
    x.family("rpclb_balancer_serving", "gauge", "Calls routed here through the balancer that this node runs now.");
    for (const auto& b : v.balancers) x.sample("rpclb_balancer_serving", {{"load_balancer", b.name}}, b.serving);
    using Hedging = LoadBalancer::HedgeStats;
    const std::tuple<const char*, const char*, std::uint64_t Hedging::*> hedging[] = {
        {"rpclb_balancer_hedged_calls_total", "Calls this node sent through the balancer with hedging.",
         &Hedging::hedged_calls},
        {"rpclb_balancer_hedges_total", "Extra attempts of hedged calls this node sent.", &Hedging::hedges},
        {"rpclb_balancer_hedge_wins_total", "Hedged calls an extra attempt answered first.", &Hedging::hedge_wins},
        {"rpclb_balancer_retries_total", "Idempotent calls sent again after their link was lost.", &Hedging::retries},
        {"rpclb_balancer_budget_refusals_total", "Extra attempts and retries not sent: the budget was spent.",
         &Hedging::budget_refusals},
        {"rpclb_balancer_late_replies_total", "Answers to attempts that lost to another, dropped.",
         &Hedging::late_replies},
    };
    for (const auto& [name, help, field] : hedging) {
        x.family(name, "counter", help);
        for (const auto& b : v.balancers) x.sample(name, {{"load_balancer", b.name}}, b.hedging.*field);
    }

    const auto calls = balancer_calls(v.series);
    x.family("rpclb_balancer_calls_total", "counter",
             "Calls this node routed through a balancer, by outcome (ok or the error code).");
    for (const auto& [lb, c] : calls)
        for (const auto& [status, n] : c.by_status)
            x.sample("rpclb_balancer_calls_total", {{"load_balancer", lb}, {"status", status}}, n);
    x.family("rpclb_balancer_call_duration_seconds", "histogram",
             "Duration of the calls this node routed through a balancer.");
    const auto& bounds = duration_bounds_ms();
    for (const auto& [lb, c] : calls) {
        if (c.buckets.empty()) continue;
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < c.buckets.size(); ++i) {
            cumulative += c.buckets[i];
            std::string le = "+Inf";
            if (i < bounds.size()) {
                // Plain decimals ("0.0001", not "1e-04"), as Prometheus clients write bounds.
                char buffer[32];
                le.assign(buffer, std::to_chars(buffer, buffer + sizeof buffer, bounds[i] / 1000.0,
                                                std::chars_format::fixed).ptr);
            }
            x.sample("rpclb_balancer_call_duration_seconds_bucket", {{"load_balancer", lb}}, cumulative, le);
        }
        x.sample("rpclb_balancer_call_duration_seconds_sum", {{"load_balancer", lb}}, c.sum_ms / 1000.0);
        x.sample("rpclb_balancer_call_duration_seconds_count", {{"load_balancer", lb}}, c.count);
    }
    x.family("rpclb_balancer_picks_total", "counter", "Members a balancer picked on this node.");
    for (const auto& s : v.series)
        if (s.metric == selected_metric)
            x.sample("rpclb_balancer_picks_total", {{"load_balancer", tag(s, "load_balancer")}, {"node", tag(s, "node")}},
                     s.count);

    const std::tuple<const char*, const char*, const char*, std::uint64_t> admin[] = {
        {"rpclb_admin_requests_total", "counter", "Admin requests answered.", v.admin.requests},
        {"rpclb_admin_wrong_tokens_total", "counter", "Admin requests refused for a missing or wrong token.",
         v.admin.wrong_tokens},
        {"rpclb_admin_bad_requests_total", "counter", "Malformed, unknown or oversized admin requests.",
         v.admin.bad_requests},
        {"rpclb_admin_subscribers", "gauge", "Telemetry subscriptions open now.", v.admin.subscribers},
        {"rpclb_admin_events_dropped_total", "counter", "Events dropped because a subscriber read too slowly.",
         v.admin.events_dropped},
    };
    for (const auto& [name, type, help, value] : admin) {
        x.family(name, type, help);
        x.sample(name, {}, value);
    }
    return x.take();
}

}  // namespace rpclb::admin
