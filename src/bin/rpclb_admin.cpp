// rpclb-admin: the command-line client of the admin console (doc/how-to/operate-a-cluster.md).
// Talks the admin protocol (doc/reference/admin-protocol.md) over WebSocket to one node's
// --admin listener; that node forwards requests naming other nodes over the mesh.
#include "admin_client.hpp"

#include <boost/json.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace po = boost::program_options;
namespace json = boost::json;
using rpclb::tools::Client;
using rpclb::tools::Failure;
using rpclb::tools::Usage;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_error = 1;
constexpr int exit_usage = 2;

const char* const usage_text = R"(usage: rpclb-admin --admin HOST:PORT [--token T] [--json] COMMAND [ARGS]

commands:
  nodes                                 the cluster's nodes
  balancers [--node NODE]               balancers of every node (or of NODE)
  groups                                groups and their members
  plugins [NODE]                        the algorithm plugins a node loaded, and their users
  stats [NODE]                          a node's counters
  metrics [NODE]                        a node's Prometheus text
  watch [PATTERN...] [--count N]        stream telemetry events (patterns like rpc.* or drain.*)
  drain NODE | undrain NODE | stop NODE
  balancer start NAME ALGORITHM [--options JSON] [--node NODE]
  balancer stop NAME [--node NODE]      on every node hosting NAME unless --node
  balancer set-algorithm NAME ALGORITHM [--options JSON] [--node NODE]
                                        change NAME's algorithm while it serves, on every
                                        node hosting NAME unless --node
  balancer set-options NAME JSON [--node NODE]
                                        change the options of NAME's algorithm likewise
  log-level LEVEL [NODE]
  reload-tls [NODE]                     every node (or NODE) reads its TLS certificate,
                                        key and CA files again; new connections use
                                        them, and a node whose files fail keeps its own;
                                        exit 0 only when every node asked reloaded

The token also comes from $RPCLB_ADMIN_TOKEN. Exit status: 0 success, 1 an error answer
or no connection, 2 a bad command line.
)";

// What --json prints for a failure, on stdout: {"error": the node's error object}, or,
// when no node answered, {"error": {"code": "failed", "message": ...}}.
json::value failure_json(const Failure& f) {
    if (f.error.is_object()) return json::object{{"error", f.error}};
    return json::object{{"error", json::object{{"code", "failed"}, {"message", f.message}}}};
}

// ---- output ------------------------------------------------------------------------------

std::string text(const json::value& v) {
    if (v.is_string()) return std::string(v.as_string());
    if (v.is_null()) return "-";
    if (v.is_double()) {
        std::ostringstream out;
        out << std::fixed << std::setprecision(v.as_double() < 10 ? 2 : 1) << v.as_double();
        return out.str();
    }
    if (v.is_array()) {
        std::string s;
        for (const auto& e : v.as_array()) s += (s.empty() ? "" : ",") + text(e);
        return s.empty() ? "-" : s;
    }
    return json::serialize(v);
}

std::string field(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v ? text(*v) : "-";
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> width(header.size());
    for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
    const auto line = [&](const std::vector<std::string>& cells) {
        for (std::size_t i = 0; i < cells.size(); ++i)
            std::cout << (i ? "  " : "") << std::left << std::setw(i + 1 < cells.size() ? int(width[i]) : 0)
                      << cells[i];
        std::cout << '\n';
    };
    line(header);
    for (const auto& row : rows) line(row);
}

// ---- commands ----------------------------------------------------------------------------

struct Context {
    Client& client;
    bool as_json;
    std::optional<std::string> node;  // --node
};

json::object request(std::string_view cmd, std::optional<std::string> node = std::nullopt) {
    json::object r{{"cmd", cmd}};
    if (node) r["node"] = *node;
    return r;
}

/// Every node of the cluster with, for one that cannot be asked (no admin listener, not
/// answering), the error the node list gives for it.
struct ClusterNode {
    std::string name;
    std::optional<std::string> error;
};

std::vector<ClusterNode> cluster_nodes(Client& client) {
    std::vector<ClusterNode> nodes;
    const auto result = client.call(request("nodes"));
    for (const auto& n : result.at("nodes").as_array()) {
        const auto& o = n.as_object();
        ClusterNode node{std::string(o.at("name").as_string()), std::nullopt};
        if (o.contains("error")) node.error = field(o, "error");
        nodes.push_back(std::move(node));
    }
    return nodes;
}

