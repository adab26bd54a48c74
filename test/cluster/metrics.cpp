// rpclb::Metrics: the predecessor's six definitions (predecessor-compatibility §5.4, §7
// case 36) and their aggregation from the telemetry bus.
#define BOOST_TEST_MODULE metrics
#include <rpclb/metrics.hpp>

#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::Event;
using rpclb::EventName;
using rpclb::MetricDefinition;
using rpclb::Metrics;
using rpclb::MetricType;
using rpclb::TelemetryBus;

namespace {

using Tags = std::vector<std::pair<std::string, std::string>>;
const std::vector<std::string> rpc_tags{"node", "module", "function", "type", "load_balancer"};
const std::vector<std::string> rpc_stop_tags{"node",          "module", "function", "type",
                                             "load_balancer", "status"};

const MetricDefinition& definition(const std::string& name) {
    const auto& all = rpclb::metric_definitions();
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& d) { return d.name == name; });
    BOOST_TEST_REQUIRE((it != all.end()), "no metric " << name);
    return *it;
}

std::vector<Metrics::Series> series_of(const Metrics& metrics, const std::string& metric) {
    std::vector<Metrics::Series> out;
    for (auto& s : metrics.snapshot())
        if (s.metric == metric) out.push_back(std::move(s));
    return out;
}

Event rpc_start(std::string_view node = "b@host", std::string_view lb = "workers") {
    return Event{.name = EventName::rpc_start, .system_time_ns = 1, .type = "call",
                 .node = node, .module = "billing", .function = "charge", .load_balancer = lb};
}

Event rpc_stop(std::chrono::nanoseconds duration, std::string_view status = "ok",
               std::string_view lb = "workers") {
    return Event{.name = EventName::rpc_stop, .duration = duration, .type = "call",
                 .node = "b@host", .module = "billing", .function = "charge",
                 .load_balancer = lb, .status = status};
}

Event node_selected(std::int64_t members, std::string_view node = "c@host") {
    return Event{.name = EventName::node_selected, .count = 1, .members_count = members,
                 .node = node, .load_balancer = "workers", .algorithm = "round_robin"};
}

Event node_selected_empty() {
    return Event{.name = EventName::node_selected_empty, .count = 1,
                 .load_balancer = "workers", .algorithm = "random"};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(metrics)

// ---- the definitions (case 36) -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(exactly_the_predecessors_six_definitions) {
    const auto& all = rpclb::metric_definitions();
    BOOST_TEST_REQUIRE(all.size() == 6u);
    const std::vector<std::string> names{
        "rpc_load_balancer.rpc.request.start.count",
        "rpc_load_balancer.rpc.request.stop.count",
        "rpc_load_balancer.rpc.duration.milliseconds",
        "rpc_load_balancer.node.selected.count",
        "rpc_load_balancer.node.selected.empty.count",
        "rpc_load_balancer.node.pool_size",
    };
    for (std::size_t i = 0; i < names.size(); ++i) BOOST_TEST(all[i].name == names[i]);
}

BOOST_AUTO_TEST_CASE(start_counter_on_rpc_start_without_status_tag) {
    const auto& d = definition("rpc_load_balancer.rpc.request.start.count");
    BOOST_TEST((d.type == MetricType::counter));
    BOOST_TEST((d.event == EventName::rpc_start));
    BOOST_TEST(d.measurement == "count");
    BOOST_TEST(d.tags == rpc_tags, boost::test_tools::per_element());
    BOOST_TEST((std::find(d.tags.begin(), d.tags.end(), "status") == d.tags.end()));
    BOOST_TEST(d.buckets.empty());
}

