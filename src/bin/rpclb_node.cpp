// rpclb-node: one cluster node with the demo functions, run from flags and a JSON config file.
#include <rpclb/admin.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/config.hpp>
#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/log.hpp>
#include <rpclb/stop_signal.hpp>
#include <rpclb/trace.hpp>

#include "tool_plugin_dirs.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <pthread.h>
#include <signal.h>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>
#include <unistd.h>

namespace po = boost::program_options;

namespace {

// SIGHUP reloads the node's TLS files (Cluster::reload_tls, which logs the outcome) and
// never ends the process. main() blocks SIGHUP in its first line, before any thread is
// made, so every thread inherits the block; a SIGHUP that comes before serve() stays
// pending until then. serve() starts a thread that takes SIGHUP with sigwait(); the
// destructor wakes it with a SIGHUP of its own and joins it.
class ReloadOnHangup {
public:
    ReloadOnHangup() = default;
    ~ReloadOnHangup() {
        if (!thread_.joinable()) return;
        stopping_ = true;
        ::pthread_kill(thread_.native_handle(), SIGHUP);
        thread_.join();
    }
    ReloadOnHangup(const ReloadOnHangup&) = delete;
    ReloadOnHangup& operator=(const ReloadOnHangup&) = delete;

    // Blocks SIGHUP in the calling thread: main() calls it first.
    static void block() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGHUP);
        ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    }

    // `cluster` must outlive this object.
    void serve(rpclb::Cluster& cluster) {
        thread_ = std::thread([this, &cluster] {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGHUP);
            for (;;) {
                int signal = 0;
                if (::sigwait(&set, &signal) != 0) continue;
                if (stopping_) return;
                std::cerr << "rpclb-node: SIGHUP: reloading the TLS files" << std::endl;
                (void)cluster.reload_tls();  // logged either way; a failure keeps the old credentials
            }
        });
    }

private:
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

// The trace context demo.trace's handler sees, as JSON (parent_span_id null for a root).
boost::json::value trace_json(const rpclb::TraceContext& t) {
    const bool root = t.parent_span_id == rpclb::SpanId{};
    return boost::json::object{{"trace_id", rpclb::to_hex(t.trace_id)},
                               {"span_id", rpclb::to_hex(t.span_id)},
                               {"parent_span_id", root ? boost::json::value() : boost::json::value(rpclb::to_hex(t.parent_span_id))},
                               {"sampled", t.sampled()}};
}

// demo.echo and demo.node never block: they run inline, on the thread that read the
// request. demo.sleep, demo.fail and demo.trace (which may call another node) run on the
// worker pool.
void register_demo_functions(rpclb::Cluster& cluster) {
    const rpclb::HandlerOptions run_inline{.run_inline = true};
    cluster.register_function(
        "demo", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return boost::json::value(args); },
        run_inline);
    const std::string node = cluster.name();
    cluster.register_function(
        "demo", "node", [node](const boost::json::array&) -> rpclb::CallResult { return boost::json::value(node); },
        run_inline);
    cluster.register_function("demo", "sleep", [node](const boost::json::array& args) -> rpclb::CallResult {
        if (args.empty() || !args[0].is_number())
            return rpclb::ErrorMessage{rpclb::ErrorCode::bad_request,
                                       "demo.sleep takes the milliseconds to sleep", {}};
        const auto ms = args[0].to_number<double>();
        if (ms < 0 || ms > 3'600'000)
            return rpclb::ErrorMessage{rpclb::ErrorCode::bad_request,
                                       "demo.sleep milliseconds must be in 0..3600000", {}};
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
        return boost::json::value(node);
    });
    cluster.register_function("demo", "fail", [](const boost::json::array&) -> rpclb::CallResult {
        throw std::runtime_error("demo.fail was called");
    });
    // demo.trace: the handler's trace context; demo.trace NODE: what NODE's demo.trace
    // answers when called from here (its trace continues this one).
    cluster.register_function("demo", "trace", [&cluster](const boost::json::array& args) -> rpclb::CallResult {
        if (!args.empty()) {
            if (args.size() > 1 || !args[0].is_string())
                return rpclb::ErrorMessage{rpclb::ErrorCode::bad_request, "demo.trace takes an optional node name", {}};
            return cluster.call(std::string(args[0].get_string()), "demo", "trace", {});
        }
        const auto trace = rpclb::current_trace();
        if (!trace) return rpclb::ErrorMessage{rpclb::ErrorCode::internal_server_error, "no trace context", {}};
        return trace_json(*trace);
    });
}

