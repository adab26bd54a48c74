#include "admin/protocol.hpp"

#include <cmath>

#include "json_fields.hpp"

#include <boost/json/parse.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>

namespace rpclb::admin {

namespace fields = rpclb::detail::json_fields;

namespace {

// What a command's fields must be. Members not listed are ignored, except by
// balancer_start, whose fields go through the configuration's balancer parser.
enum class Kind { string, object, count };
struct Field {
    std::string_view name;
    Kind kind;
    bool required;
};
struct Command {
    std::string_view name;
    std::vector<Field> fields;
};

const std::vector<Command>& commands() {
    static const std::vector<Command> all{
        {"auth", {}},
        {"nodes", {}},
        {"self", {}},
        {"balancers", {}},
        {"groups", {}},
        {"plugins", {}},
        {"stats", {}},
        {"metrics", {}},
        {"drain", {}},
        {"undrain", {}},
        {"stop", {}},
        {"balancer_start", {{"name", Kind::string, true}, {"algorithm", Kind::string, false},
                            {"algorithm_opts", Kind::object, false}}},
        {"balancer_stop", {{"name", Kind::string, true}}},
        {"balancer_set_algorithm", {{"name", Kind::string, true}, {"algorithm", Kind::string, true},
                                    {"algorithm_opts", Kind::object, false}}},
        {"balancer_set_options", {{"name", Kind::string, true}, {"algorithm_opts", Kind::object, true}}},
        {"log_level", {{"level", Kind::string, true}}},
        {"reload_tls", {}},
        {"subscribe", {{"filter", Kind::object, false}}},
        {"unsubscribe", {{"subscription", Kind::count, true}}},
    };
    return all;
}

std::string_view kind_name(Kind kind) {
    switch (kind) {
    case Kind::string: return "a string";
    case Kind::object: return "an object";
    case Kind::count: return "a non-negative integer";
    }
    return "?";
}

bool has_kind(const boost::json::value& v, Kind kind) {
    switch (kind) {
    case Kind::string: return v.is_string();
    case Kind::object: return v.is_object();
    case Kind::count: return fields::non_negative_integer(v).has_value();
    }
    return false;
}

Error bad(std::string message) { return {std::string(code::bad_request), std::move(message)}; }

}  // namespace

const std::vector<std::string_view>& command_names() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> n;
        for (const auto& c : commands()) n.push_back(c.name);
        return n;
    }();
    return names;
}

std::optional<Error> check_fields(const std::string& cmd, const boost::json::object& body) {
    const auto it = std::find_if(commands().begin(), commands().end(), [&](const Command& c) { return c.name == cmd; });
    if (it == commands().end())
        return Error{std::string(code::unknown_command), "unknown command \"" + cmd + "\""};
    for (const auto& f : it->fields) {
        const auto* v = body.if_contains(f.name);
        if (!v) {
            if (f.required) return bad(cmd + ": field \"" + std::string(f.name) + "\" is missing");
            continue;
        }
        if (!has_kind(*v, f.kind))
            return bad(cmd + ": field \"" + std::string(f.name) + "\" must be " + std::string(kind_name(f.kind)) +
                       ", got " + std::string(fields::describe(*v)));
    }
    return std::nullopt;
}

std::optional<Error> parse_request(std::string_view text, Request& out) {
    out = Request{};
    boost::system::error_code ec;
    boost::json::value doc = boost::json::parse(text, ec);
    if (ec) return bad("the request is not JSON: " + ec.message());
    auto* obj = doc.if_object();
    if (!obj) return bad("the request must be a JSON object, got " + std::string(fields::describe(doc)));
    // A number too large for a double parses as infinity, which no answer could echo as
    // JSON and no peer would read in forwarded options: such a request is refused (an
    // infinite id is echoed as null in the error).
    const auto finite = [](const boost::json::value& v) { return !v.is_double() || std::isfinite(v.get_double()); };
    if (const auto* id = obj->if_contains("id"); id && (id->is_number() || id->is_string()) && finite(*id)) out.id = *id;
    else if (id && id->is_double()) return bad("field \"id\" must be a finite number");
    else if (id) return bad("field \"id\" must be a number or a string, got " + std::string(fields::describe(*id)));
    else return bad("field \"id\" is missing");
    if (const auto* token = obj->if_contains("token")) {
        if (!token->is_string()) return bad("field \"token\" must be a string");
        out.token = std::string(token->get_string());
    }
    if (const auto* node = obj->if_contains("node")) {
        if (!node->is_string()) return bad("field \"node\" must be a string, got " + std::string(fields::describe(*node)));
        out.node = std::string(node->get_string());
    }
    const auto* cmd = obj->if_contains("cmd");
    if (!cmd) return bad("field \"cmd\" is missing");
    if (!cmd->is_string()) return bad("field \"cmd\" must be a string, got " + std::string(fields::describe(*cmd)));
    out.cmd = std::string(cmd->get_string());
    if (!fields::all_finite(doc)) return bad("a number in the request is too large for a double");
    if (auto error = check_fields(out.cmd, *obj)) return error;
    out.body = std::move(*obj);
    return std::nullopt;
}

