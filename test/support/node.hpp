// Integration-test harness: rpclb-node processes on 127.0.0.1 with ephemeral ports, an
// in-process client node, a temporary directory for their logs.
#pragma once

#include "process.hpp"
#include "wait.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/log.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/framework.hpp>
#include <boost/test/results_collector.hpp>
#include <boost/test/tree/test_unit.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace rpclb {

/// Lets BOOST_TEST print error codes by name.
inline std::ostream& boost_test_print_type(std::ostream& out, ErrorCode code) { return out << to_string(code); }

}  // namespace rpclb

namespace rpclb::test {

using namespace std::chrono_literals;

/// The cookie of the clusters the tests build.
inline const std::string test_cookie = "rpclb-integration-cookie";

namespace detail {

inline std::filesystem::path executable_dir() {
    return std::filesystem::canonical("/proc/self/exe").parent_path();
}

// A directory from the environment (set by ctest), else relative to the test executable
// (build/test/<exe> next to build/bin and build/plugins), so a test binary also runs by
// hand.
inline std::filesystem::path env_dir(const char* variable, const char* fallback) {
    if (const char* value = std::getenv(variable); value && *value) {
        std::string v(value);
        return v.substr(0, v.find(':'));
    }
    return executable_dir().parent_path() / fallback;
}

}  // namespace detail

/// Directory holding rpclb-node: $RPCLB_BIN_DIR or <build>/bin.
inline std::filesystem::path bin_dir() { return detail::env_dir("RPCLB_BIN_DIR", "bin"); }

/// Directory holding the algorithm plugins: $RPCLB_PLUGIN_PATH or <build>/plugins.
inline std::filesystem::path plugin_dir() { return detail::env_dir("RPCLB_PLUGIN_PATH", "plugins"); }

/// Directory holding the test plugins (test/plugins/): $RPCLB_TEST_PLUGIN_DIR or
/// <build>/test_plugins.
inline std::filesystem::path test_plugin_dir() { return detail::env_dir("RPCLB_TEST_PLUGIN_DIR", "test_plugins"); }

/// Options of an in-process node for tests: `name`, an ephemeral port on 127.0.0.1,
/// test_cookie, reconnects every 100 ms, `seeds`, and the algorithm plugins on the plugin
/// path. Callers change what their test needs (client, more plugin directories).
inline rpclb::ClusterOptions in_process_node_options(std::string name, std::vector<std::string> seeds = {}) {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.listen = "127.0.0.1:0";
    o.cookie = test_cookie;
    o.seeds = std::move(seeds);
    o.reconnect_interval = std::chrono::milliseconds(100);
    o.plugin_path = {plugin_dir()};
    return o;
}

/// Options of balancer `name` running `algorithm` with `algorithm_opts`, with a drain
/// timeout short enough for tests.
inline rpclb::LoadBalancerOptions balancer_options(std::string name, std::string algorithm,
                                                   boost::json::object algorithm_opts = {},
                                                   std::chrono::milliseconds drain_timeout = std::chrono::seconds(2)) {
    rpclb::LoadBalancerOptions o;
    o.name = std::move(name);
    o.algorithm = std::move(algorithm);
    o.algorithm_opts = std::move(algorithm_opts);
    o.drain_timeout = drain_timeout;
    return o;
}

/// How to start one rpclb-node.
struct NodeSpec {
    /// Node name `short@host`.
    std::string name;
    /// --seed values ("127.0.0.1:PORT").
    std::vector<std::string> seeds;
    /// --balancer values ("w=round_robin").
    std::vector<std::string> balancers;
    /// When set, passed as --cookie; otherwise the node gets test_cookie via RPCLB_COOKIE.
    std::optional<std::string> cookie_flag;
    std::string log_level = "info";
    /// Any further flags (e.g. {"--idle-timeout", "1000"}).
    std::vector<std::string> extra_args;
    /// --listen value (e.g. a PortReservation's address).
    std::string listen = "127.0.0.1:0";
};

/// One running rpclb-node whose listener is known.
class Node {
public:
    /// Spawns the node (stderr to `log_path`) and waits up to 10 s for its
    /// `listening on` line. Throws std::runtime_error, with the node's log, if it doesn't
    /// come.
    Node(const std::filesystem::path& log_path, NodeSpec spec) : spec_(std::move(spec)) {
        std::vector<std::string> args{"--name", spec_.name, "--listen", spec_.listen,
                                      "--plugins", plugin_dir().string(), "--log-level", spec_.log_level};
        for (const auto& s : spec_.seeds) args.insert(args.end(), {"--seed", s});
        for (const auto& b : spec_.balancers) args.insert(args.end(), {"--balancer", b});
        std::vector<std::pair<std::string, std::string>> env;
        if (spec_.cookie_flag)
            args.insert(args.end(), {"--cookie", *spec_.cookie_flag});
        else
            env.emplace_back("RPCLB_COOKIE", test_cookie);
        args.insert(args.end(), spec_.extra_args.begin(), spec_.extra_args.end());
        process_ = std::make_unique<Process>(bin_dir() / "rpclb-node", args, env, log_path);
        const auto line = process_->wait_for_line("listening on ", Process::Clock::now() + 10s);
        const auto address = line ? parse_listening_line(*line) : std::nullopt;
        if (!address)
            throw std::runtime_error("rpclb-node " + spec_.name + " did not report its listener; stderr:\n" +
                                     process_->stderr_text());
        address_ = *address;
    }

