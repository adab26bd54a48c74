#include <rpclb/config.hpp>
#include <rpclb/detail/options_check.hpp>

#include <boost/json/parse_options.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <string_view>
#include <system_error>

namespace rpclb {

namespace {

namespace json = boost::json;

// An error of one field, or nothing.
using Problem = std::optional<ErrorMessage>;

std::string member_path(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

std::string element_path(std::string_view path, std::size_t index) {
    return std::string(path) + "[" + std::to_string(index) + "]";
}

ErrorMessage field_error(const std::string& path, std::string_view reason) {
    const std::string where = path.empty() ? "config" : "config field \"" + path + "\"";
    return ErrorMessage{ErrorCode::bad_request, where + ": " + std::string(reason), json::object{{"field", path}}};
}

// What a value is, for "got ...": scalars as written, strings and containers by kind only,
// so that a misplaced secret is never echoed.
std::string got(const json::value& v) {
    switch (v.kind()) {
        case json::kind::string: return ", got a string";
        case json::kind::array: return ", got an array";
        case json::kind::object: return ", got an object";
        default: return ", got " + json::serialize(v);
    }
}

std::optional<std::uint64_t> non_negative_integer(const json::value& v) {
    if (v.is_uint64()) return v.get_uint64();
    if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
    return std::nullopt;
}

// ---- readers: each converts one JSON value into a field, or names what is wrong -------------

using Reader = std::function<Problem(const json::value&, const std::string& path)>;

Reader text(std::string& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        if (!v.is_string()) return field_error(path, "must be a string" + got(v));
        out = v.get_string();
        return std::nullopt;
    };
}

Reader boolean(bool& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        if (!v.is_bool()) return field_error(path, "must be true or false" + got(v));
        out = v.get_bool();
        return std::nullopt;
    };
}

Reader count(std::size_t& out, std::string_view unit = {}) {
    return [&out, unit](const json::value& v, const std::string& path) -> Problem {
        const auto n = non_negative_integer(v);
        if (!n) return field_error(path, "must be a non-negative integer" + std::string(unit) + got(v));
        out = static_cast<std::size_t>(*n);
        return std::nullopt;
    };
}

Reader milliseconds(std::chrono::milliseconds& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        const auto n = non_negative_integer(v);
        if (!n || *n > static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max()))
            return field_error(path, "must be a non-negative integer (milliseconds)" + got(v));
        out = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(*n));
        return std::nullopt;
    };
}

// Calls `each(element, path)` for the elements of an array.
template <class Each>
Problem for_each_element(const json::value& v, const std::string& path, std::string_view shape, Each&& each) {
    const auto* array = v.if_array();
    if (!array) return field_error(path, "must be " + std::string(shape) + got(v));
    for (std::size_t i = 0; i < array->size(); ++i)
        if (auto e = each((*array)[i], element_path(path, i))) return e;
    return std::nullopt;
}

Reader strings(std::vector<std::string>& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        std::vector<std::string> list;
        auto e = for_each_element(v, path, "an array of strings", [&](const json::value& item, const std::string& at) {
            return text(list.emplace_back())(item, at);
        });
        if (e) return e;
        out = std::move(list);
        return std::nullopt;
    };
}

// "plugins": one directory or a list of them.
Reader directories(std::vector<std::filesystem::path>& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        if (v.is_string()) {
            out = {std::string(v.get_string())};
            return std::nullopt;
        }
        if (!v.is_array()) return field_error(path, "must be a string or an array of strings" + got(v));
        std::vector<std::string> list;
        if (auto e = strings(list)(v, path)) return e;
        out.assign(list.begin(), list.end());
        return std::nullopt;
    };
}

// The seed's `retry_count`: a non-negative integer or :infinity.
Reader retries(std::size_t& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        if (v.is_string() && v.get_string() == "infinity") {
            out = unlimited_retries;
            return std::nullopt;
        }
        const auto n = non_negative_integer(v);
        if (!n || *n >= unlimited_retries)
            return field_error(path, "must be a non-negative integer or \"infinity\"" + got(v));
        out = static_cast<std::size_t>(*n);
        return std::nullopt;
    };
}

Reader object(json::object& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
        if (!v.is_object()) return field_error(path, "must be an object" + got(v));
        out = v.get_object();
        return std::nullopt;
    };
}

Reader match_list(NodeMatchList& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
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
    };
}

// ---- objects: known keys, unknown keys --------------------------------------------------------

// Reads the members of one JSON object. Remembers the keys it was asked for, so that
// finish() can name any other key; the first error is kept and later reads are skipped.
class Fields {
public:
    Fields(const json::object& object, std::string path) : object_(object), path_(std::move(path)) {}

    void read(std::string_view key, const Reader& reader) {
        known_.push_back(key);
        if (error_) return;
        if (const auto* v = object_.if_contains(key)) error_ = reader(*v, member_path(path_, key));
    }

    // An unknown key wins over other errors: a misspelt key often causes them.
    Problem finish() const {
        for (const auto& member : object_) {
            if (std::find(known_.begin(), known_.end(), member.key()) != known_.end()) continue;
            std::string keys;
            for (const auto k : known_) keys += (keys.empty() ? "" : ", ") + std::string(k);
            return field_error(member_path(path_, member.key()), "unknown key (known keys: " + keys + ")");
        }
        return error_;
    }

private:
    const json::object& object_;
    std::string path_;
    std::vector<std::string_view> known_;
    Problem error_;
};

