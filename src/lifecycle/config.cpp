#include <rpclb/config.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include "json_fields.hpp"
#include "routing/hedging_options.hpp"
#include "routing/outlier_options.hpp"
#include "routing/slow_start.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <string_view>
#include <system_error>

namespace rpclb {

namespace {

namespace json = boost::json;
using detail::json_fields::element_path;
using detail::json_fields::got;
using detail::json_fields::member_path;
using detail::json_fields::non_negative_integer;

// An error of one field, or nothing.
using Problem = std::optional<ErrorMessage>;

ErrorMessage field_error(const std::string& path, std::string_view reason) {
    const std::string where = path.empty() ? "config" : "config field \"" + path + "\"";
    return ErrorMessage{ErrorCode::bad_request, where + ": " + std::string(reason), json::object{{"field", path}}};
}

// ---- codecs: each reads one field from JSON (or names what is wrong) and writes it back ----
//
// read(value, path, out) -> Problem; write(field) -> json::value. The tables below pair
// every key with its member and its codec.

// Reads `value` into `out` with json_fields::read, or fails with "must be <expected>".
template <class T>
Problem exact(const json::value& v, const std::string& path, T& out, std::string_view expected) {
    if (detail::json_fields::read(v, out)) return std::nullopt;
    return field_error(path, "must be " + std::string(expected) + got(v));
}

struct Text {
    Problem read(const json::value& v, const std::string& path, std::string& out) const {
        return exact(v, path, out, "a string");
    }
    json::value write(const std::string& s) const { return json::value(s); }
};

struct Boolean {
    Problem read(const json::value& v, const std::string& path, bool& out) const {
        return exact(v, path, out, "true or false");
    }
    json::value write(bool b) const { return json::value(b); }
};

struct Object {
    Problem read(const json::value& v, const std::string& path, json::object& out) const {
        return exact(v, path, out, "an object");
    }
    json::value write(const json::object& o) const { return json::value(o); }
};

// A count, in `unit` (e.g. " (bytes)") when it has one.
struct Count {
    std::string_view unit;
    Problem read(const json::value& v, const std::string& path, std::size_t& out) const {
        const auto n = non_negative_integer(v);
        if (!n) return field_error(path, "must be a non-negative integer" + std::string(unit) + got(v));
        out = static_cast<std::size_t>(*n);
        return std::nullopt;
    }
    json::value write(std::size_t n) const { return json::value(n); }
};

// A duration under a "..._ms" key.
struct Milliseconds {
    Problem read(const json::value& v, const std::string& path, std::chrono::milliseconds& out) const {
        if (!detail::json_fields::read(v, out))
            return field_error(path, "must be a non-negative integer (milliseconds)" + got(v));
        return std::nullopt;
    }
    json::value write(std::chrono::milliseconds d) const { return json::value(d.count()); }
};

// Calls `each(element, path)` for the elements of an array.
template <class Each>
Problem for_each_element(const json::value& v, const std::string& path, std::string_view shape, Each&& each) {
    const auto* array = v.if_array();
    if (!array) return field_error(path, "must be " + std::string(shape) + got(v));
    for (std::size_t i = 0; i < array->size(); ++i)
        if (auto e = each((*array)[i], element_path(path, i))) return e;
    return std::nullopt;
}

struct Strings {
    Problem read(const json::value& v, const std::string& path, std::vector<std::string>& out) const {
        std::vector<std::string> list;
        auto e = for_each_element(v, path, "an array of strings", [&](const json::value& item, const std::string& at) {
            return Text{}.read(item, at, list.emplace_back());
        });
        if (e) return e;
        out = std::move(list);
        return std::nullopt;
    }
    json::value write(const std::vector<std::string>& list) const { return json::value_from(list); }
};

// "plugins": one directory or a list of them; written as a list.
struct Directories {
    Problem read(const json::value& v, const std::string& path, std::vector<std::filesystem::path>& out) const {
        if (v.is_string()) {
            out = {std::string(v.get_string())};
            return std::nullopt;
        }
        if (!v.is_array()) return field_error(path, "must be a string or an array of strings" + got(v));
        std::vector<std::string> list;
        if (auto e = Strings{}.read(v, path, list)) return e;
        out.assign(list.begin(), list.end());
        return std::nullopt;
    }
    json::value write(const std::vector<std::filesystem::path>& dirs) const {
        json::array list;
        for (const auto& dir : dirs) list.emplace_back(dir.string());
        return list;
    }
};

// retry_count: a non-negative integer or "infinity" (unlimited_retries; predecessor-compatibility §6).
struct Retries {
    Problem read(const json::value& v, const std::string& path, std::size_t& out) const {
        if (v.is_string() && v.get_string() == "infinity") {
            out = unlimited_retries;
            return std::nullopt;
        }
        const auto n = non_negative_integer(v);
        if (!n || *n >= unlimited_retries)
            return field_error(path, "must be a non-negative integer or \"infinity\"" + got(v));
        out = static_cast<std::size_t>(*n);
        return std::nullopt;
    }
    json::value write(std::size_t n) const {
        return n == unlimited_retries ? json::value("infinity") : json::value(n);
    }
};

// node_match_list: "all" or a list of NodeFilter texts, regexes written /PATTERN/.
struct MatchList {
    Problem read(const json::value& v, const std::string& path, NodeMatchList& out) const {
        if (v.is_string() && v.get_string() == "all") {
            out = NodeMatchList{};
            return std::nullopt;
        }
        if (!v.is_array())
            return field_error(path, "must be \"all\" or an array of strings (\"/PATTERN/\" = regex)" + got(v));
        auto list = NodeMatchList::none();
        auto e = for_each_element(v, path, "an array", [&](const json::value& item, const std::string& at) -> Problem {
            if (!item.is_string()) return field_error(at, "must be a string (\"/PATTERN/\" = regex)" + got(item));
            try {
                list.filters.push_back(NodeFilter::parse(item.get_string()));
            } catch (const std::regex_error& error) {
                return field_error(at, "invalid regex " + std::string(item.get_string()) + ": " + error.what());
            }
            return std::nullopt;
        });
        if (e) return e;
        out = std::move(list);
        return std::nullopt;
    }
    json::value write(const NodeMatchList& m) const {
        if (m.all) return json::value("all");
        json::array filters;
        for (const auto& f : m.filters)
            filters.push_back(f.is_regex() ? json::value("/" + f.text() + "/") : json::value(f.text()));
        return filters;
    }
};

// "balancers": an array of balancer objects (parse_balancer, to_json).
struct Balancers {
    Problem read(const json::value& v, const std::string& path, std::vector<LoadBalancerOptions>& out) const;
    json::value write(const std::vector<LoadBalancerOptions>& list) const {
        json::array out;
        for (const auto& b : list) out.emplace_back(to_json(b));
        return out;
    }
};

// A file name.
struct Path {
    Problem read(const json::value& v, const std::string& path, std::filesystem::path& out) const {
        std::string text;
        if (auto e = Text{}.read(v, path, text)) return e;
        out = text;
        return std::nullopt;
    }
    json::value write(const std::filesystem::path& p) const { return json::value(p.string()); }
};

// tls.min_version: "1.2" or "1.3".
struct Version {
    Problem read(const json::value& v, const std::string& path, TlsVersion& out) const {
        const auto* s = v.if_string();
        const auto version = s ? parse_tls_version(*s) : std::nullopt;
        if (!version) return field_error(path, "must be \"1.2\" or \"1.3\"" + got(v));
        out = *version;
        return std::nullopt;
    }
    json::value write(TlsVersion version) const { return json::value(to_string(version)); }
};

// "tls": the TLS object (TlsOptions).
struct Tls {
    Problem read(const json::value& v, const std::string& path, TlsOptions& out) const;
    json::value write(const TlsOptions& options) const;
};

// A balancer's "outlier_detection", "slow_start" or "hedging" object: its keys and checks
// are the routing layer's (`Read`, and detail::to_json), which also reads the announced ones.
template <class Options, std::optional<detail::OptionProblem> (*Read)(const json::value&, Options&)>
struct Announced {
    Problem read(const json::value& v, const std::string& path, Options& out) const;
    json::value write(const Options& options) const { return detail::to_json(options); }
};
using Outliers = Announced<OutlierDetection, &detail::read_outlier_detection>;
using SlowStarts = Announced<SlowStart, &detail::read_slow_start>;
using Hedgings = Announced<HedgingPolicy, &detail::read_hedging>;

// "admin": the admin listener's object (AdminOptions).
struct Admin {
    Problem read(const json::value& v, const std::string& path, AdminOptions& out) const;
    json::value write(const AdminOptions& options) const;
};

// ---- the keys, listed once --------------------------------------------------------------------
//
// visit(key, member, codec) for every key of an object, in the order error messages list
// them. `Options` may be const (writing) or not (reading).

template <class Options, class Visit>
void cluster_fields(Options& o, Visit&& visit) {
    visit("name", o.name, Text{});
    visit("listen", o.listen, Text{});
    visit("seeds", o.seeds, Strings{});
    visit("discovery", o.discovery, Text{});
    visit("cookie", o.cookie, Text{});
    visit("client", o.client, Boolean{});
    visit("plugins", o.plugin_path, Directories{});
    visit("network_threads", o.network_threads, Count{});
    visit("worker_threads", o.worker_threads, Count{});
    visit("idle_timeout_ms", o.idle_timeout, Milliseconds{});
    visit("handshake_timeout_ms", o.handshake_timeout, Milliseconds{});
    visit("reconnect_interval_ms", o.reconnect_interval, Milliseconds{});
    visit("stop_timeout_ms", o.stop_timeout, Milliseconds{});
    visit("max_message_size", o.max_message_size, Count{" (bytes)"});
    visit("max_batch_frames", o.max_batch_frames, Count{});
    visit("max_send_queue_bytes", o.max_send_queue_bytes, Count{" (bytes)"});
    visit("tls", o.tls, Tls{});
    visit("call_channels", o.call_channels, Boolean{});
    visit("call_directly", o.call_directly, Boolean{});
    visit("retry", o.retry, Boolean{});
    visit("retry_count", o.retry_count, Retries{});
    visit("excluded_node_patterns", o.excluded_node_patterns, Strings{});
}

// The one key to_json leaves out with Secrets::omit.
constexpr std::string_view secret_key = "cookie";

template <class Options, class Visit>
void balancer_fields(Options& o, Visit&& visit) {
    visit("name", o.name, Text{});
    visit("algorithm", o.algorithm, Text{});
    visit("algorithm_opts", o.algorithm_opts, Object{});
    visit("node_match_list", o.node_match_list, MatchList{});
    visit("drain_timeout_ms", o.drain_timeout, Milliseconds{});
    visit("outlier_detection", o.outlier_detection, Outliers{});
    visit("slow_start", o.slow_start, SlowStarts{});
    visit("hedging", o.hedging, Hedgings{});
}

template <class Config, class Visit>
void node_fields(Config& c, Visit&& visit) {
    cluster_fields(c.cluster, visit);
    visit("log_level", c.log_level, Text{});
    visit("balancers", c.balancers, Balancers{});
    visit("admin", c.admin, Admin{});
}

template <class Options, class Visit>
void tls_fields(Options& o, Visit&& visit) {
    visit("cert", o.cert, Path{});
    visit("key", o.key, Path{});
    visit("ca", o.ca, Path{});
    visit("min_version", o.min_version, Version{});
}

template <class Options, class Visit>
void admin_fields(Options& o, Visit&& visit) {
    visit("listen", o.listen, Text{});
    visit("token", o.token, Text{});
    visit("max_subscribers", o.max_subscribers, Count{});
    visit("subscriber_queue", o.subscriber_queue, Count{});
    visit("forward_timeout_ms", o.forward_timeout, Milliseconds{});
}

// ---- objects: known keys, unknown keys --------------------------------------------------------

// Reads the members of the object `v` at `path` into `out` through a key table; keys the
// table does not list are errors. The first error wins, except that an unknown key wins
// over any other: a misspelt key often causes them.
template <class T, class Table>
Problem read_object(const json::object& object, const std::string& path, T& out, Table table) {
    std::vector<std::string_view> known;
    Problem error;
    table(out, [&](std::string_view key, auto& member, const auto& codec) {
        known.push_back(key);
        if (error) return;
        if (const auto* v = object.if_contains(key)) error = codec.read(*v, member_path(path, key), member);
    });
    for (const auto& member : object) {
        if (std::find(known.begin(), known.end(), member.key()) != known.end()) continue;
        std::string keys;
        for (const auto k : known) keys += (keys.empty() ? "" : ", ") + std::string(k);
        return field_error(member_path(path, member.key()), "unknown key (known keys: " + keys + ")");
    }
    return error;
}

// The JSON object of `in` through a key table: every key, defaults included.
template <class T, class Table>
json::object write_object(const T& in, Table table) {
    json::object out;
    table(in, [&](std::string_view key, const auto& member, const auto& codec) { out[key] = codec.write(member); });
    return out;
}

// The key tables as callables, for read_object and write_object.
constexpr auto cluster_table = [](auto& o, auto&& visit) { cluster_fields(o, visit); };
constexpr auto balancer_table = [](auto& o, auto&& visit) { balancer_fields(o, visit); };
constexpr auto node_table = [](auto& c, auto&& visit) { node_fields(c, visit); };
constexpr auto admin_table = [](auto& o, auto&& visit) { admin_fields(o, visit); };
constexpr auto tls_table = [](auto& o, auto&& visit) { tls_fields(o, visit); };

Problem must_be_object(const json::value& v, const std::string& path) {
    if (v.is_object()) return std::nullopt;
    return field_error(path, (path.empty() ? "the document must be a JSON object" : "must be an object") + got(v));
}

Problem checked(const std::optional<detail::OptionProblem>& p, std::string_view path) {
    if (!p) return std::nullopt;
    return field_error(member_path(path, p->field), p->reason);
}

// Log levels of rpclb::log::init.
bool known_log_level(std::string_view level) {
    static constexpr std::array<std::string_view, 6> levels{"trace", "debug", "info", "warning", "error", "fatal"};
    return std::find(levels.begin(), levels.end(), level) != levels.end();
}

// The checks of a whole node beyond the types: ranges, log level, unique balancer names.
Problem check_node(const NodeConfig& c, detail::Identity identity) {
    if (auto e = checked(detail::check(c.cluster, identity), "")) return e;
    if (!known_log_level(c.log_level))
        return field_error("log_level", "must be trace, debug, info, warning, error or fatal, got \"" + c.log_level + "\"");
    for (std::size_t i = 0; i < c.balancers.size(); ++i) {
        const auto path = element_path("balancers", i);
        if (auto e = checked(detail::check(c.balancers[i]), path)) return e;
        for (std::size_t j = 0; j < i; ++j)
            if (c.balancers[j].name == c.balancers[i].name)
                return field_error(path + ".name", "duplicate balancer name \"" + c.balancers[i].name +
                                                       "\" (also " + element_path("balancers", j) + ")");
    }
    if (c.admin.max_subscribers < 1 || c.admin.max_subscribers > 1024)
        return field_error("admin.max_subscribers", "must be in 1..1024, got " + std::to_string(c.admin.max_subscribers));
    if (c.admin.subscriber_queue < 1 || c.admin.subscriber_queue > 1000000)
        return field_error("admin.subscriber_queue",
                           "must be in 1..1000000, got " + std::to_string(c.admin.subscriber_queue));
    if (c.admin.forward_timeout <= std::chrono::milliseconds::zero())
        return field_error("admin.forward_timeout_ms", "must be at least 1 (milliseconds), got " +
                                                           std::to_string(c.admin.forward_timeout.count()));
    if (!c.admin.listen.empty()) {
        try {
            detail::parse_listen_address(c.admin.listen);  // the rules of the node's own listen
        } catch (const std::invalid_argument& e) {
            return field_error("admin.listen", e.what());
        }
    }
    return std::nullopt;
}

Result<LoadBalancerOptions> parse_balancer(const json::value& v, const std::string& path) {
    if (auto e = must_be_object(v, path)) return *e;
    LoadBalancerOptions o;
    if (auto e = read_object(v.get_object(), path, o, balancer_table)) return *e;
    if (!v.get_object().contains("name")) return field_error(member_path(path, "name"), "is required");
    if (auto e = checked(detail::check(o), path)) return *e;
    return o;
}

Problem Balancers::read(const json::value& v, const std::string& path, std::vector<LoadBalancerOptions>& out) const {
    std::vector<LoadBalancerOptions> list;
    auto e = for_each_element(v, path, "an array of balancer objects",
                              [&](const json::value& item, const std::string& at) -> Problem {
                                  auto b = parse_balancer(item, at);
                                  if (!b) return b.error();
                                  list.push_back(std::move(*b));
                                  return std::nullopt;
                              });
    if (e) return e;
    out = std::move(list);
    return std::nullopt;
}

Problem Admin::read(const json::value& v, const std::string& path, AdminOptions& out) const {
    if (auto e = must_be_object(v, path)) return e;
    AdminOptions options = out;
    if (auto e = read_object(v.get_object(), path, options, admin_table)) return e;
    out = std::move(options);
    return std::nullopt;
}

json::value Admin::write(const AdminOptions& options) const { return write_object(options, admin_table); }

Problem Tls::read(const json::value& v, const std::string& path, TlsOptions& out) const {
    if (auto e = must_be_object(v, path)) return e;
    TlsOptions options = out;
    if (auto e = read_object(v.get_object(), path, options, tls_table)) return e;
    out = std::move(options);
    return std::nullopt;
}

json::value Tls::write(const TlsOptions& options) const { return write_object(options, tls_table); }

template <class Options, std::optional<detail::OptionProblem> (*Read)(const json::value&, Options&)>
Problem Announced<Options, Read>::read(const json::value& v, const std::string& path, Options& out) const {
    if (auto e = must_be_object(v, path)) return e;
    return checked(Read(v, out), path);
}

// ---- files ---------------------------------------------------------------------------------

ErrorMessage file_error(const std::filesystem::path& file, std::string message, json::object details = {}) {
    details["file"] = file.string();
    return ErrorMessage{ErrorCode::bad_request, file.string() + message, std::move(details)};
}

Result<std::string> read_file(const std::filesystem::path& file) {
    const auto unreadable = [&](int error) {
        return file_error(file, ": cannot read the config file: " + std::generic_category().message(error));
    };
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
    if (!in) return unreadable(errno);
    std::string text;
    char buffer[8192];
    while (const auto n = std::fread(buffer, 1, sizeof buffer, in.get())) text.append(buffer, n);
    if (std::ferror(in.get())) return unreadable(errno);
    return text;
}

Result<json::value> parse_file_text(const std::filesystem::path& file, std::string_view text) {
    json::parse_options options;
    options.allow_comments = true;
    options.allow_trailing_commas = true;
    json::stream_parser parser({}, options);
    boost::system::error_code ec;
    const auto consumed = parser.write(text.data(), text.size(), ec);
    if (!ec) parser.finish(ec);
    if (!ec) {
        auto doc = parser.release();
        // Infinity would reach peers in a balancer's announced options as text no JSON
        // parser reads (json_fields::all_finite).
        if (!detail::json_fields::all_finite(doc))
            return file_error(file, ": invalid JSON: a number is too large for a double");
        return doc;
    }
    const auto offset = ec == json::error::incomplete ? text.size() : consumed;
    const auto before = text.substr(0, offset);
    const auto line = static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
    const auto line_start = before.rfind('\n');
    const auto column = offset - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    return file_error(file, ":" + std::to_string(line) + ":" + std::to_string(column) + ": invalid JSON: " +
                                ec.message() + " (offset " + std::to_string(offset) + ")",
                      json::object{{"line", line}, {"column", column}, {"offset", offset}});
}

}  // namespace

// ---- from JSON -----------------------------------------------------------------------------

Result<ClusterOptions> cluster_options_from_json(const json::value& v, const ClusterOptions& defaults) {
    if (auto e = must_be_object(v, "")) return *e;
    ClusterOptions o = defaults;
    if (auto e = read_object(v.get_object(), "", o, cluster_table)) return *e;
    if (auto e = checked(detail::check(o, detail::Identity::optional), "")) return *e;
    return o;
}

Result<LoadBalancerOptions> load_balancer_options_from_json(const json::value& v) { return parse_balancer(v, ""); }

Result<NodeConfig> node_config_from_json(const json::value& v, const NodeConfig& defaults) {
    if (auto e = must_be_object(v, "")) return *e;
    NodeConfig c = defaults;
    if (auto e = read_object(v.get_object(), "", c, node_table)) return *e;
    if (auto e = check_node(c, detail::Identity::optional)) return *e;
    return c;
}

Result<NodeConfig> load_node_config(const std::filesystem::path& file, const NodeConfig& defaults) {
    auto text = read_file(file);
    if (!text) return text.error();
    auto json = parse_file_text(file, *text);
    if (!json) return json.error();
    auto config = node_config_from_json(*json, defaults);
    if (!config) {
        auto e = std::move(config.error());
        return file_error(file, ": " + e.message, std::move(e.details));
    }
    return config;
}

Result<void> validate(const NodeConfig& config) {
    if (auto e = check_node(config, detail::Identity::required)) return *e;
    if (auto e = checked(detail::check_tls(config.cluster.tls), "")) return *e;
    return {};
}

// ---- to JSON -------------------------------------------------------------------------------

json::object to_json(const ClusterOptions& o, Secrets secrets) {
    auto j = write_object(o, cluster_table);
    if (secrets == Secrets::omit) j.erase(secret_key);
    return j;
}

json::object to_json(const LoadBalancerOptions& o) { return write_object(o, balancer_table); }

json::object to_json(const NodeConfig& c, Secrets secrets) {
    auto j = write_object(c, node_table);
    if (secrets == Secrets::omit) {
        j.erase(secret_key);
        j.at("admin").as_object().erase("token");
    }
    return j;
}

// ---- Boost.JSON customisation ----------------------------------------------------------------

void tag_invoke(json::value_from_tag, json::value& j, const ClusterOptions& o) { j = to_json(o, Secrets::include); }
void tag_invoke(json::value_from_tag, json::value& j, const LoadBalancerOptions& o) { j = to_json(o); }
void tag_invoke(json::value_from_tag, json::value& j, const NodeConfig& c) { j = to_json(c, Secrets::include); }

ClusterOptions tag_invoke(json::value_to_tag<ClusterOptions>, const json::value& j) {
    return cluster_options_from_json(j).value();
}
LoadBalancerOptions tag_invoke(json::value_to_tag<LoadBalancerOptions>, const json::value& j) {
    return load_balancer_options_from_json(j).value();
}
NodeConfig tag_invoke(json::value_to_tag<NodeConfig>, const json::value& j) { return node_config_from_json(j).value(); }

}  // namespace rpclb
