// The valid range of LoadBalancerOptions (load_balancer.hpp), and OutlierDetection, SlowStart
// and HedgingPolicy as JSON, apart from the registry so that the config loader's fuzz target
// links them alone.
#include <rpclb/load_balancer.hpp>

#include "json_fields.hpp"
#include "routing/hedging_options.hpp"
#include "routing/outlier_options.hpp"
#include "routing/slow_start.hpp"

#include <cmath>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpclb::detail {

namespace {

// A number as a person wrote it: 500, 2.5 (std::to_string gives 500.000000).
std::string shown(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
}

namespace json = boost::json;
using json_fields::got;

// One field's value, or why it is not one: a count under 2^32 or a duration under a
// "..._ms" key.
std::optional<std::string> read_field(const json::value& v, std::uint32_t& out) {
    if (!json_fields::read(v, out)) return "must be a non-negative integer under 2^32" + got(v);
    return std::nullopt;
}

std::optional<std::string> read_field(const json::value& v, std::chrono::milliseconds& out) {
    if (!json_fields::read(v, out)) return "must be a non-negative integer (milliseconds)" + got(v);
    return std::nullopt;
}

json::value write_field(std::uint32_t n) { return json::value(n); }
json::value write_field(std::chrono::milliseconds d) { return json::value(d.count()); }

// visit(key, member) for every key of the "outlier_detection" object, in the order error
// messages list them. `Options` may be const (writing) or not (reading).
template <class Options, class Visit>
void outlier_fields(Options& o, Visit&& visit) {
    visit("consecutive_remote_failures", o.consecutive_remote_failures);
    visit("consecutive_local_failures", o.consecutive_local_failures);
    visit("failure_percentage", o.failure_percentage);
    visit("minimum_requests", o.minimum_requests);
    visit("interval_ms", o.interval);
    visit("base_ejection_time_ms", o.base_ejection_time);
    visit("max_ejection_time_ms", o.max_ejection_time);
    visit("max_ejection_percent", o.max_ejection_percent);
    visit("panic_threshold_percent", o.panic_threshold_percent);
}

}  // namespace

std::optional<OptionProblem> check(const OutlierDetection& d) {
    for (const auto& [field, percent] : {std::pair{"failure_percentage", d.failure_percentage},
                                         std::pair{"max_ejection_percent", d.max_ejection_percent},
                                         std::pair{"panic_threshold_percent", d.panic_threshold_percent}})
        if (percent > 100) return OptionProblem{field, "must be a percentage, 0 to 100, got " + shown(percent)};
    if (auto p = check_duration("interval_ms", d.interval, false)) return p;
    if (auto p = check_duration("base_ejection_time_ms", d.base_ejection_time, false)) return p;
    if (auto p = check_duration("max_ejection_time_ms", d.max_ejection_time, false)) return p;
    if (d.max_ejection_time < d.base_ejection_time)
        return OptionProblem{"max_ejection_time_ms", "must be at least base_ejection_time_ms"};
    return std::nullopt;
}

json::object to_json(const OutlierDetection& options) {
    json::object out;
    outlier_fields(options, [&](std::string_view key, const auto& member) { out[key] = write_field(member); });
    return out;
}

std::optional<OptionProblem> read_outlier_detection(const json::value& v, OutlierDetection& out) {
    const auto* object = v.if_object();
    if (!object) return OptionProblem{"", "must be an object" + got(v)};
    OutlierDetection options = out;
    std::vector<std::string_view> known;
    std::optional<OptionProblem> problem;
    outlier_fields(options, [&](std::string_view key, auto& member) {
        known.push_back(key);
        if (problem) return;
        if (const auto* field = object->if_contains(key))
            if (auto reason = read_field(*field, member)) problem = OptionProblem{std::string(key), std::move(*reason)};
    });
    for (const auto& member : *object) {
        if (std::find(known.begin(), known.end(), member.key()) != known.end()) continue;
        std::string keys;
        for (const auto k : known) keys += (keys.empty() ? "" : ", ") + std::string(k);
        return OptionProblem{std::string(member.key()), "unknown key (known keys: " + keys + ")"};
    }
    if (problem) return problem;
    if (auto p = check(options)) return p;
    out = options;
    return std::nullopt;
}

bool same_outlier_detection(const OutlierDetection& a, const OutlierDetection& b) { return to_json(a) == to_json(b); }

std::optional<OptionProblem> check(const SlowStart& s) {
    if (auto p = check_duration("window_ms", s.window, true)) return p;
    if (!std::isfinite(s.aggression) || s.aggression <= 0)
        return OptionProblem{"aggression", "must be a finite number above 0, got " + shown(s.aggression)};
    if (!std::isfinite(s.min_weight_percent) || s.min_weight_percent < 0 || s.min_weight_percent > 100)
        return OptionProblem{"min_weight_percent",
                             "must be a percentage, 0 to 100, got " + shown(s.min_weight_percent)};
    return std::nullopt;
}

json::object to_json(const SlowStart& s) {
    return json::object{{"window_ms", s.window.count()},
                        {"aggression", s.aggression},
                        {"min_weight_percent", s.min_weight_percent}};
}

std::optional<OptionProblem> read_slow_start(const json::value& v, SlowStart& out) {
    const auto* object = v.if_object();
    if (!object) return OptionProblem{"", "must be an object" + got(v)};
    SlowStart options = out;
    for (const auto& member : *object) {
        const auto key = member.key();
        const auto& value = member.value();
        if (key == "window_ms") {
            if (auto reason = read_field(value, options.window)) return OptionProblem{std::string(key), *reason};
        } else if (key == "aggression" || key == "min_weight_percent") {
            if (!value.is_number()) return OptionProblem{std::string(key), "must be a number" + got(value)};
            (key == "aggression" ? options.aggression : options.min_weight_percent) = value.to_number<double>();
        } else {
            return OptionProblem{std::string(key), "unknown key (known keys: window_ms, aggression, min_weight_percent)"};
        }
    }
    if (auto p = check(options)) return p;
    out = options;
    return std::nullopt;
}

