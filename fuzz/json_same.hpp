// JSON equality for the fuzz targets' round-trip checks: doubles are compared with a
// relative tolerance of 1e-15, because Boost.JSON 1.81 does not round every long decimal
// to the nearest double, so a number with more digits than a double holds may move by one
// unit in the last place between a first and a second decoding (unit.wire,
// long_decimal_numbers_survive_a_round_trip_within_a_rounding_step).
#pragma once

#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace rpclb::fuzz {

/// Equal JSON values, doubles within a relative 1e-15.
inline bool same(const boost::json::value& a, const boost::json::value& b) {
    if (a.is_double() || b.is_double()) {
        if (!a.is_number() || !b.is_number()) return false;
        const double x = a.to_number<double>(), y = b.to_number<double>();
        return x == y || std::fabs(x - y) <= 1e-15 * std::max(std::fabs(x), std::fabs(y));
    }
    if (a.kind() != b.kind()) return false;
    if (a.is_array()) {
        const auto &p = a.get_array(), &q = b.get_array();
        if (p.size() != q.size()) return false;
        for (std::size_t i = 0; i < p.size(); ++i)
            if (!same(p[i], q[i])) return false;
        return true;
    }
    if (a.is_object()) {
        const auto &p = a.get_object(), &q = b.get_object();
        if (p.size() != q.size()) return false;
        for (const auto& [key, v] : p) {
            const auto* w = q.if_contains(key);
            if (!w || !same(v, *w)) return false;
        }
        return true;
    }
    return a == b;
}

}  // namespace rpclb::fuzz
