// SlowStart (load_balancer.hpp) as JSON, under the keys of a balancer's "slow_start" object,
// and the ramp it gives a member: read by the config loader, announced by a balancer's
// members, applied by its picks (internal).
#pragma once

#include <rpclb/detail/option_problem.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace rpclb::detail {

/// The first range problem of `options`, or nullopt: window_ms in 0..max_option_duration,
/// aggression finite and above 0, min_weight_percent in 0..100. `field` is the key inside
/// the object ("aggression"). Thread safety: pure function.
std::optional<OptionProblem> check(const SlowStart& options);

/// The JSON object of `options`: {"window_ms": ..., "aggression": ..., "min_weight_percent": ...}.
/// Thread safety: pure function.
boost::json::object to_json(const SlowStart& options);

/// Reads the object `v` into `out`: a missing key keeps `out`'s value; an unknown key, a
/// value of the wrong type or out of range (check()) is a problem, and `out` is untouched.
/// Thread safety: pure function.
std::optional<OptionProblem> read_slow_start(const boost::json::value& v, SlowStart& out);

/// Whether `a` and `b` hold the same values. Thread safety: pure function.
bool same_slow_start(const SlowStart& a, const SlowStart& b);

/// The part of its fair share a member gets `age` after it joined or returned:
/// max(min_weight_percent / 100, (age / window)^(1 / aggression)), 1 once `age` reaches the
/// window (and when slow start is off). No allocation, no lock.
inline double slow_start_factor(const SlowStart& options, std::chrono::nanoseconds age) noexcept {
    if (!options.enabled() || age >= options.window) return 1.0;
    const double t = age.count() <= 0 ? 0.0
                                      : std::chrono::duration<double>(age) /
                                            std::chrono::duration<double>(options.window);
    const double ramp = std::pow(t, 1.0 / options.aggression);
    return std::clamp(std::max(options.min_weight_percent / 100.0, ramp), 0.0, 1.0);
}

}  // namespace rpclb::detail
