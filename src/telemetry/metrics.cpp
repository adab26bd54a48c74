#include <rpclb/metrics.hpp>

#include <boost/container_hash/hash.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <stdexcept>
#include <unordered_map>

namespace rpclb {
namespace {

constexpr std::size_t max_tags = 8;

// ---- the definitions -----------------------------------------------------------------------

std::vector<MetricDefinition> predecessor_definitions() {
    const std::vector<std::string> rpc_tags{"node", "module", "function", "type", "load_balancer"};
    std::vector<std::string> rpc_stop_tags = rpc_tags;
    rpc_stop_tags.push_back("status");
    return {
        {"rpc_load_balancer.rpc.request.start.count", MetricType::counter, EventName::rpc_start,
         "count", rpc_tags, "unit", {}, "RPC calls and casts started"},
        {"rpc_load_balancer.rpc.request.stop.count", MetricType::counter, EventName::rpc_stop,
         "count", rpc_stop_tags, "unit", {}, "RPC calls and casts finished, by status"},
        {"rpc_load_balancer.rpc.duration.milliseconds", MetricType::distribution,
         EventName::rpc_stop, "duration", rpc_stop_tags, "millisecond",
         {0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000},
         "RPC duration in milliseconds, by status"},
        {"rpc_load_balancer.node.selected.count", MetricType::counter, EventName::node_selected,
         "count", {"algorithm", "load_balancer", "node"}, "unit", {},
         "Nodes picked by a load balancer"},
        {"rpc_load_balancer.node.selected.empty.count", MetricType::counter,
         EventName::node_selected_empty, "count", {"algorithm", "load_balancer"}, "unit", {},
         "Picks attempted on an empty member list"},
        {"rpc_load_balancer.node.pool_size", MetricType::distribution, EventName::node_selected,
         "members_count", {"algorithm", "load_balancer"}, "unit",
         {1, 2, 3, 5, 10, 20, 50, 100, 250}, "Members a pick chose from"},
    };
}

// ---- reading an Event ----------------------------------------------------------------------

using Field = std::string_view Event::*;

Field event_field(std::string_view tag) {
    static constexpr std::array<std::pair<std::string_view, Field>, 17> fields{{
        {"type", &Event::type},
        {"node", &Event::node},
        {"module", &Event::module},
        {"function", &Event::function},
        {"load_balancer", &Event::load_balancer},
        {"status", &Event::status},
        {"algorithm", &Event::algorithm},
        {"group", &Event::group},
        {"outcome", &Event::outcome},
        {"kind", &Event::kind},
        {"reason", &Event::reason},
        {"child", &Event::child},
        {"supervisor", &Event::supervisor},
        {"path", &Event::path},
        {"trace_id", &Event::trace_id},
        {"span_id", &Event::span_id},
        {"parent_span_id", &Event::parent_span_id},
    }};
    for (const auto& [name, field] : fields)
        if (name == tag) return field;
    throw std::invalid_argument("metric tag \"" + std::string(tag) + "\" is not an Event field");
}

using Measure = double (*)(const Event&);

Measure measurement_of(const MetricDefinition& d) {
    if (d.measurement == "count") return [](const Event& e) { return double(e.count); };
    if (d.measurement == "members_count")
        return [](const Event& e) { return double(e.members_count); };
    if (d.measurement == "in_flight") return [](const Event& e) { return double(e.in_flight); };
    if (d.measurement == "duration" && d.unit == "millisecond")
        return [](const Event& e) {
            return std::chrono::duration<double, std::milli>(e.duration).count();
        };
    throw std::invalid_argument("metric \"" + d.name + "\": no measurement \"" + d.measurement +
                                "\" in unit \"" + d.unit + "\"");
}

// ---- series --------------------------------------------------------------------------------

using TagValues = std::vector<std::string>;
using TagViews = std::span<const std::string_view>;

// Hash and equality usable with both the stored key (strings) and the looked-up one
// (views into the Event), so finding an existing series allocates nothing.
struct TagHash {
    using is_transparent = void;
    template <class Range>
    std::size_t operator()(const Range& values) const noexcept {
        std::size_t seed = 0;
        for (const auto& v : values)
            boost::hash_combine(seed, std::hash<std::string_view>{}(std::string_view(v)));
        return seed;
    }
};

struct TagEqual {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                          [](const auto& x, const auto& y) {
                              return std::string_view(x) == std::string_view(y);
                          });
    }
};

