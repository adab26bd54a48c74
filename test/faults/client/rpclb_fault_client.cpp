// rpclb-fault-client: the caller of the fault tests (test/faults/) and of scripts/chaos.sh.
// A client node that does one of three jobs and prints one JSON object on stdout:
//
//   big    one call of demo.node with a string argument of --bytes bytes to --node
//          {"ok": bool, "node": "...", "ms": N, "error": {...}}
//   bigs   --count such calls, --concurrency at a time, sampling the probe round trip
//          {"calls", "ok", "ms", "errors", "link_lost", "idle_rtt_ms", "rtt_ms": {...}}
//   picks  asks its hash_ring (or any) balancer for the owner of keys key-0 .. key-(N-1)
//          {"members": [...], "owners": [...]}
//   load   steady calls through every --balancer for --seconds, each with a deadline
//          {"calls", "ok", "errors_by_code": {...}, "hung", "in_flight_at_end", "max_late_ms"}
//
// A call is *hung* when it completes more than 1 s after its deadline, or has not
// completed 1 s after its deadline when the run ends. `load --errors FILE` writes one line
// per failed call: `<unix ms> <node> <code> <message>`, which chaos.sh uses to find the
// calls a SIGTERM lost.
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

namespace po = boost::program_options;
using namespace std::chrono;