// A `--balancer NAME[=ALGORITHM]` flag: a balancer with default options.
std::optional<rpclb::LoadBalancerOptions> balancer_flag(const std::string& spec) {
    const auto eq = spec.find('=');
    rpclb::LoadBalancerOptions lb;
    lb.name = spec.substr(0, eq);
    if (lb.name.empty()) return std::nullopt;
    if (eq != std::string::npos) lb.algorithm = spec.substr(eq + 1);
    return lb;
}

// Copies into `config` the flags that were given on the command line (`given`), or those
// left at their default (`!given`): the two layers around the config file.
bool apply_flags(const po::variables_map& vm, bool given, rpclb::NodeConfig& config) {
    const auto has = [&](const char* flag) { return vm.count(flag) && vm[flag].defaulted() == !given; };
    auto& o = config.cluster;
    if (has("name")) o.name = vm["name"].as<std::string>();
    if (has("listen")) o.listen = vm["listen"].as<std::string>();
    if (has("seed")) o.seeds = vm["seed"].as<std::vector<std::string>>();
    if (has("discovery")) o.discovery = vm["discovery"].as<std::string>();
    if (has("cookie")) o.cookie = vm["cookie"].as<std::string>();
    if (has("plugins")) {
        const auto& dirs = vm["plugins"].as<std::vector<std::string>>();
        o.plugin_path.assign(dirs.begin(), dirs.end());
    }
    if (has("workers")) o.worker_threads = static_cast<std::size_t>(vm["workers"].as<long>());
    if (has("idle-timeout")) o.idle_timeout = std::chrono::milliseconds(vm["idle-timeout"].as<long>());
    if (has("log-level")) config.log_level = vm["log-level"].as<std::string>();
    if (has("admin")) config.admin.listen = vm["admin"].as<std::string>();
    if (has("admin-token")) config.admin.token = vm["admin-token"].as<std::string>();
    if (has("tls-cert")) o.tls.cert = vm["tls-cert"].as<std::string>();
    if (has("tls-key")) o.tls.key = vm["tls-key"].as<std::string>();
    if (has("tls-ca")) o.tls.ca = vm["tls-ca"].as<std::string>();
    if (has("tls-min-version")) {
        const auto& text = vm["tls-min-version"].as<std::string>();
        const auto version = rpclb::parse_tls_version(text);
        if (!version) {
            std::cerr << "rpclb-node: --tls-min-version must be 1.2 or 1.3, got \"" << text << "\"\n";
            return false;
        }
        o.tls.min_version = *version;
    }
    if (has("balancer")) {
        for (const auto& spec : vm["balancer"].as<std::vector<std::string>>()) {
            auto lb = balancer_flag(spec);
            if (!lb) {
                std::cerr << "rpclb-node: --balancer \"" << spec << "\": the balancer name before '=' is empty\n";
                return false;
            }
            auto same = std::find_if(config.balancers.begin(), config.balancers.end(),
                                     [&](const auto& b) { return b.name == lb->name; });
            if (same != config.balancers.end())
                *same = std::move(*lb);
            else
                config.balancers.push_back(std::move(*lb));
        }
    }
    return true;
}

// The error's message, naming the --tls-* flag instead of the config field (`--tls-key: ...`
// rather than `config field "tls.key": ...`) unless the field may have come from a --config
// file: the flag was not given and a file was.
std::string flag_named(const po::variables_map& vm, const rpclb::ErrorMessage& error) {
    const auto* field = error.details.if_contains("field");
    if (!field || !field->is_string() || !field->get_string().starts_with("tls.")) return error.message;
    const rpclb::detail::OptionProblem problem{std::string(field->get_string()), {}};
    const auto flag = problem.flag();
    const std::string prefix = "config field \"" + problem.field + "\"";
    const bool from_flag = vm.count(flag.substr(2)) > 0;
    if ((vm.count("config") && !from_flag) || !error.message.starts_with(prefix)) return error.message;
    return flag + error.message.substr(prefix.size());
}

