#include <rpclb/handler.hpp>

#include <string>

namespace rpclb::detail {

std::optional<OptionProblem> check(const HandlerOptions& o) {
    if (o.slow_threshold.count() >= 1) return std::nullopt;
    return OptionProblem{"slow_threshold",
                         "must be at least 1 us; got " + std::to_string(o.slow_threshold.count()) + " us"};
}

}  // namespace rpclb::detail