namespace {

std::int64_t unix_ms() {
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Waits until the client is connected to `nodes` nodes and every balancer has `nodes`
// members (0: anything at all), or `limit` passes. True when that happened.
bool wait_for_cluster(rpclb::Cluster& cluster, const std::vector<std::string>& balancers, std::size_t nodes,
                      milliseconds limit) {
    const auto deadline = steady_clock::now() + limit;
    while (steady_clock::now() < deadline) {
        const auto connected = cluster.connected_nodes().size();
        bool ready = connected > 0 && (nodes == 0 || connected >= nodes);
        for (const auto& b : balancers) {
            const auto members = cluster.get_members(b);
            ready = ready && members && (nodes == 0 || members->size() >= nodes);
        }
        if (ready) return true;
        std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
}

std::string error_node(const rpclb::ErrorMessage& e) {
    if (const auto* n = e.details.if_contains("node"); n && n->is_string()) return std::string(n->as_string());
    return "-";
}

int run_big(rpclb::Cluster& cluster, const std::string& node, std::size_t bytes, milliseconds timeout) {
    boost::json::array args;
    args.emplace_back(boost::json::string(bytes, 'x'));
    rpclb::CallOptions options;
    options.timeout = timeout;
    const auto start = steady_clock::now();
    auto r = cluster.call(node, "demo", "node", std::move(args), options);
    boost::json::object out;
    out["ok"] = r.has_value();
    out["ms"] = duration_cast<milliseconds>(steady_clock::now() - start).count();
    if (r)
        out["node"] = *r;
    else
        out["error"] = r.error().to_json();
    std::cout << boost::json::serialize(out) << std::endl;
    return r ? 0 : 1;
}

// `count` calls like run_big's, `concurrency` at a time, while the round trip of this
// node's probes of `node` (Cluster::keepalive_rtt) is sampled every 20 ms and the link
// to it is watched. Prints {"calls", "ok", "ms", "errors": [...], "link_lost",
// "idle_rtt_ms", "rtt_ms": {"samples", "median", "max"}}.
int run_bigs(rpclb::Cluster& cluster, const std::string& node, std::size_t bytes, milliseconds timeout, int count,
             int concurrency) {
    auto rtt_ms = [&]() -> double {
        const auto rtt = cluster.keepalive_rtt(node);
        return rtt ? duration<double, std::milli>(*rtt).count() : -1.0;
    };
    // The idle link's round trip: the first probe answered (one goes out every second).
    double idle_rtt = rtt_ms();
    for (const auto give_up = steady_clock::now() + seconds(5); idle_rtt < 0 && steady_clock::now() < give_up;) {
        std::this_thread::sleep_for(milliseconds(20));
        idle_rtt = rtt_ms();
    }
    std::mutex mutex;
    int next = 0, ok = 0;
    boost::json::array errors;
    std::atomic<bool> done{false}, lost{false};
    std::vector<double> samples;
    std::thread sampler([&] {
        double last = idle_rtt;
        while (!done) {
            std::this_thread::sleep_for(milliseconds(20));
            const auto connected = cluster.connected_nodes();
            if (std::find(connected.begin(), connected.end(), node) == connected.end()) lost = true;
            const double now = rtt_ms();
            if (now >= 0 && now != last) samples.push_back(now);  // a probe answered since
            last = now;
        }
    });
    const auto start = steady_clock::now();
    std::vector<std::thread> callers;
    for (int t = 0; t < concurrency; ++t)
        callers.emplace_back([&] {
            for (;;) {
                {
                    std::lock_guard lock(mutex);
                    if (next == count) return;
                    ++next;
                }
                boost::json::array args;
                args.emplace_back(boost::json::string(bytes, 'x'));
                rpclb::CallOptions options;
                options.timeout = timeout;
                auto r = cluster.call(node, "demo", "node", std::move(args), options);
                std::lock_guard lock(mutex);
                if (r)
                    ++ok;
                else
                    errors.emplace_back(r.error().to_json());
            }
        });
    for (auto& c : callers) c.join();
    done = true;
    sampler.join();
    boost::json::object out;
    out["calls"] = count;
    out["ok"] = ok;
    out["ms"] = duration_cast<milliseconds>(steady_clock::now() - start).count();
    out["errors"] = std::move(errors);
    out["link_lost"] = lost.load();
    out["idle_rtt_ms"] = idle_rtt;
    std::sort(samples.begin(), samples.end());
    boost::json::object rtt;
    rtt["samples"] = samples.size();
    rtt["median"] = samples.empty() ? -1.0 : samples[samples.size() / 2];
    rtt["max"] = samples.empty() ? -1.0 : samples.back();
    out["rtt_ms"] = std::move(rtt);
    std::cout << boost::json::serialize(out) << std::endl;
    return ok == count ? 0 : 1;
}

int run_picks(rpclb::Cluster& cluster, const std::string& balancer, int keys) {
    boost::json::object out;
    auto members = cluster.get_members(balancer);
    boost::json::array m, owners;
    if (members)
        for (const auto& n : *members) m.emplace_back(n);
    for (int k = 0; k < keys; ++k) {
        const std::string key = "key-" + std::to_string(k);
        auto owner = cluster.select_node(balancer, rpclb::PickOptions{key});
        owners.emplace_back(owner ? boost::json::value(*owner) : boost::json::value(nullptr));
    }
    out["members"] = std::move(m);
    out["owners"] = std::move(owners);
    std::cout << boost::json::serialize(out) << std::endl;
    return 0;
}

// Keeps about `rate` calls per second going, spread over the balancers in turn, at most
// `max_in_flight` at once; every call has `timeout`. Outcomes are counted as they complete.
class Load {
public:
    Load(rpclb::Cluster& cluster, std::vector<std::string> balancers, milliseconds timeout, std::ostream* errors)
        : cluster_(cluster), balancers_(std::move(balancers)), timeout_(timeout), errors_(errors) {}

    void run(seconds length, double rate, std::size_t max_in_flight) {
        const auto period = duration_cast<steady_clock::duration>(duration<double>(1.0 / rate));
        const auto end = steady_clock::now() + length;
        auto next = steady_clock::now();
        std::mt19937_64 rng(std::random_device{}());
        std::size_t turn = 0;
        while (steady_clock::now() < end) {
            std::this_thread::sleep_until(next);
            next += period;
            {
                std::lock_guard lock(mutex_);
                if (in_flight_.size() >= max_in_flight) continue;  // the cluster is slow: don't pile on
            }
            issue(balancers_[turn++ % balancers_.size()], rng());
        }
        // Every call had timeout_ to finish; one that takes a further second is hung.
        std::unique_lock lock(mutex_);
        done_.wait_for(lock, timeout_ + seconds(1), [&] { return in_flight_.empty(); });
        in_flight_at_end_ = in_flight_.size();
    }

    boost::json::object summary() {
        std::lock_guard lock(mutex_);
        boost::json::object out, codes;
        for (const auto& [code, n] : errors_by_code_) codes[code] = n;
        out["calls"] = calls_;
        out["ok"] = ok_;
        out["errors_by_code"] = std::move(codes);
        out["hung"] = hung_ + in_flight_at_end_;
        out["in_flight_at_end"] = in_flight_at_end_;
        out["max_late_ms"] = max_late_ms_;
        return out;
    }

private:
    void issue(const std::string& balancer, std::uint64_t draw) {
        rpclb::CallOptions options;
        options.timeout = timeout_;
        options.load_balancer = balancer;
        options.key = "k" + std::to_string(draw % 100000);
        std::uint64_t id = 0;
        const auto start = steady_clock::now();
        {
            std::lock_guard lock(mutex_);
            id = ++calls_;
            in_flight_.emplace(id, start);
        }
        // demo.echo runs inline on the serving node, demo.sleep on its worker pool: both
        // paths of the RpcServer are under load.
        const bool sleep = draw % 2 == 0;
        boost::json::array args;
        args.emplace_back(sleep ? 5 : 1);
        cluster_.async_call("", "demo", sleep ? "sleep" : "echo", std::move(args), std::move(options),
                            [this, id, start](rpclb::CallResult r) { complete(id, start, std::move(r)); });
    }

    void complete(std::uint64_t id, steady_clock::time_point start, rpclb::CallResult r) {
        const auto late = duration_cast<milliseconds>(steady_clock::now() - start - timeout_).count();
        std::lock_guard lock(mutex_);
        in_flight_.erase(id);
        max_late_ms_ = std::max<std::int64_t>(max_late_ms_, late);
        if (late > 1000) ++hung_;
        if (r) {
            ++ok_;
        } else {
            ++errors_by_code_[std::string(rpclb::to_string(r.error().code))];
            if (errors_)
                *errors_ << unix_ms() << ' ' << error_node(r.error()) << ' ' << rpclb::to_string(r.error().code)
                         << ' ' << r.error().message << '\n';
        }
        if (in_flight_.empty()) done_.notify_all();
    }

    rpclb::Cluster& cluster_;
    const std::vector<std::string> balancers_;
    const milliseconds timeout_;
    std::ostream* errors_;
    std::mutex mutex_;
    std::condition_variable done_;
    std::map<std::uint64_t, steady_clock::time_point> in_flight_;
    std::map<std::string, std::uint64_t> errors_by_code_;
    std::uint64_t calls_ = 0, ok_ = 0, hung_ = 0, in_flight_at_end_ = 0;
    std::int64_t max_late_ms_ = -1'000'000'000;
};

}  // namespace

int main(int argc, char** argv) {
    std::string mode, name, cookie, node, errors_path, log_level;
    std::vector<std::string> seeds, balancers, plugin_dirs;
    long bytes = 0, timeout_ms = 10000, wait_ms = 10000, keys = 1000, seconds_ = 10, max_in_flight = 64;
    long expect_nodes = 0, count = 1, concurrency = 1;
    double rate = 200;
    po::options_description desc("rpclb-fault-client MODE [options]   (MODE: big, bigs, picks, load)");
    desc.add_options()
        ("help,h", "show this help")
        ("mode", po::value(&mode), "big | bigs | picks | load")
        ("seed", po::value(&seeds)->composing(), "HOST:PORT of a node (repeatable, required)")
        ("cookie", po::value(&cookie), "cluster cookie (default $RPCLB_COOKIE)")
        ("name", po::value(&name), "client node name (default faults<pid>@127.0.0.1)")
        ("plugins", po::value(&plugin_dirs)->composing(), "plugin directory")
        ("expect-nodes", po::value(&expect_nodes), "wait until connected to this many nodes and every balancer has as many members")
        ("wait", po::value(&wait_ms), "longest wait for that, ms (default 10000)")
        ("node", po::value(&node), "big: the node to call")
        ("bytes", po::value(&bytes), "big, bigs: size of the string argument")
        ("count", po::value(&count), "bigs: how many calls (default 1)")
        ("concurrency", po::value(&concurrency), "bigs: calls at once (default 1)")
        ("balancer", po::value(&balancers)->composing(), "picks, load: balancer (repeatable for load)")
        ("keys", po::value(&keys), "picks: how many keys (default 1000)")
        ("seconds", po::value(&seconds_), "load: how long (default 10)")
        ("rate", po::value(&rate), "load: calls per second (default 200)")
        ("max-in-flight", po::value(&max_in_flight), "load: most calls at once (default 64)")
        ("timeout", po::value(&timeout_ms), "per-call deadline, ms (default 10000)")
        ("errors", po::value(&errors_path), "load: write one line per failed call here")
        ("log-level", po::value(&log_level)->default_value("warning"), "log level");
    po::positional_options_description positional;
    positional.add("mode", 1);
    try {
        po::variables_map vm;
        po::store(po::command_line_parser(argc, argv).options(desc).positional(positional).run(), vm);
        po::notify(vm);
        if (vm.count("help")) {
            std::cout << desc;
            return 0;
        }
        if (mode != "big" && mode != "bigs" && mode != "picks" && mode != "load")
            throw std::invalid_argument("MODE must be big, bigs, picks or load");
        if (seeds.empty()) throw std::invalid_argument("give --seed");
        if (cookie.empty()) cookie = rpclb::environment_cookie();
        if (cookie.empty()) throw std::invalid_argument("give --cookie or set RPCLB_COOKIE");
        const bool big = mode == "big" || mode == "bigs";
        if (big && (node.empty() || bytes < 0)) throw std::invalid_argument(mode + " needs --node and --bytes");
        if (count < 1 || concurrency < 1) throw std::invalid_argument("bad --count or --concurrency");
        if (!big && balancers.empty()) throw std::invalid_argument(mode + " needs --balancer");
        if (rate <= 0 || max_in_flight < 1 || timeout_ms < 1) throw std::invalid_argument("bad --rate, --max-in-flight or --timeout");
    } catch (const std::exception& e) {
        std::cerr << "rpclb-fault-client: " << e.what() << "\n" << desc;
        return 2;
    }
    rpclb::log::init(log_level);
    rpclb::ClusterOptions options;
    options.name = name.empty() ? "faults" + std::to_string(::getpid()) + "@127.0.0.1" : name;
    options.client = true;
    options.seeds = seeds;
    options.cookie = cookie;
    options.worker_threads = 2;
    options.reconnect_interval = milliseconds(200);
    for (const auto& d : plugin_dirs) options.plugin_path.emplace_back(d);
    try {
        rpclb::Cluster cluster(options);
        cluster.start();
        const bool big = mode == "big" || mode == "bigs";
        if (!wait_for_cluster(cluster, big ? std::vector<std::string>{} : balancers,
                              static_cast<std::size_t>(expect_nodes), milliseconds(wait_ms)))
            std::cerr << "rpclb-fault-client: the cluster was not complete within " << wait_ms << " ms" << std::endl;
        int status = 0;
        if (mode == "big") {
            status = run_big(cluster, node, static_cast<std::size_t>(bytes), milliseconds(timeout_ms));
        } else if (mode == "bigs") {
            status = run_bigs(cluster, node, static_cast<std::size_t>(bytes), milliseconds(timeout_ms),
                              static_cast<int>(count), static_cast<int>(concurrency));
        } else if (mode == "picks") {
            status = run_picks(cluster, balancers.front(), static_cast<int>(keys));
        } else {
            std::ofstream errors;
            if (!errors_path.empty()) errors.open(errors_path, std::ios::app);
            Load load(cluster, balancers, milliseconds(timeout_ms), errors.is_open() ? &errors : nullptr);
            load.run(seconds(seconds_), rate, static_cast<std::size_t>(max_in_flight));
            auto summary = load.summary();
            status = summary["hung"].as_uint64() == 0 ? 0 : 1;
            std::cout << boost::json::serialize(summary) << std::endl;
            // Stopped while `load` lives: a call still in flight completes into it.
            cluster.stop();
            return status;
        }
        cluster.stop();
        return status;
    } catch (const std::exception& e) {
        std::cerr << "rpclb-fault-client: " << e.what() << std::endl;
        return 1;
    }
}