BOOST_AUTO_TEST_CASE(stop_counter_on_rpc_stop_tags_status_and_load_balancer) {
    const auto& d = definition("rpc_load_balancer.rpc.request.stop.count");
    BOOST_TEST((d.type == MetricType::counter));
    BOOST_TEST((d.event == EventName::rpc_stop));
    BOOST_TEST(d.measurement == "count");
    BOOST_TEST(d.tags == rpc_stop_tags, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(duration_on_rpc_stop_in_milliseconds_with_the_predecessors_buckets) {
    const auto& d = definition("rpc_load_balancer.rpc.duration.milliseconds");
    BOOST_TEST((d.type == MetricType::distribution));
    BOOST_TEST((d.event == EventName::rpc_stop));
    BOOST_TEST(d.measurement == "duration");
    BOOST_TEST(d.unit == "millisecond");
    BOOST_TEST(d.tags == rpc_stop_tags, boost::test_tools::per_element());
    const std::vector<double> buckets{0.1,  0.5,  1,    2.5,  5,     10,    25,    50,   100,
                                      250,  500,  1000, 2500, 5000,  10000, 30000, 60000};
    BOOST_TEST(d.buckets == buckets, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(selected_counter_on_node_selected_tags_algorithm_balancer_node) {
    const auto& d = definition("rpc_load_balancer.node.selected.count");
    BOOST_TEST((d.type == MetricType::counter));
    BOOST_TEST((d.event == EventName::node_selected));
    BOOST_TEST(d.measurement == "count");
    const std::vector<std::string> tags{"algorithm", "load_balancer", "node"};
    BOOST_TEST(d.tags == tags, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(empty_counter_on_node_selected_empty_without_node_tag) {
    const auto& d = definition("rpc_load_balancer.node.selected.empty.count");
    BOOST_TEST((d.type == MetricType::counter));
    BOOST_TEST((d.event == EventName::node_selected_empty));
    const std::vector<std::string> tags{"algorithm", "load_balancer"};
    BOOST_TEST(d.tags == tags, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pool_size_on_node_selected_measures_members_count) {
    const auto& d = definition("rpc_load_balancer.node.pool_size");
    BOOST_TEST((d.type == MetricType::distribution));
    BOOST_TEST((d.event == EventName::node_selected));
    BOOST_TEST(d.measurement == "members_count");
    const std::vector<std::string> tags{"algorithm", "load_balancer"};
    BOOST_TEST(d.tags == tags, boost::test_tools::per_element());
    const std::vector<double> buckets{1, 2, 3, 5, 10, 20, 50, 100, 250};
    BOOST_TEST(d.buckets == buckets, boost::test_tools::per_element());
}

// ---- aggregation ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(start_counter_counts_rpc_start_by_its_tags) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(rpc_start());
    bus.emit(rpc_start());
    bus.emit(rpc_start("b@host", ""));  // no balancer: its own series
    const auto s = series_of(metrics, "rpc_load_balancer.rpc.request.start.count");
    BOOST_TEST_REQUIRE(s.size() == 2u);
    // Ascending tag values: the empty balancer sorts first.
    const Tags direct{{"node", "b@host"}, {"module", "billing"}, {"function", "charge"},
                      {"type", "call"},   {"load_balancer", ""}};
    const Tags balanced{{"node", "b@host"}, {"module", "billing"}, {"function", "charge"},
                        {"type", "call"},   {"load_balancer", "workers"}};
    BOOST_TEST((s[0].tags == direct));
    BOOST_TEST(s[0].count == 1u);
    BOOST_TEST((s[1].tags == balanced));
    BOOST_TEST(s[1].count == 2u);
    BOOST_TEST(s[1].bucket_counts.empty());
    // rpc.start feeds nothing else.
    BOOST_TEST(metrics.snapshot().size() == 2u);
}

BOOST_AUTO_TEST_CASE(stop_counter_splits_series_by_status_and_load_balancer) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(rpc_stop(1ms, "ok"));
    bus.emit(rpc_stop(1ms, "request_timeout"));
    bus.emit(rpc_stop(1ms, "ok", "other"));
    bus.emit(rpc_stop(1ms, "ok"));
    const auto s = series_of(metrics, "rpc_load_balancer.rpc.request.stop.count");
    BOOST_TEST_REQUIRE(s.size() == 3u);
    std::map<std::pair<std::string, std::string>, std::uint64_t> by_lb_status;
    for (const auto& x : s) {
        BOOST_TEST_REQUIRE(x.tags.size() == 6u);
        BOOST_TEST(x.tags[5].first == "status");
        BOOST_TEST(x.tags[4].first == "load_balancer");
        by_lb_status[{x.tags[4].second, x.tags[5].second}] = x.count;
    }
    BOOST_TEST((by_lb_status[{"workers", "ok"}] == 2u));
    BOOST_TEST((by_lb_status[{"workers", "request_timeout"}] == 1u));
    BOOST_TEST((by_lb_status[{"other", "ok"}] == 1u));
}

BOOST_AUTO_TEST_CASE(duration_is_converted_to_milliseconds_into_inclusive_buckets) {
    TelemetryBus bus;
    Metrics metrics(bus);
    const auto& bounds = definition("rpc_load_balancer.rpc.duration.milliseconds").buckets;
    bus.emit(rpc_stop(50us));      // 0.05 ms → le 0.1
    bus.emit(rpc_stop(100us));     // 0.1 ms exactly → le 0.1 (bounds are inclusive)
    bus.emit(rpc_stop(1ms));       // → le 1
    bus.emit(rpc_stop(3ms));       // → le 5
    bus.emit(rpc_stop(59s));       // → le 60000
    bus.emit(rpc_stop(70s));       // above every bound → +Inf
    const auto s = series_of(metrics, "rpc_load_balancer.rpc.duration.milliseconds");
    BOOST_TEST_REQUIRE(s.size() == 1u);
    const auto& b = s[0].bucket_counts;
    BOOST_TEST_REQUIRE(b.size() == bounds.size() + 1);
    auto at = [&](double bound) {
        return b[std::find(bounds.begin(), bounds.end(), bound) - bounds.begin()];
    };
    BOOST_TEST(at(0.1) == 2u);
    BOOST_TEST(at(0.5) == 0u);
    BOOST_TEST(at(1) == 1u);
    BOOST_TEST(at(2.5) == 0u);
    BOOST_TEST(at(5) == 1u);
    BOOST_TEST(at(60000) == 1u);
    BOOST_TEST(b.back() == 1u);
    BOOST_TEST(s[0].count == 6u);
    BOOST_TEST(s[0].sum == 0.05 + 0.1 + 1 + 3 + 59000 + 70000, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(selected_counter_counts_node_selected_per_picked_node) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(node_selected(3, "a@host"));
    bus.emit(node_selected(3, "c@host"));
    bus.emit(node_selected(3, "c@host"));
    const auto s = series_of(metrics, "rpc_load_balancer.node.selected.count");
    BOOST_TEST_REQUIRE(s.size() == 2u);
    const Tags a{{"algorithm", "round_robin"}, {"load_balancer", "workers"}, {"node", "a@host"}};
    const Tags c{{"algorithm", "round_robin"}, {"load_balancer", "workers"}, {"node", "c@host"}};
    BOOST_TEST((s[0].tags == a));
    BOOST_TEST(s[0].count == 1u);
    BOOST_TEST((s[1].tags == c));
    BOOST_TEST(s[1].count == 2u);
}

BOOST_AUTO_TEST_CASE(empty_counter_counts_node_selected_empty_without_node) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(node_selected_empty());
    bus.emit(node_selected_empty());
    const auto s = series_of(metrics, "rpc_load_balancer.node.selected.empty.count");
    BOOST_TEST_REQUIRE(s.size() == 1u);
    const Tags tags{{"algorithm", "random"}, {"load_balancer", "workers"}};
    BOOST_TEST((s[0].tags == tags));
    BOOST_TEST(s[0].count == 2u);
    // node_selected.empty is not a pick: neither the selected counter nor pool_size move.
    BOOST_TEST(series_of(metrics, "rpc_load_balancer.node.selected.count").empty());
    BOOST_TEST(series_of(metrics, "rpc_load_balancer.node.pool_size").empty());
}

BOOST_AUTO_TEST_CASE(pool_size_distributes_members_count) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(node_selected(1, "a@host"));
    bus.emit(node_selected(4, "b@host"));  // → le 5
    bus.emit(node_selected(4, "c@host"));
    bus.emit(node_selected(300));          // → +Inf
    const auto s = series_of(metrics, "rpc_load_balancer.node.pool_size");
    BOOST_TEST_REQUIRE(s.size() == 1u);  // no node tag: one series for the balancer
    const Tags tags{{"algorithm", "round_robin"}, {"load_balancer", "workers"}};
    BOOST_TEST((s[0].tags == tags));
    const std::vector<std::uint64_t> expected{1, 0, 0, 2, 0, 0, 0, 0, 0, 1};
    BOOST_TEST(s[0].bucket_counts == expected, boost::test_tools::per_element());
    BOOST_TEST(s[0].count == 4u);
    BOOST_TEST(s[0].sum == 309.0);
}

BOOST_AUTO_TEST_CASE(events_outside_the_six_metrics_are_ignored) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit({.name = EventName::membership_join, .node = "a@host", .group = "workers"});
    bus.emit({.name = EventName::least_cpu_poll_stop, .duration = 1ms, .load_balancer = "w"});
    bus.emit({.name = EventName::rpc_exception, .duration = 1ms, .type = "call",
              .kind = "error", .reason = "boom"});
    BOOST_TEST(metrics.snapshot().empty());
}

BOOST_AUTO_TEST_CASE(destroying_metrics_disconnects_it) {
    TelemetryBus bus;
    {
        Metrics metrics(bus);
        BOOST_TEST(bus.active());
    }
    BOOST_TEST(!bus.active());
}

BOOST_AUTO_TEST_CASE(concurrent_emission_from_four_threads_sums_exactly) {
    TelemetryBus bus;
    Metrics metrics(bus);
    constexpr int threads = 4, per_thread = 20000;
    const std::vector<std::string> statuses{"ok", "request_timeout", "service_unavailable"};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                // All threads create the same new series at once, to race the insertions.
                bus.emit(rpc_stop(std::chrono::microseconds(250 * (i % 4)),
                                  statuses[(i + t) % statuses.size()]));
                bus.emit(node_selected(1 + i % 8, (i % 2) ? "a@host" : "b@host"));
            }
        });
    for (auto& w : workers) w.join();

    auto total = [&](const std::string& metric) {
        std::uint64_t n = 0;
        for (const auto& s : series_of(metrics, metric)) n += s.count;
        return n;
    };
    const std::uint64_t events = threads * per_thread;
    BOOST_TEST(total("rpc_load_balancer.rpc.request.stop.count") == events);
    BOOST_TEST(total("rpc_load_balancer.rpc.duration.milliseconds") == events);
    BOOST_TEST(total("rpc_load_balancer.node.selected.count") == events);
    BOOST_TEST(total("rpc_load_balancer.node.pool_size") == events);
    BOOST_TEST(series_of(metrics, "rpc_load_balancer.rpc.request.stop.count").size() == 3u);

    // Durations 0, 0.25, 0.5, 0.75 ms a quarter each; the sum is exact in binary.
    double sum = 0;
    for (const auto& s : series_of(metrics, "rpc_load_balancer.rpc.duration.milliseconds"))
        sum += s.sum;
    BOOST_TEST(sum == events / 4 * (0.0 + 0.25 + 0.5 + 0.75));
    const auto pool = series_of(metrics, "rpc_load_balancer.node.pool_size");
    BOOST_TEST_REQUIRE(pool.size() == 1u);
    // members 1..8 an eighth each: le1, le2, le3, le5 (4,5), le10 (6..8).
    const std::uint64_t e8 = events / 8;
    const std::vector<std::uint64_t> expected{e8, e8, e8, 2 * e8, 3 * e8, 0, 0, 0, 0, 0};
    BOOST_TEST(pool[0].bucket_counts == expected, boost::test_tools::per_element());
}