/// The nodes that can be asked.
std::vector<std::string> node_names(Client& client) {
    std::vector<std::string> names;
    for (auto& node : cluster_nodes(client))
        if (!node.error) names.push_back(std::move(node.name));
    return names;
}

void show_nodes(Context& c) {
    const auto result = c.client.call(request("nodes"));
    if (c.as_json) return void(std::cout << json::serialize(result) << '\n');
    std::vector<std::vector<std::string>> rows;
    for (const auto& n : result.at("nodes").as_array()) {
        const auto& o = n.as_object();
        const bool self = o.at("self").as_bool();
        rows.push_back({field(o, "name") + (self ? " *" : ""), field(o, "listen"), field(o, "admin"),
                        o.contains("error") ? "?" : (o.at("ready").as_bool() ? "ready" : "not ready"),
                        o.contains("drained") && o.at("drained").as_bool() ? "drained" : "-",
                        self ? "-" : field(o, "keepalive_rtt_ms"), field(o, "incarnation"),
                        o.contains("error") ? field(o, "error") : o.contains("not_ready") ? field(o, "not_ready") : ""});
    }
    print_table({"NODE", "LISTEN", "ADMIN", "STATE", "DRAINED", "KEEPALIVE_RTT_MS", "INCARNATION", "REASON"}, rows);
}

void show_balancers(Context& c) {
    const auto nodes = c.node ? std::vector<ClusterNode>{{*c.node, std::nullopt}} : cluster_nodes(c.client);
    json::array all;
    std::vector<std::vector<std::string>> rows;
    for (const auto& [node, error] : nodes) {
        if (error) {
            // Listed, not left out: its balancers are unknown from here.
            rows.push_back({node, "?", "-", "-", "-", "-", "-", "-", "-", "-", *error});
            all.push_back(json::object{{"node", node}, {"error", *error}});
            continue;
        }
        auto result = c.client.call(request("balancers", node));
        for (const auto& b : result.at("balancers").as_array()) {
            const auto& o = b.as_object();
            std::uint64_t errors = 0;
            for (const auto& [status, n] : o.at("calls_by_status").as_object())
                if (status != "ok") errors += n.to_number<std::uint64_t>();
            rows.push_back({node, field(o, "name"), field(o, "algorithm"), field(o, "members"),
                            o.at("joined").as_bool() ? "yes" : "no", field(o, "in_flight"), field(o, "calls"),
                            std::to_string(errors), field(o, "p50_ms"), field(o, "p99_ms"), ""});
        }
        for (const auto& parked : result.at("drained").as_array())
            rows.push_back({node, text(parked), "-", "-", "drained", "-", "-", "-", "-", "-", ""});
        all.push_back(std::move(result));
    }
    if (c.as_json) return void(std::cout << json::serialize(all) << '\n');
    print_table({"NODE", "BALANCER", "ALGORITHM", "MEMBERS", "JOINED", "IN_FLIGHT", "CALLS", "ERRORS", "P50_MS",
                 "P99_MS", "REASON"},
                rows);
}

void show_groups(Context& c) {
    const auto result = c.client.call(request("groups", c.node));
    if (c.as_json) return void(std::cout << json::serialize(result) << '\n');
    std::vector<std::vector<std::string>> rows;
    for (const auto& g : result.at("groups").as_array())
        rows.push_back({field(g.as_object(), "group"), field(g.as_object(), "members")});
    print_table({"GROUP", "MEMBERS"}, rows);
}

void show_plugins(Context& c) {
    const auto result = c.client.call(request("plugins", c.node));
    if (c.as_json) return void(std::cout << json::serialize(result) << '\n');
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : result.at("plugins").as_array()) {
        const auto& o = p.as_object();
        rows.push_back({field(o, "name"), field(o, "balancers"), field(o, "rpclb_version"), field(o, "abi_version"),
                        field(o, "file")});
    }
    print_table({"PLUGIN", "BALANCERS", "RPCLB", "ABI", "FILE"}, rows);
}

void show_stats(Context& c) {
    auto result = c.client.call(request("stats", c.node));
    if (c.as_json) return void(std::cout << json::serialize(result) << '\n');
    auto& o = result.as_object();
    // The key column is as wide as the longest key, and one space more.
    std::vector<std::pair<std::string, std::string>> lines;
    for (const auto* key : {"node", "incarnation", "uptime_s", "ready", "drained", "connections"})
        lines.emplace_back(key, field(o, key));
    for (const auto* section : {"health", "admin"})
        for (const auto& [k, v] : o.at(section).as_object())
            lines.emplace_back(std::string(section) + "." + std::string(k), text(v));
    std::size_t width = 0;
    for (const auto& [key, value] : lines) width = std::max(width, key.size());
    for (const auto& [key, value] : lines)
        std::cout << std::left << std::setw(static_cast<int>(width + 1)) << key << value << '\n';
}