void read_cluster_fields(Fields& f, ClusterOptions& o) {
    f.read("name", text(o.name));
    f.read("listen", text(o.listen));
    f.read("seeds", strings(o.seeds));
    f.read("cookie", text(o.cookie));
    f.read("client", boolean(o.client));
    f.read("plugins", directories(o.plugin_path));
    f.read("network_threads", count(o.network_threads));
    f.read("worker_threads", count(o.worker_threads));
    f.read("idle_timeout_ms", milliseconds(o.idle_timeout));
    f.read("handshake_timeout_ms", milliseconds(o.handshake_timeout));
    f.read("reconnect_interval_ms", milliseconds(o.reconnect_interval));
    f.read("stop_timeout_ms", milliseconds(o.stop_timeout));
    f.read("max_message_size", count(o.max_message_size, " (bytes)"));
    f.read("call_directly", boolean(o.call_directly));
    f.read("retry", boolean(o.retry));
    f.read("retry_count", retries(o.retry_count));
    f.read("excluded_node_patterns", strings(o.excluded_node_patterns));
}

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
    return std::nullopt;
}

Result<LoadBalancerOptions> parse_balancer(const json::value& v, const std::string& path) {
    if (auto e = must_be_object(v, path)) return *e;
    LoadBalancerOptions o;
    Fields f(v.get_object(), path);
    f.read("name", text(o.name));
    f.read("algorithm", text(o.algorithm));
    f.read("algorithm_opts", object(o.algorithm_opts));
    f.read("node_match_list", match_list(o.node_match_list));
    f.read("drain_timeout_ms", milliseconds(o.drain_timeout));
    if (auto e = f.finish()) return *e;
    if (!v.get_object().contains("name")) return field_error(member_path(path, "name"), "is required");
    if (auto e = checked(detail::check(o), path)) return *e;
    return o;
}

Reader balancers(std::vector<LoadBalancerOptions>& out) {
    return [&out](const json::value& v, const std::string& path) -> Problem {
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
    };
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
    if (!ec) return parser.release();
    const auto offset = ec == json::error::incomplete ? text.size() : consumed;
    const auto before = text.substr(0, offset);
    const auto line = static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
    const auto line_start = before.rfind('\n');
    const auto column = offset - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    return file_error(file, ":" + std::to_string(line) + ":" + std::to_string(column) + ": invalid JSON: " +
                                ec.message() + " (offset " + std::to_string(offset) + ")",
                      json::object{{"line", line}, {"column", column}, {"offset", offset}});
}

json::value filter_json(const NodeFilter& f) {
    return f.is_regex() ? json::value("/" + f.text() + "/") : json::value(f.text());
}

}  // namespace

// ---- from JSON -----------------------------------------------------------------------------

Result<ClusterOptions> cluster_options_from_json(const json::value& v, const ClusterOptions& defaults) {
    if (auto e = must_be_object(v, "")) return *e;
    ClusterOptions o = defaults;
    Fields f(v.get_object(), "");
    read_cluster_fields(f, o);
    if (auto e = f.finish()) return *e;
    if (auto e = checked(detail::check(o, detail::Identity::optional), "")) return *e;
    return o;
}

Result<LoadBalancerOptions> load_balancer_options_from_json(const json::value& v) { return parse_balancer(v, ""); }

Result<NodeConfig> node_config_from_json(const json::value& v, const NodeConfig& defaults) {
    if (auto e = must_be_object(v, "")) return *e;
    NodeConfig c = defaults;
    Fields f(v.get_object(), "");
    read_cluster_fields(f, c.cluster);
    f.read("log_level", text(c.log_level));
    f.read("balancers", balancers(c.balancers));
    if (auto e = f.finish()) return *e;
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
    return {};
}

// ---- to JSON -------------------------------------------------------------------------------

json::object to_json(const ClusterOptions& o, Secrets secrets) {
    json::array plugins;
    for (const auto& dir : o.plugin_path) plugins.emplace_back(dir.string());
    json::object j{
        {"name", o.name},
        {"listen", o.listen},
        {"seeds", json::value_from(o.seeds)},
        {"client", o.client},
        {"plugins", std::move(plugins)},
        {"network_threads", o.network_threads},
        {"worker_threads", o.worker_threads},
        {"idle_timeout_ms", o.idle_timeout.count()},
        {"handshake_timeout_ms", o.handshake_timeout.count()},
        {"reconnect_interval_ms", o.reconnect_interval.count()},
        {"stop_timeout_ms", o.stop_timeout.count()},
        {"max_message_size", o.max_message_size},
        {"call_directly", o.call_directly},
        {"retry", o.retry},
        {"retry_count", o.retry_count == unlimited_retries ? json::value("infinity") : json::value(o.retry_count)},
        {"excluded_node_patterns", json::value_from(o.excluded_node_patterns)},
    };
    if (secrets == Secrets::include) j["cookie"] = o.cookie;
    return j;
}

json::object to_json(const LoadBalancerOptions& o) {
    json::value match_list = "all";
    if (!o.node_match_list.all) {
        json::array filters;
        for (const auto& f : o.node_match_list.filters) filters.push_back(filter_json(f));
        match_list = std::move(filters);
    }
    return json::object{
        {"name", o.name},
        {"algorithm", o.algorithm},
        {"algorithm_opts", o.algorithm_opts},
        {"node_match_list", std::move(match_list)},
        {"drain_timeout_ms", o.drain_timeout.count()},
    };
}

json::object to_json(const NodeConfig& c, Secrets secrets) {
    auto j = to_json(c.cluster, secrets);
    j["log_level"] = c.log_level;
    json::array list;
    for (const auto& b : c.balancers) list.emplace_back(to_json(b));
    j["balancers"] = std::move(list);
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