// ---- exposition ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(prometheus_text_is_well_formed) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(rpc_start());
    bus.emit(rpc_stop(3ms));
    bus.emit(rpc_stop(70s));
    bus.emit(node_selected(4));
    bus.emit(node_selected_empty());
    // A label value that needs escaping.
    bus.emit(node_selected(2, "odd\"name\\with\nbreak"));
    const std::string text = metrics.prometheus_text();
    BOOST_TEST_MESSAGE(text);

    const std::regex help(R"(# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
    const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|histogram))");
    const std::string label = R"([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*")";
    const std::regex sample("([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{" + label + "(?:," + label +
                            ")*\\})? (-?[0-9.]+(?:e[+-]?[0-9]+)?)");
    std::istringstream lines(text);
    std::string line, family, family_type;
    std::map<std::string, std::string> types;
    std::optional<std::uint64_t> last_bucket;
    std::map<std::string, double> values;
    while (std::getline(lines, line)) {
        std::smatch m;
        if (line.rfind("# HELP", 0) == 0) {
            BOOST_TEST(std::regex_match(line, help), line);
        } else if (std::regex_match(line, m, type)) {
            family = m[1];
            family_type = m[2];
            BOOST_TEST(!types.count(family), "TYPE twice for " << family);
            types[family] = family_type;
            last_bucket.reset();
        } else {
            BOOST_TEST_REQUIRE(std::regex_match(line, m, sample), "malformed: " << line);
            const std::string name = m[1];
            BOOST_TEST(name.rfind(family, 0) == 0u, name << " outside family " << family);
            values[line.substr(0, line.rfind(' '))] = std::stod(m[3]);
            if (family_type == "histogram" && name == family + "_bucket") {
                const auto v = std::stoull(m[3]);
                if (last_bucket) BOOST_TEST(v >= *last_bucket);  // cumulative
                last_bucket = v;
            }
        }
    }
    BOOST_TEST(types.size() == 6u);
    BOOST_TEST(types["rpc_load_balancer_rpc_request_start_count_total"] == "counter");
    BOOST_TEST(types["rpc_load_balancer_rpc_request_stop_count_total"] == "counter");
    BOOST_TEST(types["rpc_load_balancer_rpc_duration_milliseconds"] == "histogram");
    BOOST_TEST(types["rpc_load_balancer_node_selected_count_total"] == "counter");
    BOOST_TEST(types["rpc_load_balancer_node_selected_empty_count_total"] == "counter");
    BOOST_TEST(types["rpc_load_balancer_node_pool_size"] == "histogram");

    const std::string stop_labels =
        R"({node="b@host",module="billing",function="charge",type="call",load_balancer="workers",status="ok")";
    const std::string d = "rpc_load_balancer_rpc_duration_milliseconds";
    BOOST_TEST(values[d + "_bucket" + stop_labels + R"(,le="2.5"})"] == 0.0);
    BOOST_TEST(values[d + "_bucket" + stop_labels + R"(,le="5"})"] == 1.0);
    BOOST_TEST(values[d + "_bucket" + stop_labels + R"(,le="60000"})"] == 1.0);
    BOOST_TEST(values[d + "_bucket" + stop_labels + R"(,le="+Inf"})"] == 2.0);
    BOOST_TEST(values[d + "_count" + stop_labels + "}"] == 2.0);
    BOOST_TEST(values[d + "_sum" + stop_labels + "}"] == 70003.0);
    BOOST_TEST(values["rpc_load_balancer_rpc_request_stop_count_total" + stop_labels + "}"] ==
               2.0);
    BOOST_TEST(text.find(R"(node="odd\"name\\with\nbreak")") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(json_lists_every_metric_with_its_series) {
    TelemetryBus bus;
    Metrics metrics(bus);
    bus.emit(node_selected(4));
    const auto json = metrics.to_json();
    const auto& list = json.at("metrics").as_array();
    BOOST_TEST_REQUIRE(list.size() == 6u);
    const auto& pool = list[5].as_object();
    BOOST_TEST(pool.at("name").as_string() == "rpc_load_balancer.node.pool_size");
    BOOST_TEST(pool.at("type").as_string() == "distribution");
    BOOST_TEST(pool.at("event").as_string() == "node_selected");
    BOOST_TEST(pool.at("measurement").as_string() == "members_count");
    BOOST_TEST(pool.at("buckets").as_array().size() == 9u);
    const auto& series = pool.at("series").as_array();
    BOOST_TEST_REQUIRE(series.size() == 1u);
    BOOST_TEST(series[0].at("tags").at("algorithm").as_string() == "round_robin");
    BOOST_TEST(series[0].at("count").to_number<std::uint64_t>() == 1u);
    BOOST_TEST(series[0].at("bucket_counts").as_array().size() == 10u);
    BOOST_TEST(list[0].at("series").as_array().empty());
}

BOOST_AUTO_TEST_SUITE_END()