// The node's configuration: flags given > the --config file > flag defaults > library
// defaults, with $RPCLB_COOKIE below all of them for the cookie. Prints the error and
// returns nullopt when anything is invalid.
std::optional<rpclb::NodeConfig> node_config(const po::variables_map& vm) {
    rpclb::NodeConfig config;
    config.cluster.name = "node" + std::to_string(::getpid()) + "@127.0.0.1";
    config.cluster.cookie = rpclb::environment_cookie();
    if (const char* env = std::getenv("RPCLB_ADMIN_TOKEN")) config.admin.token = env;
    if (!apply_flags(vm, false, config)) return std::nullopt;
    if (vm.count("config")) {
        auto file = rpclb::load_node_config(vm["config"].as<std::string>(), config);
        if (!file) {
            std::cerr << "rpclb-node: " << file.error().message << "\n";
            return std::nullopt;
        }
        config = std::move(*file);
    }
    if (!apply_flags(vm, true, config)) return std::nullopt;
    if (auto valid = rpclb::validate(config); !valid) {
        std::cerr << "rpclb-node: " << flag_named(vm, valid.error()) << "\n";
        return std::nullopt;
    }
    if (config.cluster.client) {
        std::cerr << "rpclb-node: config field \"client\": must be false; rpclb-node runs a serving node "
                     "(a client node is rpclb-call or a Cluster in your program)\n";
        return std::nullopt;
    }
    return config;
}

}  // namespace