struct SeriesState {
    explicit SeriesState(std::size_t bucket_slots)
        : buckets(bucket_slots ? std::make_unique<std::atomic<std::uint64_t>[]>(bucket_slots)
                               : nullptr) {}
    std::atomic<std::uint64_t> count{0};  // counters
    std::atomic<double> sum{0.0};         // distributions
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets;  // distributions: bounds + 1
};

// ---- one metric's aggregation --------------------------------------------------------------

class MetricState {
public:
    explicit MetricState(const MetricDefinition& definition)
        : definition_(definition),
          measure_(definition.type == MetricType::distribution ? measurement_of(definition)
                                                               : nullptr),
          slots_(definition.type == MetricType::distribution ? definition.buckets.size() + 1 : 0) {
        if (definition.tags.size() > max_tags)
            throw std::invalid_argument("metric \"" + definition.name + "\": too many tags");
        for (const auto& tag : definition.tags) fields_.push_back(event_field(tag));
    }

    const MetricDefinition& definition() const noexcept { return definition_; }

    void record(const Event& event) {
        std::array<std::string_view, max_tags> values;
        for (std::size_t i = 0; i < fields_.size(); ++i) values[i] = event.*fields_[i];
        SeriesState& series = find_or_add(TagViews(values.data(), fields_.size()));
        if (!measure_) {
            series.count.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        const double value = measure_(event);
        const auto& bounds = definition_.buckets;
        const auto slot = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
        series.buckets[static_cast<std::size_t>(slot)].fetch_add(1, std::memory_order_relaxed);
        series.sum.fetch_add(value, std::memory_order_relaxed);
    }

    void append_to(std::vector<Metrics::Series>& out) const {
        std::vector<Metrics::Series> series;
        {
            std::shared_lock lock(mutex_);
            series.reserve(series_.size());
            for (const auto& [values, state] : series_) series.push_back(read(values, *state));
        }
        std::sort(series.begin(), series.end(), [](const auto& a, const auto& b) {
            return a.tags < b.tags;
        });
        std::move(series.begin(), series.end(), std::back_inserter(out));
    }

private:
    SeriesState& find_or_add(TagViews values) {
        {
            std::shared_lock lock(mutex_);
            if (auto it = series_.find(values); it != series_.end()) return *it->second;
        }
        // First event of this tag set: allocate outside the exclusive lock.
        TagValues key(values.begin(), values.end());
        auto state = std::make_unique<SeriesState>(slots_);
        std::unique_lock lock(mutex_);
        // Another thread may have added it meanwhile; then ours is dropped.
        return *series_.try_emplace(std::move(key), std::move(state)).first->second;
    }

    Metrics::Series read(const TagValues& values, const SeriesState& state) const {
        Metrics::Series s{definition_.name, {}, 0, 0.0, {}};
        for (std::size_t i = 0; i < values.size(); ++i)
            s.tags.emplace_back(definition_.tags[i], values[i]);
        if (!measure_) {
            s.count = state.count.load(std::memory_order_relaxed);
            s.sum = static_cast<double>(s.count);
            return s;
        }
        s.bucket_counts.resize(slots_);
        for (std::size_t i = 0; i < slots_; ++i) {
            s.bucket_counts[i] = state.buckets[i].load(std::memory_order_relaxed);
            s.count += s.bucket_counts[i];
        }
        s.sum = state.sum.load(std::memory_order_relaxed);
        return s;
    }

    const MetricDefinition& definition_;
    const Measure measure_;    // null for a counter
    const std::size_t slots_;  // distribution: bounds + 1 (+Inf); counter: 0
    std::vector<Field> fields_;
    mutable std::shared_mutex mutex_;
    std::unordered_map<TagValues, std::unique_ptr<SeriesState>, TagHash, TagEqual> series_;
};

}  // namespace

// ---- Metrics -------------------------------------------------------------------------------

struct Metrics::State {
    explicit State(const std::vector<MetricDefinition>& definitions) {
        metrics.reserve(definitions.size());
        for (const auto& d : definitions) {
            metrics.push_back(std::make_unique<MetricState>(d));
            by_event[static_cast<std::size_t>(d.event)].push_back(metrics.back().get());
        }
    }

    void record(const Event& event) {
        const auto i = static_cast<std::size_t>(event.name);
        if (i >= by_event.size()) return;
        for (MetricState* metric : by_event[i]) metric->record(event);
    }

    std::vector<std::unique_ptr<MetricState>> metrics;
    std::array<std::vector<MetricState*>, event_name_count> by_event;
};

std::string_view to_string(MetricType type) noexcept {
    return type == MetricType::counter ? "counter" : "distribution";
}