    const std::string& name() const noexcept { return spec_.name; }
    /// "127.0.0.1:PORT", for --seed and ClusterOptions::seeds.
    std::string address() const { return address_.text(); }
    std::uint16_t port() const noexcept { return address_.port; }
    Process& process() noexcept { return *process_; }
    /// The node's stderr so far.
    std::string log() const { return process_->stderr_text(); }
    /// True when the node's stderr holds `text`.
    bool log_contains(std::string_view text) const { return log().find(text) != std::string::npos; }
    /// How many times `text` occurs in the node's stderr.
    std::size_t log_count(std::string_view text) const {
        const auto s = log();
        std::size_t n = 0;
        for (auto pos = s.find(text); pos != std::string::npos; pos = s.find(text, pos + text.size())) ++n;
        return n;
    }

private:
    NodeSpec spec_;
    std::unique_ptr<Process> process_;
    ListenAddress address_;
};

/// Fixture of an integration test case: a fresh temporary directory for logs, helpers to
/// start nodes and clients. On failure it prints the tail of every log and keeps the
/// directory; on success it removes it, unless RPCLB_TEST_KEEP_LOGS is set.
///
/// Objects made by the test body (nodes, clients) are destroyed before this fixture, so
/// their processes are reaped before the logs are read.
class Harness {
public:
    Harness() {
        rpclb::log::init("warning");  // the in-process client's own records, on stderr
        auto pattern = (std::filesystem::temp_directory_path() / "rpclb-it-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        dir_ = pattern;
    }

    ~Harness() {
        namespace ut = boost::unit_test;
        const bool failed =
            std::uncaught_exceptions() > 0 ||
            !ut::results_collector.results(ut::framework::current_test_case().p_id).passed();
        std::error_code ec;
        if (!failed) {
            if (std::getenv("RPCLB_TEST_KEEP_LOGS"))
                std::cerr << "---- logs kept in " << dir_.string() << "\n";
            else
                std::filesystem::remove_all(dir_, ec);
            return;
        }
        std::cerr << "---- logs of the failed test are kept in " << dir_.string() << "\n";
        for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
            auto text = detail::read_file(entry.path());
            constexpr std::size_t tail = 6000;
            if (text.size() > tail) text = "[...]\n" + text.substr(text.size() - tail);
            std::cerr << "---- " << entry.path().filename().string() << "\n" << text << "\n";
        }
    }

    Harness(const Harness&) = delete;
    Harness& operator=(const Harness&) = delete;

    const std::filesystem::path& dir() const noexcept { return dir_; }

    /// Starts an rpclb-node named `name`@127.0.0.1 (see NodeSpec for the rest). Its stderr
    /// goes to <dir>/<short name>.log (.2.log, ... for a name started again).
    std::unique_ptr<Node> start_node(NodeSpec spec) {
        if (spec.name.find('@') == std::string::npos) spec.name += "@127.0.0.1";
        const auto short_name = spec.name.substr(0, spec.name.find('@'));
        auto log = dir_ / (short_name + ".log");
        for (int i = 2; std::filesystem::exists(log); ++i)
            log = dir_ / (short_name + "." + std::to_string(i) + ".log");
        return std::make_unique<Node>(log, std::move(spec));
    }

    /// Starts an in-process client node (ClusterOptions::client) seeded with `seeds`.
    /// `options` may set anything else; name, seeds, cookie and client are filled in when
    /// left empty.
    std::unique_ptr<Cluster> start_client(std::vector<std::string> seeds, ClusterOptions options = {}) {
        if (options.name.empty()) options.name = "client" + std::to_string(++clients_) + "@127.0.0.1";
        options.seeds = std::move(seeds);
        if (options.cookie.empty()) options.cookie = test_cookie;
        options.client = true;
        options.plugin_path.push_back(plugin_dir());
        auto client = std::make_unique<Cluster>(std::move(options));
        client->start();
        return client;
    }

private:
    std::filesystem::path dir_;
    int clients_ = 0;
};

/// Sorted copy of node names, for comparing sets.
inline std::vector<std::string> sorted(std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    return names;
}

/// The members `cluster` sees in `group`.
inline std::vector<std::string> members_of(Cluster& cluster, std::string_view group) {
    return cluster.groups().members(group)->nodes;
}

/// Waits up to `timeout` until `cluster` sees exactly `expected` in `group`.
inline bool wait_for_members(Cluster& cluster, std::string_view group, std::vector<std::string> expected,
                             std::chrono::milliseconds timeout = 5s) {
    expected = sorted(std::move(expected));
    return eventually([&] { return members_of(cluster, group) == expected; }, timeout);
}

/// Waits up to `timeout` until `cluster` is connected to exactly `expected`.
inline bool wait_for_connected(Cluster& cluster, std::vector<std::string> expected,
                               std::chrono::milliseconds timeout = 5s) {
    expected = sorted(std::move(expected));
    return eventually([&] { return cluster.connected_nodes() == expected; }, timeout);
}

/// Fixture: one rpclb-node `a` and an in-process client connected to it.
struct OneNode : Harness {
    OneNode() {
        a = start_node({.name = "a"});
        client = start_client({a->address()});
        if (!wait_for_connected(*client, {a->name()}))
            throw std::runtime_error("the client did not connect to a within 5 s");
    }
    std::unique_ptr<Node> a;
    std::unique_ptr<Cluster> client;
};

}  // namespace rpclb::test
