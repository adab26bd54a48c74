// The valid range of LoadBalancerOptions (load_balancer.hpp), apart from the registry so
// that the config loader's fuzz target links it alone.
#include <rpclb/load_balancer.hpp>

namespace rpclb::detail {

std::optional<OptionProblem> check(const LoadBalancerOptions& o) {
    if (o.name.empty()) return OptionProblem{"name", "must not be empty"};
    if (auto p = check_printable("name", o.name)) return p;
    if (o.algorithm.empty()) return OptionProblem{"algorithm", "must not be empty"};
    if (auto p = check_duration("drain_timeout_ms", o.drain_timeout, true)) return p;
    const auto& d = o.outlier_detection;
    for (const auto& [field, percent] : {std::pair{"outlier_detection.failure_percentage", d.failure_percentage},
                                         std::pair{"outlier_detection.max_ejection_percent", d.max_ejection_percent},
                                         std::pair{"outlier_detection.panic_threshold_percent", d.panic_threshold_percent}})
        if (percent > 100) return OptionProblem{field, "must be a percentage, 0 to 100, got " + std::to_string(percent)};
    if (auto p = check_duration("outlier_detection.interval_ms", d.interval, false)) return p;
    if (auto p = check_duration("outlier_detection.base_ejection_time_ms", d.base_ejection_time, false)) return p;
    if (auto p = check_duration("outlier_detection.max_ejection_time_ms", d.max_ejection_time, false)) return p;
    if (d.max_ejection_time < d.base_ejection_time)
        return OptionProblem{"outlier_detection.max_ejection_time_ms", "must be at least base_ejection_time_ms"};
    return std::nullopt;
}

}  // namespace rpclb::detail