const std::vector<MetricDefinition>& metric_definitions() {
    static const std::vector<MetricDefinition> definitions = predecessor_definitions();
    return definitions;
}

Metrics::Metrics(TelemetryBus& bus) : state_(std::make_shared<State>(metric_definitions())) {
    connection_ = bus.connect([state = state_](const Event& event) { state->record(event); });
}

Metrics::~Metrics() = default;

std::vector<Metrics::Series> Metrics::snapshot() const {
    std::vector<Series> out;
    for (const auto& metric : state_->metrics) metric->append_to(out);
    return out;
}

// ---- exposition ----------------------------------------------------------------------------

namespace {

std::string prometheus_name(std::string_view dotted) {
    std::string name(dotted);
    for (std::size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                        c == ':' || (i > 0 && c >= '0' && c <= '9');
        if (!ok) name[i] = '_';
    }
    return name;
}

// Shortest text that reads back as the same double ("0.1", "2500", "1e+21").
void append_number(std::string& out, double value) {
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, result.ptr);
}

void append_number(std::string& out, std::uint64_t value) {
    char buffer[24];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, result.ptr);
}

void append_escaped(std::string& out, std::string_view text, bool quotes) {
    for (const char c : text) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '"' && quotes) out += "\\\"";
        else out += c;
    }
}

// `{tag="value",...}` with an optional trailing `le` label; nothing when there are none.
void append_labels(std::string& out, const Metrics::Series& s, std::string_view le = {}) {
    if (s.tags.empty() && le.empty()) return;
    out += '{';
    bool first = true;
    for (const auto& [tag, value] : s.tags) {
        if (!first) out += ',';
        first = false;
        out += tag;
        out += "=\"";
        append_escaped(out, value, true);
        out += '"';
    }
    if (!le.empty()) {
        if (!first) out += ',';
        out += "le=\"";
        out += le;
        out += '"';
    }
    out += '}';
}

void append_sample(std::string& out, const std::string& name, std::string_view suffix,
                   const Metrics::Series& s, std::string_view le, auto value) {
    out += name;
    out += suffix;
    append_labels(out, s, le);
    out += ' ';
    append_number(out, value);
    out += '\n';
}

}  // namespace

std::string Metrics::prometheus_text() const {
    const std::vector<Series> all = snapshot();
    std::string out;
    auto next = all.begin();
    for (const auto& metric : state_->metrics) {
        const MetricDefinition& d = metric->definition();
        const bool counter = d.type == MetricType::counter;
        const std::string name = prometheus_name(d.name) + (counter ? "_total" : "");
        out += "# HELP " + name + ' ';
        append_escaped(out, d.description, false);
        out += "\n# TYPE " + name + (counter ? " counter\n" : " histogram\n");
        for (; next != all.end() && next->metric == d.name; ++next) {
            const Series& s = *next;
            if (counter) {
                append_sample(out, name, "", s, {}, s.count);
                continue;
            }
            std::uint64_t cumulative = 0;
            for (std::size_t i = 0; i < s.bucket_counts.size(); ++i) {
                cumulative += s.bucket_counts[i];
                std::string le = "+Inf";
                if (i < d.buckets.size()) {
                    le.clear();
                    append_number(le, d.buckets[i]);
                }
                append_sample(out, name, "_bucket", s, le, cumulative);
            }
            append_sample(out, name, "_sum", s, {}, s.sum);
            append_sample(out, name, "_count", s, {}, s.count);
        }
    }
    return out;
}

boost::json::value Metrics::to_json() const {
    const std::vector<Series> all = snapshot();
    boost::json::array metrics;
    auto next = all.begin();
    for (const auto& metric : state_->metrics) {
        const MetricDefinition& d = metric->definition();
        boost::json::array series;
        for (; next != all.end() && next->metric == d.name; ++next) {
            boost::json::object tags;
            for (const auto& [tag, value] : next->tags) tags[tag] = value;
            series.push_back(boost::json::object{
                {"tags", std::move(tags)},
                {"count", next->count},
                {"sum", next->sum},
                {"bucket_counts", boost::json::value_from(next->bucket_counts)},
            });
        }
        metrics.push_back(boost::json::object{
            {"name", d.name},
            {"type", to_string(d.type)},
            {"event", to_string(d.event)},
            {"measurement", d.measurement},
            {"unit", d.unit},
            {"tags", boost::json::value_from(d.tags)},
            {"buckets", boost::json::value_from(d.buckets)},
            {"series", std::move(series)},
        });
    }
    return boost::json::object{{"metrics", std::move(metrics)}};
}

}  // namespace rpclb