boost::json::object answer(const boost::json::value& id, boost::json::value result) {
    return {{"id", id}, {"result", std::move(result)}};
}

boost::json::object error_answer(const boost::json::value& id, const Error& error) {
    return {{"id", id}, {"error", {{"code", error.code}, {"message", error.message}}}};
}

bool token_matches(std::string_view expected, std::string_view given) noexcept {
    // Hashing first makes the comparison independent of the lengths as well.
    std::array<unsigned char, EVP_MAX_MD_SIZE> a{}, b{};
    unsigned int na = 0, nb = 0;
    if (EVP_Digest(expected.data(), expected.size(), a.data(), &na, EVP_sha256(), nullptr) != 1) return false;
    if (EVP_Digest(given.data(), given.size(), b.data(), &nb, EVP_sha256(), nullptr) != 1) return false;
    return na == nb && CRYPTO_memcmp(a.data(), b.data(), na) == 0;
}

bool glob_match(std::string_view pattern, std::string_view text) noexcept {
    // Iterative matcher with one backtrack point: the last `*` seen.
    std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
    while (t < text.size()) {
        if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
            ++p;
            ++t;
        } else if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            resume = t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++resume;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

std::bitset<event_name_count> event_set(const std::vector<std::string>& patterns) {
    std::bitset<event_name_count> set;
    if (patterns.empty()) return set.set();
    for (std::size_t i = 0; i < event_name_count; ++i) {
        const auto name = to_string(static_cast<EventName>(i));
        for (const auto& p : patterns)
            if (glob_match(p, name)) set.set(i);
    }
    return set;
}

bool EventFilter::accepts(const Event& e) const noexcept {
    const auto i = static_cast<std::size_t>(e.name);
    if (i >= event_name_count || !events.test(i)) return false;
    if (load_balancer && e.load_balancer != *load_balancer) return false;
    if (node && e.node != *node) return false;
    return true;
}

std::optional<Error> parse_filter(const boost::json::object& body, EventFilter& out) {
    out = EventFilter{};
    out.events.set();
    const auto* f = body.if_contains("filter");
    if (!f) return std::nullopt;
    const auto& filter = f->get_object();  // check_fields made sure it is an object
    std::vector<std::string> patterns;
    if (const auto* events = filter.if_contains("events")) {
        const auto* list = events->if_array();
        if (!list) return bad("subscribe: filter.events must be an array of strings");
        for (const auto& p : *list) {
            if (!p.is_string()) return bad("subscribe: filter.events must be an array of strings");
            patterns.emplace_back(p.get_string());
        }
        if (patterns.empty()) return bad("subscribe: filter.events is empty (leave it out for every event)");
        out.events = event_set(patterns);
        if (out.events.none()) return bad("subscribe: filter.events matches no event name");
    }
    for (const auto& [key, target] : {std::pair{"load_balancer", &out.load_balancer}, std::pair{"node", &out.node}}) {
        if (const auto* v = filter.if_contains(key)) {
            if (!v->is_string()) return bad(std::string("subscribe: filter.") + key + " must be a string");
            *target = std::string(v->get_string());
        }
    }
    for (const auto& [key, value] : filter)
        if (key != "events" && key != "load_balancer" && key != "node")
            return bad("subscribe: unknown filter field \"" + std::string(key) + "\"");
    return std::nullopt;
}

boost::json::object event_to_json(const Event& e) {
    boost::json::object o;
    o["event"] = to_string(e.name);
    const std::pair<const char*, std::string_view> strings[] = {
        {"type", e.type},         {"node", e.node},     {"module", e.module},   {"function", e.function},
        {"load_balancer", e.load_balancer}, {"status", e.status}, {"algorithm", e.algorithm},
        {"group", e.group},       {"outcome", e.outcome}, {"kind", e.kind},     {"reason", e.reason},
        {"child", e.child},       {"supervisor", e.supervisor}, {"path", e.path},
        {"trace_id", e.trace_id}, {"span_id", e.span_id}, {"parent_span_id", e.parent_span_id},
    };
    for (const auto& [key, value] : strings)
        if (!value.empty()) o[key] = value;
    switch (e.name) {
    case EventName::rpc_start:
    case EventName::least_cpu_poll_start: o["system_time_ns"] = e.system_time_ns; break;
    case EventName::rpc_stop:
    case EventName::rpc_exception:
    case EventName::least_cpu_poll_stop:
    case EventName::least_cpu_poll_exception:
        o["duration_ms"] = std::chrono::duration<double, std::milli>(e.duration).count();
        break;
    case EventName::node_selected: o["members_count"] = e.members_count; break;
    case EventName::drain_begin: o["in_flight"] = e.in_flight; break;
    case EventName::rpc_span:
        o["system_time_ns"] = e.system_time_ns;
        o["duration_ms"] = std::chrono::duration<double, std::milli>(e.duration).count();
        break;
    case EventName::drain_end:
        o["in_flight"] = e.in_flight;
        o["duration_ms"] = std::chrono::duration<double, std::milli>(e.duration).count();
        break;
    default: break;
    }
    return o;
}

}  // namespace rpclb::admin