// A one-line event: `event key=value ...`.
std::string describe_event(const json::object& e) {
    std::string line = field(e, "event");
    for (const auto& [k, v] : e)
        if (k != "event") line += " " + std::string(k) + "=" + text(v);
    return line;
}

int watch(Context& c, const std::vector<std::string>& patterns, std::optional<std::uint64_t> count) {
    json::object filter;
    if (!patterns.empty()) filter["events"] = json::value_from(patterns);
    auto r = request("subscribe", c.node);
    r["filter"] = std::move(filter);
    const auto sub = c.client.call(std::move(r)).at("subscription");
    if (!c.as_json) std::cerr << "watching (subscription " << text(sub) << "); Ctrl-C to stop\n";
    std::uint64_t seen = 0;
    while (!count || seen < *count) {
        const auto message = c.client.receive();
        if (!message.contains("sub")) continue;
        if (c.as_json) {
            std::cout << json::serialize(message) << std::endl;
        } else if (const auto* e = message.if_contains("event")) {
            std::cout << describe_event(e->as_object()) << std::endl;
        } else if (const auto* d = message.if_contains("dropped")) {
            std::cout << "(" << text(*d) << " events dropped so far: reading too slowly)" << std::endl;
            continue;
        }
        ++seen;
    }
    return exit_ok;
}

// The nodes a balancer command acts on: --node, else every node hosting `balancer`.
std::vector<std::string> hosting_nodes(Context& c, const std::string& balancer) {
    if (c.node) return {*c.node};
    std::vector<std::string> targets;
    for (const auto& node : node_names(c.client)) {
        const auto hosted = c.client.call(request("balancers", node));
        for (const auto& b : hosted.at("balancers").as_array())
            if (b.at("name").as_string() == balancer) targets.push_back(node);
    }
    if (targets.empty()) throw Failure{"not_found: no node hosts balancer \"" + balancer + "\""};
    return targets;
}

json::object json_object_argument(const std::string& text, std::string_view what) {
    boost::system::error_code ec;
    auto value = json::parse(text, ec);
    if (ec) throw Usage{std::string(what) + " is not JSON: " + ec.message()};
    if (!value.is_object()) throw Usage{std::string(what) + " must be a JSON object"};
    // Boost.JSON reads 1e400 as infinity and would write it as `Infinity`, which is not
    // JSON: what does not read back is refused here, as the node would refuse it.
    json::parse(json::serialize(value), ec);
    if (ec) throw Usage{std::string(what) + " holds a number too large for a double"};
    return std::move(value.as_object());
}

// balancer set-algorithm / set-options: `r` sent to each node hosting the balancer. Every
// node is asked even when one refuses (a refusal changes nothing there); one row each.
int change_algorithm(Context& c, const std::string& balancer, json::object r) {
    json::array answers;
    std::vector<std::vector<std::string>> rows;
    std::size_t failed = 0;
    const auto nodes = hosting_nodes(c, balancer);
    for (const auto& node : nodes) {
        r["node"] = node;
        try {
            auto result = c.client.call(r);
            const auto& o = result.as_object();
            const auto& before = o.at("previous").as_object();
            rows.push_back({node, balancer, field(before, "algorithm") + " " + field(before, "algorithm_opts"),
                            field(o, "algorithm") + " " + field(o, "algorithm_opts"), "ok"});
            answers.push_back(std::move(result));
        } catch (const Failure& f) {
            ++failed;
            rows.push_back({node, balancer, "-", "-", f.message});
            answers.push_back(json::object{{"node", node}, {"error", f.message}});
        }
    }
    if (c.as_json)
        std::cout << json::serialize(answers) << '\n';
    else
        print_table({"NODE", "BALANCER", "BEFORE", "NOW", "RESULT"}, rows);
    if (failed == 0) return exit_ok;
    std::cerr << "rpclb-admin: " << failed << " of " << nodes.size() << " nodes refused the change\n";
    return exit_error;
}

