// The admin console's Prometheus output and latency quantiles (src/admin/node_view.hpp),
// fed by a real Metrics over a real TelemetryBus.
#define BOOST_TEST_MODULE admin_metrics
#include <boost/test/unit_test.hpp>

#include "../../src/admin/node_view.hpp"

#include <map>
#include <regex>
#include <set>
#include <sstream>

using namespace rpclb::admin;
using namespace std::chrono_literals;

namespace {

// Emits one rpc.stop through balancer `lb`.
void emit_call(rpclb::TelemetryBus& bus, std::string_view lb, std::string_view status, std::chrono::nanoseconds d) {
    bus.emit({.name = rpclb::EventName::rpc_stop, .duration = d, .type = "call", .node = "", .module = "demo",
              .function = "echo", .load_balancer = lb, .status = status});
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// The value of the sample line starting with `prefix` (name and labels), or NaN.
double sample(const std::string& text, const std::string& prefix) {
    for (const auto& line : lines_of(text))
        if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
    return std::nan("");
}

NodeView sample_view(const std::vector<rpclb::Metrics::Series>& series) {
    NodeView v;
    v.node = "a\"b@host";  // a quote to escape
    v.incarnation = "inc1";
    v.ready = true;
    v.connections = 2;
    v.health.bad_frames = 3;
    v.health.peers_lost = 1;
    v.health.channel_calls = 7;
    v.health.channels_open = 2;
    v.health.expired_requests = 4;
    v.admin.wrong_tokens = 5;
    v.balancers.push_back({"w", "round_robin", 3, true, 2, 1, {{"b@host", 2}, {"c@host", 0}}});
    v.series = series;
    return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(admin_metrics)

BOOST_AUTO_TEST_CASE(quantile_interpolates_inside_the_bucket) {
    const std::vector<double> bounds{1, 2, 4};
    BOOST_TEST(histogram_quantile(0.5, bounds, {0, 10, 0, 0}).value() == 1.5);
    BOOST_TEST(histogram_quantile(1.0, bounds, {0, 10, 0, 0}).value() == 2.0);
    BOOST_TEST(histogram_quantile(0.5, bounds, {10, 0, 0, 0}).value() == 0.5);
    BOOST_TEST(histogram_quantile(0.99, bounds, {50, 0, 0, 50}).value() == 4.0);  // +Inf: the last bound
    BOOST_TEST(histogram_quantile(0.25, bounds, {0, 0, 4, 0}).value() == 2.5);
    BOOST_TEST(!histogram_quantile(0.5, bounds, {0, 0, 0, 0}).has_value());
}

BOOST_AUTO_TEST_CASE(balancer_calls_sum_series_per_balancer) {
    rpclb::TelemetryBus bus;
    rpclb::Metrics metrics(bus);
    emit_call(bus, "w", "ok", 300us);
    emit_call(bus, "w", "ok", 3ms);
    emit_call(bus, "w", "request_timeout", 20ms);
    emit_call(bus, "", "ok", 1ms);  // a direct call: no balancer
    const auto calls = balancer_calls(metrics.snapshot());
    BOOST_TEST_REQUIRE(calls.size() == 1u);
    const auto& w = calls.at("w");
    BOOST_TEST(w.count == 3u);
    BOOST_TEST(w.by_status.at("ok") == 2u);
    BOOST_TEST(w.by_status.at("request_timeout") == 1u);
    BOOST_TEST(w.sum_ms == 23.3, boost::test_tools::tolerance(1e-9));
    BOOST_TEST(w.buckets.size() == duration_bounds_ms().size() + 1);
    BOOST_TEST(histogram_quantile(0.5, duration_bounds_ms(), w.buckets).value() <= 5.0);
}

BOOST_AUTO_TEST_CASE(prometheus_text_is_well_formed) {
    rpclb::TelemetryBus bus;
    rpclb::Metrics metrics(bus);
    emit_call(bus, "w", "ok", 300us);
    emit_call(bus, "w", "service_unavailable", 2ms);
    bus.emit({.name = rpclb::EventName::node_selected, .members_count = 3, .node = "b@host", .load_balancer = "w",
              .algorithm = "round_robin"});
    const auto text = prometheus_families(sample_view(metrics.snapshot()));

    // Exposition format 0.0.4: HELP then TYPE once per family, samples of declared families only.
    const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
    const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
    const std::regex line(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? [-+0-9.eE]+|[-+]Inf)");
    std::set<std::string> families;
    std::map<std::string, std::string> types;
    std::string last_help;
    for (const auto& l : lines_of(text)) {
        std::smatch m;
        if (std::regex_match(l, m, help)) {
            BOOST_TEST(families.insert(m[1]).second, "family twice: " << m[1]);
            last_help = m[1];
        } else if (std::regex_match(l, m, type)) {
            BOOST_TEST(m[1] == last_help);
            types[m[1]] = m[2];
        } else {
            BOOST_TEST_REQUIRE(std::regex_match(l, m, line), "not a sample line: " << l);
            std::string name = m[1];
            for (const char* suffix : {"_bucket", "_sum", "_count"})
                if (!types.count(name) && name.size() > std::strlen(suffix) &&
                    name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
                    name.resize(name.size() - std::strlen(suffix));
            BOOST_TEST(types.count(name) == 1u, "sample of an undeclared family: " << l);
        }
    }
    // Naming conventions: counters end in _total, durations are in seconds.
    for (const auto& [name, t] : types) {
        if (t == "counter") BOOST_TEST(name.ends_with("_total"), name);
        BOOST_TEST(name.starts_with("rpclb_"), name);
    }
    BOOST_TEST(types.at("rpclb_balancer_call_duration_seconds") == "histogram");

    BOOST_TEST(text.find(R"(rpclb_node_info{node="a\"b@host",incarnation="inc1"} 1)") != std::string::npos);
    BOOST_TEST(sample(text, "rpclb_peers_connected") == 2);
    BOOST_TEST(sample(text, "rpclb_bad_frames_total") == 3);
    BOOST_TEST(sample(text, "rpclb_peers_lost_total") == 1);
    BOOST_TEST(sample(text, "rpclb_channel_calls_total") == 7);
    BOOST_TEST(sample(text, "rpclb_call_channels_open") == 2);
    BOOST_TEST(sample(text, "rpclb_expired_requests_total") == 4);
    BOOST_TEST(sample(text, "rpclb_admin_wrong_tokens_total") == 5);
    BOOST_TEST(sample(text, R"(rpclb_balancer_members{load_balancer="w",algorithm="round_robin"})") == 3);
    BOOST_TEST(sample(text, R"(rpclb_balancer_in_flight{load_balancer="w"})") == 2);
    BOOST_TEST(sample(text, R"(rpclb_balancer_member_in_flight{load_balancer="w",node="b@host"})") == 2);
    BOOST_TEST(sample(text, R"(rpclb_balancer_member_in_flight{load_balancer="w",node="c@host"})") == 0);
    BOOST_TEST(sample(text, R"(rpclb_balancer_calls_total{load_balancer="w",status="ok"})") == 1);
    BOOST_TEST(sample(text, R"(rpclb_balancer_calls_total{load_balancer="w",status="service_unavailable"})") == 1);
    BOOST_TEST(sample(text, R"(rpclb_balancer_picks_total{load_balancer="w",node="b@host"})") == 1);
    // The histogram in seconds: 0.3 ms lands at le="0.0005", 2 ms at le="0.0025"; cumulative.
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_bucket{load_balancer="w",le="0.0001"})") == 0);
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_bucket{load_balancer="w",le="0.0005"})") == 1);
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_bucket{load_balancer="w",le="0.0025"})") == 2);
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_bucket{load_balancer="w",le="+Inf"})") == 2);
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_count{load_balancer="w"})") == 2);
    BOOST_TEST(sample(text, R"(rpclb_balancer_call_duration_seconds_sum{load_balancer="w"})") == 0.0023,
               boost::test_tools::tolerance(1e-9));
}

// NodeView::ready is /readyz's answer (admin::State::ready_now: false while drained,
// starting, stopping or shut out by cookie refusals); the gauges show it and the drain.
BOOST_AUTO_TEST_CASE(ready_gauge_shows_readiness_and_drained_gauge_the_drain) {
    auto v = sample_view({});
    v.ready = false;
    v.drained = true;
    auto text = prometheus_families(v);
    BOOST_TEST(sample(text, "rpclb_node_ready") == 0);
    BOOST_TEST(sample(text, "rpclb_node_drained") == 1);
    v.ready = true;
    v.drained = false;
    text = prometheus_families(v);
    BOOST_TEST(sample(text, "rpclb_node_ready") == 1);
    BOOST_TEST(sample(text, "rpclb_node_drained") == 0);
}

BOOST_AUTO_TEST_SUITE_END()
