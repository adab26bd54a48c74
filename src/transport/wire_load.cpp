// The load report on the wire: a reply's "ld" member and the load pong.
#include "transport/wire_load.hpp"

#include "json_fields.hpp"

#include <boost/json/value.hpp>

#include <charconv>
#include <cmath>
#include <string>

namespace rpclb::detail::wire {

namespace json = boost::json;
using json_fields::describe;

char* format_load(const Load& load, char* p, char separator) {
    char* const end = p + 48;  // 10 + 1 + 10 + 1 + a double's shortest form (24)
    p = std::to_chars(p, end, load.busy_permille).ptr;
    *p++ = separator;
    p = std::to_chars(p, end, load.queue).ptr;
    if (load.application > 0.0) {
        *p++ = separator;
        p = std::to_chars(p, end, load.application).ptr;
    }
    return p;
}


std::optional<std::string> read_load(const json::value& v, Load& out) {
    const auto* a = v.if_array();
    if (!a) return "must be an array [busy, queue] or [busy, queue, application] (got " +
                   std::string(describe(v)) + ")";
    if (a->size() != 2 && a->size() != 3)
        return "must hold 2 or 3 numbers (got " + std::to_string(a->size()) + ")";
    Load load;
    if (!json_fields::read((*a)[0], load.busy_permille) || load.busy_permille > 1000)
        return "busy must be an integer in [0, 1000] (got " + std::string(describe((*a)[0])) + ")";
    if (!json_fields::read((*a)[1], load.queue))
        return "queue must be an integer in [0, 2^32) (got " + std::string(describe((*a)[1])) + ")";
    if (a->size() == 3) {
        const auto& n = (*a)[2];
        const double x = n.is_double() ? n.get_double()
                         : n.is_int64() ? static_cast<double>(n.get_int64())
                         : n.is_uint64() ? static_cast<double>(n.get_uint64())
                                         : -1.0;
        if (!n.is_number() || !std::isfinite(x) || x < 0.0 || x > max_application_load)
            return "application must be a number in [0, 1e9] (got " + std::string(describe(n)) + ")";
        load.application = x;
    }
    out = load;
    return std::nullopt;
}

namespace {
constexpr std::string_view load_pong_prefix = "load ";
}

std::string encode_load_pong(const Load& load) {
    char body[48];
    const char* end = format_load(load, body, ' ');
    std::string out(load_pong_prefix);
    out.append(body, static_cast<std::size_t>(end - body));
    return out;
}

std::optional<boost::system::result<Load, std::string>> decode_load_pong(std::string_view payload) {
    using Result = boost::system::result<Load, std::string>;
    if (!payload.starts_with(load_pong_prefix)) return std::nullopt;
    payload.remove_prefix(load_pong_prefix.size());
    // Shown bounded: a pong's payload is at most 125 bytes, but it is the peer's text.
    const auto bad = [&](std::string_view why) {
        return Result(boost::system::in_place_error, std::string(why) + " in load pong \"" +
                                                         std::string(payload.substr(0, 40)) + "\"");
    };
    const char* p = payload.data();
    const char* const end = p + payload.size();
    Load load;
    auto r = std::from_chars(p, end, load.busy_permille);
    if (r.ec != std::errc() || load.busy_permille > 1000) return bad("busy must be an integer in [0, 1000]");
    p = r.ptr;
    if (p == end || *p++ != ' ') return bad("a space and the queue must follow busy");
    r = std::from_chars(p, end, load.queue);
    if (r.ec != std::errc()) return bad("queue must be an integer in [0, 2^32)");
    p = r.ptr;
    if (p != end) {
        if (*p++ != ' ') return bad("a space must separate the numbers");
        double x = -1.0;
        const auto d = std::from_chars(p, end, x);
        if (d.ec != std::errc() || d.ptr != end || !std::isfinite(x) || x < 0.0 || x > max_application_load)
            return bad("application must be a number in [0, 1e9]");
        load.application = x;
    }
    return Result(load);
}

}  // namespace rpclb::detail::wire