// reload-tls: every node connected to the admin node (or --node / NODE) reloads its TLS
// files; one row each. Nodes without an admin listener are listed, not asked: each must
// reload itself (SIGHUP, Cluster::reload_tls). One whose listener did not answer failed.
int reload_tls(Context& c) {
    const auto nodes = c.node ? std::vector<ClusterNode>{{*c.node, std::nullopt}} : cluster_nodes(c.client);
    json::array answers;
    std::vector<std::vector<std::string>> rows;
    std::size_t failed = 0, not_asked = 0, tls_off = 0;
    for (const auto& [node, error] : nodes) {
        if (error && *error == "no admin listener") {
            ++not_asked;
            rows.push_back({node, "not asked: " + *error});
            answers.push_back(json::object{{"node", node}, {"not_asked", *error}});
            continue;
        }
        if (error) {  // it has an admin listener, which did not answer the node list
            ++failed;
            rows.push_back({node, *error});
            answers.push_back(json::object{{"node", node}, {"error", *error}});
            continue;
        }
        try {
            answers.push_back(c.client.call(request("reload_tls", node)));
            rows.push_back({node, "reloaded"});
        } catch (const Failure& f) {
            ++(f.error.is_object() && f.error.as_object().contains("code") &&
                       f.error.as_object().at("code") == "unsupported"
                   ? tls_off
                   : failed);
            rows.push_back({node, f.message});
            answers.push_back(json::object{{"node", node}, {"error", f.error.is_object() ? f.error : json::value(f.message)}});
        }
    }
    if (c.as_json)
        std::cout << json::serialize(answers) << '\n';
    else
        print_table({"NODE", "RESULT"}, rows);
    if (not_asked)
        std::cerr << "rpclb-admin: " << not_asked << " node(s) have no admin listener: reload them yourselves\n";
    if (tls_off) std::cerr << "rpclb-admin: " << tls_off << " node(s) have TLS off: nothing to reload\n";
    if (failed)
        std::cerr << "rpclb-admin: " << failed << " of " << nodes.size()
                  << " nodes did not reload; they keep the credentials they had\n";
    return failed == 0 && tls_off == 0 ? exit_ok : exit_error;
}

void print_result(Context& c, const json::value& result) {
    if (c.as_json) return void(std::cout << json::serialize(result) << '\n');
    for (const auto& [k, v] : result.as_object()) std::cout << k << ": " << text(v) << '\n';
}

