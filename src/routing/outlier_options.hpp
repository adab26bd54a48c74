// OutlierDetection as JSON, under the keys of a config file's "outlier_detection" object:
// read by the config loader and from the announcements of a balancer's members (internal).
#pragma once

#include <rpclb/detail/option_problem.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>

namespace rpclb::detail {

/// The first range problem of `options`, or nullopt: percentages 0..100, interval and
/// ejection times in 1 ms..max_option_duration, max_ejection_time at least
/// base_ejection_time. `field` is the key inside the object ("interval_ms").
/// Thread safety: pure function.
std::optional<OptionProblem> check(const OutlierDetection& options);

/// The JSON object of `options`: every field, defaults included, e.g.
/// {"consecutive_remote_failures": 5, ..., "interval_ms": 10000, ...}.
/// Thread safety: pure function.
boost::json::object to_json(const OutlierDetection& options);

/// Reads the object `v` into `out`: a missing key keeps `out`'s value, an unknown key, a
/// value of the wrong type or out of range (check()) is a problem. On a problem `out` is
/// untouched; its `field` is the key ("interval_ms"), or empty when `v` is not an object.
/// An unknown key is reported before any other problem: a misspelt key often causes them.
/// Thread safety: pure function.
std::optional<OptionProblem> read_outlier_detection(const boost::json::value& v, OutlierDetection& out);

/// Whether `a` and `b` hold the same values. Thread safety: pure function.
bool same_outlier_detection(const OutlierDetection& a, const OutlierDetection& b);

}  // namespace rpclb::detail
