// HedgingPolicy (load_balancer.hpp) as JSON, under the keys of a balancer's "hedging"
// object: read by the config loader and from the announcements of a balancer's members
// (internal).
#pragma once

#include <rpclb/detail/option_problem.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <optional>

namespace rpclb::detail {

/// Most names HedgingPolicy::idempotent_functions may list.
inline constexpr std::size_t max_idempotent_functions = 1000;

/// The first range problem of `policy`, or nullopt: delay_ms 0..max_option_duration,
/// max_attempts 2..5, budget_percent 0..100, budget_min_per_second 0..1000 (both finite),
/// idempotent_functions as HedgingPolicy says.
/// `field` is the key inside the object ("budget_percent"). Thread safety: pure function.
std::optional<OptionProblem> check(const HedgingPolicy& policy);

/// The JSON object of `policy`: {"budget_percent", "budget_min_per_second"}, with
/// "delay_ms" and "max_attempts" when calls are hedged and "idempotent_functions" when it
/// lists any. Thread safety: pure function.
boost::json::object to_json(const HedgingPolicy& policy);

/// Reads the object `v` into `out`: a missing budget key keeps `out`'s value; "delay_ms"
/// or "max_attempts" hedge calls (the other at Hedging's default); an unknown key, a value
/// of the wrong type or out of range (check()) is a problem, and `out` is untouched.
/// Thread safety: pure function.
std::optional<OptionProblem> read_hedging(const boost::json::value& v, HedgingPolicy& out);

/// Whether `a` and `b` hold the same values. Thread safety: pure function.
bool same_hedging(const HedgingPolicy& a, const HedgingPolicy& b);

}  // namespace rpclb::detail