int run(Context& c, const std::vector<std::string>& args, const po::variables_map& vm) {
    const auto& cmd = args[0];
    const auto arity = [&](std::size_t min, std::size_t max) {
        if (args.size() - 1 < min || args.size() - 1 > max) throw Usage{"wrong number of arguments for " + cmd};
    };
    const auto optional_node = [&](std::size_t at) -> std::optional<std::string> {
        if (args.size() > at) return args[at];
        return c.node;
    };
    if (cmd == "nodes") return arity(0, 0), show_nodes(c), exit_ok;
    if (cmd == "balancers") return arity(0, 0), show_balancers(c), exit_ok;
    if (cmd == "groups") return arity(0, 0), show_groups(c), exit_ok;
    if (cmd == "plugins") {
        arity(0, 1);
        c.node = optional_node(1);
        return show_plugins(c), exit_ok;
    }
    if (cmd == "stats") {
        arity(0, 1);
        c.node = optional_node(1);
        return show_stats(c), exit_ok;
    }
    if (cmd == "metrics") {
        arity(0, 1);
        const auto result = c.client.call(request("metrics", optional_node(1)));
        std::cout << (c.as_json ? json::serialize(result) + "\n" : text(result.at("text")));
        return exit_ok;
    }
    if (cmd == "watch") {
        std::optional<std::uint64_t> count;
        if (vm.count("count")) {
            // Read signed: an unsigned option would take "-1" as 2^64 - 1.
            const auto n = vm["count"].as<std::int64_t>();
            if (n < 1) throw Usage{"--count must be at least 1, got " + std::to_string(n)};
            count = static_cast<std::uint64_t>(n);
        }
        return watch(c, {args.begin() + 1, args.end()}, count);
    }
    if (cmd == "drain" || cmd == "undrain" || cmd == "stop") {
        arity(1, 1);
        return print_result(c, c.client.call(request(cmd, args[1]))), exit_ok;
    }
    if (cmd == "log-level") {
        arity(1, 2);
        auto r = request("log_level", optional_node(2));
        r["level"] = args[1];
        return print_result(c, c.client.call(std::move(r))), exit_ok;
    }
    if (cmd == "reload-tls") {
        arity(0, 1);
        c.node = optional_node(1);
        return reload_tls(c);
    }
    if (cmd == "balancer") {
        if (args.size() < 2) throw Usage{"balancer needs start, stop, set-algorithm or set-options"};
        if (args[1] == "start") {
            arity(3, 3);
            auto r = request("balancer_start", c.node);
            r["name"] = args[2];
            r["algorithm"] = args[3];
            if (vm.count("options")) r["algorithm_opts"] = json_object_argument(vm["options"].as<std::string>(), "--options");
            return print_result(c, c.client.call(std::move(r))), exit_ok;
        }
        if (args[1] == "stop") {
            arity(2, 2);
            for (const auto& node : hosting_nodes(c, args[2])) {
                auto r = request("balancer_stop", node);
                r["name"] = args[2];
                print_result(c, c.client.call(std::move(r)));
            }
            return exit_ok;
        }
        if (args[1] == "set-algorithm") {
            arity(3, 3);
            auto r = request("balancer_set_algorithm");
            r["name"] = args[2];
            r["algorithm"] = args[3];
            if (vm.count("options")) r["algorithm_opts"] = json_object_argument(vm["options"].as<std::string>(), "--options");
            return change_algorithm(c, args[2], std::move(r));
        }
        if (args[1] == "set-options") {
            arity(3, 3);
            auto r = request("balancer_set_options");
            r["name"] = args[2];
            r["algorithm_opts"] = json_object_argument(args[3], "the options");
            return change_algorithm(c, args[2], std::move(r));
        }
        throw Usage{"balancer needs start, stop, set-algorithm or set-options, got \"" + args[1] + "\""};
    }
    throw Usage{"unknown command \"" + cmd + "\""};
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description options("options");
    options.add_options()
        ("help,h", "show this help")
        ("admin", po::value<std::string>(), "HOST:PORT of a node's admin listener (rpclb-node --admin)")
        ("token", po::value<std::string>(), "admin token (default: $RPCLB_ADMIN_TOKEN)")
        ("json", "print the answers as JSON")
        ("node", po::value<std::string>(), "the node a balancer command acts on")
        ("options", po::value<std::string>(), "balancer start / set-algorithm: the algorithm's options, a JSON object")
        ("count", po::value<std::int64_t>(), "watch: exit after this many events (at least 1)")
        ("timeout", po::value<std::uint32_t>()->default_value(10000),
         "longest wait in ms for the connection and each answer (watch waits for events without limit)");
    po::options_description hidden;
    hidden.add_options()("args", po::value<std::vector<std::string>>());
    po::options_description all;
    all.add(options).add(hidden);
    po::positional_options_description positional;
    positional.add("args", -1);
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << "rpclb-admin: " << e.what() << "\n" << usage_text;
        return exit_usage;
    }
    if (vm.count("help")) {
        std::cout << usage_text << "\n" << options;
        return exit_ok;
    }
    const auto args = vm.count("args") ? vm["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (!vm.count("admin") || args.empty()) {
        std::cerr << "rpclb-admin: " << (args.empty() ? "no command" : "--admin HOST:PORT is required") << "\n"
                  << usage_text;
        return exit_usage;
    }
    std::string token;
    if (const char* env = std::getenv("RPCLB_ADMIN_TOKEN")) token = env;
    if (vm.count("token")) token = vm["token"].as<std::string>();
    try {
        const auto timeout = vm["timeout"].as<std::uint32_t>();
        if (timeout == 0) throw Usage{"--timeout must be at least 1 (ms)"};
        Client client(vm["admin"].as<std::string>(), token, std::chrono::milliseconds(timeout));
        Context context{client, vm.count("json") > 0, std::nullopt};
        if (vm.count("node")) context.node = vm["node"].as<std::string>();
        return run(context, args, vm);
    } catch (const Usage& u) {
        std::cerr << "rpclb-admin: " << u.message << "\n" << usage_text;
        return exit_usage;
    } catch (const Failure& f) {
        std::cerr << "rpclb-admin: " << f.message << "\n";
        // Scripts that asked for JSON get the failure as JSON too (the text stays on stderr).
        if (vm.count("json")) std::cout << json::serialize(failure_json(f)) << "\n";
        return exit_error;
    } catch (const std::exception& e) {
        std::cerr << "rpclb-admin: " << e.what() << "\n";
        return exit_error;
    }
}
