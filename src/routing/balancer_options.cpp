// The valid range of LoadBalancerOptions (load_balancer.hpp), apart from the registry so
// that the config loader's fuzz target links it alone.
#include <rpclb/load_balancer.hpp>

namespace rpclb::detail {

std::optional<OptionProblem> check(const LoadBalancerOptions& o) {
    if (o.name.empty()) return OptionProblem{"name", "must not be empty"};
    if (auto p = check_printable("name", o.name)) return p;
    if (o.algorithm.empty()) return OptionProblem{"algorithm", "must not be empty"};
    return check_duration("drain_timeout_ms", o.drain_timeout, true);
}

}  // namespace rpclb::detail