bool same_slow_start(const SlowStart& a, const SlowStart& b) {
    return a.window == b.window && a.aggression == b.aggression && a.min_weight_percent == b.min_weight_percent;
}

namespace {

// More names than HedgingPolicy::idempotent_functions may list, or nullopt.
std::optional<OptionProblem> too_many_functions(std::size_t n) {
    if (n <= max_idempotent_functions) return std::nullopt;
    return OptionProblem{"idempotent_functions", "must list at most " + std::to_string(max_idempotent_functions) +
                                                     " functions, got " + std::to_string(n)};
}

}  // namespace

std::optional<OptionProblem> check(const HedgingPolicy& h) {
    if (auto p = too_many_functions(h.idempotent_functions.size())) return p;
    for (const auto& name : h.idempotent_functions) {
        const auto dot = name.rfind('.');
        if (dot == std::string::npos || dot == 0 || dot + 1 == name.size() || name.size() > 255)
            return OptionProblem{"idempotent_functions",
                                 "each must be \"module.function\" (both non-empty, at most 255 bytes), got \"" +
                                     name.substr(0, 255) + "\""};
        if (auto p = check_printable("idempotent_functions", name)) return p;
    }
    auto sorted = h.idempotent_functions;
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
        return OptionProblem{"idempotent_functions", "lists \"" + *twice + "\" twice"};
    if (h.calls) {
        if (auto p = check_duration("delay_ms", h.calls->delay, true)) return p;
        if (h.calls->max_attempts < 2 || h.calls->max_attempts > 5)
            return OptionProblem{"max_attempts", "must be 2 to 5, got " + std::to_string(h.calls->max_attempts)};
    }
    if (!std::isfinite(h.budget_percent) || h.budget_percent < 0 || h.budget_percent > 100)
        return OptionProblem{"budget_percent", "must be a percentage, 0 to 100, got " + shown(h.budget_percent)};
    if (!std::isfinite(h.budget_min_per_second) || h.budget_min_per_second < 0 || h.budget_min_per_second > 1000)
        return OptionProblem{"budget_min_per_second",
                             "must be a number from 0 to 1000, got " + shown(h.budget_min_per_second)};
    return std::nullopt;
}

json::object to_json(const HedgingPolicy& h) {
    json::object out{{"budget_percent", h.budget_percent}, {"budget_min_per_second", h.budget_min_per_second}};
    if (h.calls) {
        out["delay_ms"] = h.calls->delay.count();
        out["max_attempts"] = h.calls->max_attempts;
    }
    if (!h.idempotent_functions.empty())
        out["idempotent_functions"] = json::array(h.idempotent_functions.begin(), h.idempotent_functions.end());
    return out;
}

std::optional<OptionProblem> read_hedging(const json::value& v, HedgingPolicy& out) {
    const auto* object = v.if_object();
    if (!object) return OptionProblem{"", "must be an object" + got(v)};
    HedgingPolicy policy = out;
    for (const auto& member : *object) {
        const auto key = member.key();
        const auto& value = member.value();
        if (key == "delay_ms" || key == "max_attempts") {
            if (!policy.calls) policy.calls = Hedging{};
            std::uint32_t n = 0;
            if (auto reason = read_field(value, n)) return OptionProblem{std::string(key), *reason};
            if (key == "delay_ms")
                policy.calls->delay = std::chrono::milliseconds(n);
            else
                policy.calls->max_attempts = static_cast<int>(std::min<std::uint32_t>(n, 1000));
        } else if (key == "budget_percent" || key == "budget_min_per_second") {
            if (!value.is_number()) return OptionProblem{std::string(key), "must be a number" + got(value)};
            (key == "budget_percent" ? policy.budget_percent : policy.budget_min_per_second) = value.to_number<double>();
        } else if (key == "idempotent_functions") {
            const auto* names = value.if_array();
            if (!names) return OptionProblem{std::string(key), "must be an array of \"module.function\" names" + got(value)};
            if (auto p = too_many_functions(names->size())) return p;  // before copying them
            policy.idempotent_functions.clear();
            for (const auto& name : *names) {
                if (!name.is_string())
                    return OptionProblem{std::string(key), "must be an array of \"module.function\" names" + got(name)};
                policy.idempotent_functions.emplace_back(name.get_string());
            }
        } else {
            return OptionProblem{std::string(key), "unknown key (known keys: delay_ms, max_attempts, budget_percent, "
                                                   "budget_min_per_second, idempotent_functions)"};
        }
    }
    if (auto p = check(policy)) return p;
    out = policy;
    return std::nullopt;
}

bool same_hedging(const HedgingPolicy& a, const HedgingPolicy& b) { return to_json(a) == to_json(b); }

std::optional<OptionProblem> check(const LoadBalancerOptions& o) {
    if (o.name.empty()) return OptionProblem{"name", "must not be empty"};
    if (auto p = check_printable("name", o.name)) return p;
    if (o.algorithm.empty()) return OptionProblem{"algorithm", "must not be empty"};
    if (auto p = check_duration("drain_timeout_ms", o.drain_timeout, true)) return p;
    if (auto p = check(o.outlier_detection)) return OptionProblem{"outlier_detection." + p->field, p->reason};
    if (auto p = check(o.slow_start)) return OptionProblem{"slow_start." + p->field, p->reason};
    if (auto p = check(o.hedging)) return OptionProblem{"hedging." + p->field, p->reason};
    return std::nullopt;
}

}  // namespace rpclb::detail
