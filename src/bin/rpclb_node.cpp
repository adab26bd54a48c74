// rpclb-node: one cluster node with the demo functions, run from flags.
#include <rpclb/cluster.hpp>
#include <rpclb/log.hpp>

#include <boost/program_options.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <unistd.h>

namespace po = boost::program_options;

namespace {

void register_demo_functions(rpclb::Cluster& cluster) {
    cluster.register_function("demo", "echo", [](const boost::json::array& args) -> rpclb::CallResult {
        return boost::json::value(args);
    });
    const std::string node = cluster.name();
    cluster.register_function("demo", "node", [node](const boost::json::array&) -> rpclb::CallResult {
        return boost::json::value(node);
    });
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
}

}  // namespace

int main(int argc, char** argv) {
    std::string name, listen, cookie, log_level;
    std::vector<std::string> seeds, plugin_dirs, balancers;
    std::size_t workers = 4;
    long idle_timeout_ms = 3000;
    po::options_description desc("rpclb-node: run one node of an rpclb cluster");
    desc.add_options()
        ("help,h", "show this help")
        ("name", po::value(&name), "node name short@host (default node<pid>@127.0.0.1)")
        ("listen", po::value(&listen)->default_value("127.0.0.1:0"), "listen HOST:PORT (port 0 = any free port)")
        ("seed", po::value(&seeds)->composing(), "HOST:PORT of a node to join through (repeatable)")
        ("cookie", po::value(&cookie), "shared cluster secret (default: $RPCLB_COOKIE)")
        ("plugins", po::value(&plugin_dirs)->composing(), "plugin directory searched first (repeatable)")
        ("balancer", po::value(&balancers)->composing(), "start balancer NAME=ALGORITHM (repeatable)")
        ("workers", po::value(&workers)->default_value(4), "handler threads")
        ("idle-timeout", po::value(&idle_timeout_ms)->default_value(3000), "keep-alive idle timeout, ms")
        ("log-level", po::value(&log_level)->default_value("info"), "trace|debug|info|warning|error|fatal");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
        rpclb::log::init(log_level);
    } catch (const std::exception& e) {
        std::cerr << "rpclb-node: " << e.what() << "\n" << desc;
        return 2;
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    if (cookie.empty())
        if (const char* env = std::getenv("RPCLB_COOKIE")) cookie = env;
    if (name.empty()) name = "node" + std::to_string(::getpid()) + "@127.0.0.1";

    // Block the stop signals in every thread; the main thread waits for them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    rpclb::ClusterOptions options;
    options.name = name;
    options.listen = listen;
    options.seeds = seeds;
    options.cookie = cookie;
    options.worker_threads = workers;
    options.idle_timeout = std::chrono::milliseconds(idle_timeout_ms);
    for (const auto& dir : plugin_dirs) options.plugin_path.emplace_back(dir);

    std::unique_ptr<rpclb::Cluster> cluster;
    try {
        cluster = std::make_unique<rpclb::Cluster>(options);
        register_demo_functions(*cluster);
        cluster->start();
    } catch (const std::exception& e) {
        std::cerr << "rpclb-node: " << e.what() << "\n";
        return 1;
    }
    const auto endpoint = cluster->listen_endpoint();
    std::cout << "listening on " << endpoint->address().to_string() << ":" << endpoint->port() << std::endl;

    for (const auto& spec : balancers) {
        const auto eq = spec.find('=');
        rpclb::LoadBalancerOptions lb;
        lb.name = spec.substr(0, eq);
        lb.algorithm = eq == std::string::npos ? "random" : spec.substr(eq + 1);
        try {
            cluster->start_balancer(lb);
        } catch (const std::exception& e) {
            // The node keeps serving its other balancers and direct calls.
            std::cerr << "rpclb-node: cannot start balancer \"" << spec << "\": " << e.what() << std::endl;
        }
    }

    int signal = 0;
    sigwait(&stop_signals, &signal);
    std::cerr << "rpclb-node: " << name << " got " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
              << ", leaving and draining" << std::endl;
    // Stop in another thread so that a handler that never returns cannot hold the process
    // past the drain: after stop_timeout plus a grace period, or on a second signal, exit 1.
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
        for (const auto& b : cluster->balancer_names()) cluster->stop_balancer(b);
        cluster->stop();
        stopped = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + options.stop_timeout + std::chrono::seconds(5);
    while (!stopped) {
        const timespec tick{0, 50'000'000};
        if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
            std::cerr << "rpclb-node: second signal, exiting without waiting for handlers" << std::endl;
            std::_Exit(1);
        }
        if (std::chrono::steady_clock::now() > deadline) {
            std::cerr << "rpclb-node: handlers still running after the drain, exiting" << std::endl;
            std::_Exit(1);
        }
    }
    stopper.join();
    return 0;
}