int main(int argc, char** argv) {
    ReloadOnHangup::block();  // first: SIGHUP never ends the process from here on
    po::options_description desc("rpclb-node: run one node of an rpclb cluster");
    desc.add_options()
        ("help,h", "show this help")
        ("config", po::value<std::string>(), "JSON config file (doc/reference/configuration.md); the flags below override it")
        ("name", po::value<std::string>(), "node name short@host (default node<pid>@127.0.0.1)")
        ("listen", po::value<std::string>()->default_value("127.0.0.1:0"), "listen HOST:PORT (port 0 = any free port)")
        ("seed", po::value<std::vector<std::string>>()->composing(), "HOST:PORT of a node to join through, or dns:NAME:PORT for every address of NAME (repeatable)")
        ("discovery", po::value<std::string>(), "etcd://HOST:PORT/PREFIX: register this node in etcd and dial every node listed there (doc/how-to/discovery.md)")
        ("cookie", po::value<std::string>(), "shared cluster secret (default: $RPCLB_COOKIE)")
        ("plugins", po::value<std::vector<std::string>>()->composing(), "plugin directory searched first (repeatable)")
        ("balancer", po::value<std::vector<std::string>>()->composing(), "start balancer NAME[=ALGORITHM] (default algorithm peak_ewma; repeatable; replaces a file's balancer of that name)")
        ("workers", po::value<long>()->default_value(4), "handler threads, 1..1024")
        ("idle-timeout", po::value<long>()->default_value(3000), "failure detection: probes every idle/3, a silent peer is dead idle/3..idle after suspected, ms")
        ("log-level", po::value<std::string>()->default_value("info"), "trace|debug|info|warning|error|fatal")
        ("admin", po::value<std::string>(), "serve the admin console on HOST:PORT (/metrics, /healthz, /readyz, WebSocket /admin)")
        ("admin-token", po::value<std::string>(), "admin token (default: $RPCLB_ADMIN_TOKEN); required unless --admin is a loopback address")
        ("tls-cert", po::value<std::string>(), "PEM certificate of this node: TLS on every mesh connection; SIGHUP reloads the --tls-* files (doc/how-to/secure-a-cluster.md)")
        ("tls-key", po::value<std::string>(), "PEM private key of --tls-cert")
        ("tls-ca", po::value<std::string>(), "PEM CA certificate(s): verify every peer's certificate (mutual TLS)")
        ("tls-min-version", po::value<std::string>(), "oldest TLS version accepted: 1.3 (default) or 1.2");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
        // Read as signed, so that -1 is reported as given rather than as 2^64 - 1; 0 and
        // values over 1024 are refused by validate() with the config field name.
        if (const auto workers = vm["workers"].as<long>(); workers < 0)
            throw std::invalid_argument("the argument ('" + std::to_string(workers) +
                                        "') for option '--workers' is invalid: must be in 1..1024");
    } catch (const std::exception& e) {
        std::cerr << "rpclb-node: " << e.what() << "\n(rpclb-node --help lists the options)\n";
        return 2;
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    auto config = node_config(vm);
    if (!config) return 2;
    rpclb::log::init(config->log_level);
    rpclb::tools::add_tool_plugin_dirs(config->cluster.plugin_path);

    // Set by the admin `stop` command, which then ends the wait as SIGTERM does: for the log
    // line only.
    std::atomic<bool> admin_stop{false};
    // From here SIGTERM and SIGINT no longer end the process: the main thread waits for
    // them, and for the node giving up its name, which ends the wait too.
    rpclb::StopSignal stop_signal;

    std::unique_ptr<rpclb::Cluster> cluster;
    std::unique_ptr<rpclb::AdminServer> admin;  // declared after the cluster: destroyed first
    // Takes the SIGHUPs held since main() began from serve() on; destroyed before the cluster.
    ReloadOnHangup reload_on_hangup;
    try {
        cluster = std::make_unique<rpclb::Cluster>(config->cluster);
    } catch (const std::exception& e) {
        std::cerr << "rpclb-node: " << e.what() << "\n";
        return 1;
    }
    if (!config->admin.listen.empty()) {
        try {
            // The admin `stop` command stops the node the way SIGTERM does.
            admin = std::make_unique<rpclb::AdminServer>(*cluster, config->admin, [&admin_stop, &stop_signal] {
                admin_stop = true;
                stop_signal.request_stop();
            });
        } catch (const std::invalid_argument& e) {
            std::cerr << "rpclb-node: " << e.what() << "\n";
            return 2;
        }
    }
    try {
        register_demo_functions(*cluster);
        cluster->start();
    } catch (const std::exception& e) {
        std::cerr << "rpclb-node: " << e.what() << "\n";
        return 1;
    }
    reload_on_hangup.serve(*cluster);
    // A node without a balancer it was asked for would serve a cluster that expects it
    // there: every failure is reported, then the node leaves and exits 1.
    bool balancers_started = true;
    for (const auto& lb : config->balancers) {
        try {
            cluster->start_balancer(lb);
        } catch (const std::exception& e) {
            std::cerr << "rpclb-node: cannot start balancer \"" << lb.name << "=" << lb.algorithm
                      << "\": " << e.what() << std::endl;
            balancers_started = false;
        }
    }
    if (!balancers_started) {
        std::cerr << "rpclb-node: exiting, since a balancer could not start" << std::endl;
        for (const auto& b : cluster->balancer_names()) cluster->stop_balancer(b);
        cluster->stop();
        return 1;
    }
    if (admin) {
        try {
            admin->start();
        } catch (const std::exception& e) {
            std::cerr << "rpclb-node: cannot start the admin listener on " << config->admin.listen << ": " << e.what()
                      << "\n";
            return 1;
        }
        admin->set_ready(true);
        const auto a = admin->endpoint();
        std::cout << "admin on " << rpclb::detail::to_host_port(*a) << std::endl;
    }
    // Printed once the balancers are started, so that a script waiting for this line can
    // route through them at once.
    const auto endpoint = cluster->listen_endpoint();
    std::cout << "listening on " << rpclb::detail::to_host_port(*endpoint) << std::endl;

    const int signal = stop_signal.wait();
    // Another live process holds this node's name: the node gave it up, which ended the
    // wait, and this process exits 1 saying why.
    if (auto why = cluster->name_taken()) {
        std::cerr << "rpclb-node: " << *why << std::endl;
        if (admin) admin->stop();
        cluster->stop();
        return 1;
    }
    std::cerr << "rpclb-node: " << config->cluster.name << " got "
              << (admin_stop ? "the admin stop command" : signal == SIGTERM ? "SIGTERM" : "SIGINT")
              << ", leaving and draining" << std::endl;
    if (admin) admin->set_stopping();
    // Stop in another thread so that a handler that never returns cannot hold the process
    // past the drain: after stop_timeout plus a grace period, or on a second signal, exit 1.
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
        for (const auto& b : cluster->balancer_names()) cluster->stop_balancer(b);
        cluster->stop();
        stopped = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + config->cluster.stop_timeout + std::chrono::seconds(5);
    while (!stopped) {
        if (stop_signal.wait_for(std::chrono::milliseconds(50))) {
            std::cerr << "rpclb-node: second signal, exiting without waiting for handlers" << std::endl;
            std::_Exit(1);
        }
        if (std::chrono::steady_clock::now() > deadline) {
            std::cerr << "rpclb-node: handlers still running after the drain, exiting" << std::endl;
            std::_Exit(1);
        }
    }
    stopper.join();
    if (admin) admin->stop();
    return 0;
}
