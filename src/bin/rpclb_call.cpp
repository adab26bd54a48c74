// rpclb-call: join a cluster as a client node, make N calls, print one JSON summary.
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/log.hpp>
#include <rpclb/trace.hpp>

#include "tool_plugin_dirs.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace po = boost::program_options;
using namespace std::chrono;

namespace {

// Waits until the client has met the cluster: connected to something and, for a
// balancer, seen members; then until the set of connected nodes stops growing. Gives up
// at once when every seed refused the cookie (each refuses once: it is not redialled).
bool wait_for_cluster(rpclb::Cluster& cluster, const std::string& balancer, milliseconds limit) {
    const auto start = steady_clock::now();
    const auto deadline = start + limit;
    std::size_t last = 0;
    auto stable_since = steady_clock::now();
    bool said = false;
    while (steady_clock::now() < deadline) {
        // Not met within a second: say what it waits for, once.
        if (!said && steady_clock::now() - start >= std::chrono::seconds(1)) {
            said = true;
            std::cerr << "rpclb-call: waiting up to " << limit.count() << " ms (--wait) for "
                      << (last == 0 ? "a node of the cluster" : "members of balancer " + balancer) << std::endl;
        }
        const auto nodes = cluster.connected_nodes().size();
        // Every seed refused the cookie, or failed its TLS handshake: redials would end
        // the same way (a certificate or a TLS setting is wrong), so stop waiting.
        const auto stats = cluster.stats();
        const auto seeds = cluster.options().seeds.size();
        if (nodes == 0 && seeds > 0 && (stats.cookie_refusals >= seeds || stats.tls_failures >= seeds)) return false;
        const bool members = balancer.empty() || cluster.get_members(balancer).has_value();
        if (nodes != last) {
            last = nodes;
            stable_since = steady_clock::now();
        }
        if (nodes > 0 && members && steady_clock::now() - stable_since > milliseconds(300)) return true;
        std::this_thread::sleep_for(milliseconds(20));
    }
    return last > 0;
}

std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
    if (sorted.empty()) return 0;
    const auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(i, sorted.size() - 1)];
}

constexpr long max_concurrency = 65536;

/// Keeps up to `concurrency` calls in flight with Cluster::async_call: each of that many
/// slots issues its next call from the completion of its previous one, so no thread waits
/// per call. The completions run on the client's network thread
/// (CallOptions::run_completion_inline: they only count and start the next call), or on
/// its worker pool when they happen elsewhere. run() returns once `count` calls completed.
class CallLoop {
public:
    struct Spec {
        std::string node, module, function;
        boost::json::array args;
        rpclb::CallOptions options;  // `peer` and `timeout` are set per attempt
        /// Through a balancer with no members, a call looks again this often and this
        /// many times (-1: without limit) within its timeout, saying so on stderr.
        milliseconds retry_sleep{0};
        long retry_count = 0;
        /// --traceparent/--tracestate: every call is a child span of this one; none: each
        /// call starts a trace of its own.
        std::optional<rpclb::TraceContext> trace;
    };

    CallLoop(rpclb::Cluster& cluster, Spec spec, long count)
        : cluster_(cluster), spec_(std::move(spec)), count_(count) {
        latencies_.reserve(static_cast<std::size_t>(count));
    }

    /// Runs the calls; returns the wall time from the first call issued to the last completed.
    steady_clock::duration run(long concurrency) {
        slots_ = std::vector<Slot>(static_cast<std::size_t>(concurrency));
        const auto start = steady_clock::now();
        for (auto& slot : slots_) issue(slot);
        std::unique_lock lock(mutex_);
        done_.wait(lock, [&] { return completed_ == count_; });
        return last_ - start;
    }

    long ok() const { return ok_; }
    /// The outcome of the first call that completed (for a single call's summary).
    const std::optional<rpclb::CallResult>& first() const { return first_; }
    const std::map<std::string, long>& per_node() const { return per_node_; }
    const std::map<std::string, long>& errors() const { return errors_; }
    std::vector<std::int64_t>& latencies() { return latencies_; }

private:
    struct Slot {
        std::string peer;  // CallOptions::peer of the slot's call in flight
        steady_clock::time_point start;
        long number = 0;   // the call's number, from 1
        long retries = 0;  // looks at an empty balancer so far
    };

    // Takes the next call number, if any is left, and starts it on `slot`.
    void issue(Slot& slot) {
        {
            std::lock_guard lock(mutex_);
            if (issued_ == count_) return;
            slot.number = ++issued_;
        }
        slot.retries = 0;
        slot.start = steady_clock::now();
        attempt(slot);
    }

    // Sends the slot's call, with what is left of its timeout.
    void attempt(Slot& slot) {
        auto options = spec_.options;
        slot.peer.clear();
        options.peer = &slot.peer;
        options.run_completion_inline = true;
        const auto left = spec_.options.timeout - duration_cast<milliseconds>(steady_clock::now() - slot.start);
        options.timeout = std::max(left, milliseconds(1));
        std::optional<rpclb::TraceScope> scope;
        if (spec_.trace) scope.emplace(*spec_.trace);
        cluster_.async_call(spec_.node, spec_.module, spec_.function, spec_.args, std::move(options),
                            [this, &slot](rpclb::CallResult result) { complete(slot, std::move(result)); });
    }

    // An empty balancer: true when the call looks again after retry_sleep (said on stderr).
    bool retry_later(Slot& slot, const rpclb::CallResult& result, steady_clock::time_point now) {
        if (result || !result.error().is(rpclb::Failure::no_members) || spec_.options.load_balancer.empty())
            return false;
        if (spec_.retry_count >= 0 && slot.retries >= spec_.retry_count) return false;
        if (now + spec_.retry_sleep >= slot.start + spec_.options.timeout) return false;
        ++slot.retries;
        std::lock_guard lock(mutex_);
        std::cerr << "rpclb-call: call " << slot.number << ": balancer " << spec_.options.load_balancer
                  << " has no members; looking again in " << spec_.retry_sleep.count() << " ms (retry "
                  << slot.retries << (spec_.retry_count < 0 ? std::string() : " of at most " + std::to_string(spec_.retry_count))
                  << ")" << std::endl;
        // A timer on the client's worker pool: no thread waits through the sleep.
        auto timer = std::make_shared<boost::asio::steady_timer>(cluster_.worker_executor(), spec_.retry_sleep);
        timer->async_wait([this, &slot, timer](const boost::system::error_code& ec) {
            if (!ec) attempt(slot);
        });
        return true;
    }

    void complete(Slot& slot, rpclb::CallResult result) {
        const auto now = steady_clock::now();
        if (retry_later(slot, result, now)) return;
        {
            std::lock_guard lock(mutex_);
            latencies_.push_back(duration_cast<microseconds>(now - slot.start).count());
            if (!first_) first_ = result;
            if (result) {
                ++ok_;
                ++per_node_[slot.peer];
            } else {
                ++errors_[std::string(rpclb::to_string(result.error().code))];
                if (errors_.size() == 1 && errors_.begin()->second == 1)
                    std::cerr << "rpclb-call: first error: " << boost::json::serialize(result.error().to_json())
                              << std::endl;
            }
            last_ = now;
            if (++completed_ == count_) {
                done_.notify_all();
                return;
            }
        }
        issue(slot);
    }

    rpclb::Cluster& cluster_;
    const Spec spec_;
    const long count_;
    std::vector<Slot> slots_;
    std::mutex mutex_;
    std::condition_variable done_;
    long issued_ = 0, completed_ = 0, ok_ = 0;
    std::map<std::string, long> per_node_, errors_;
    std::optional<rpclb::CallResult> first_;
    std::vector<std::int64_t> latencies_;
    steady_clock::time_point last_;
};

/// The text of --args-file: the file `path`, or standard input for "-". Throws
/// std::invalid_argument naming the file when it cannot be read or holds nothing.
std::string read_args_file(const std::string& path) {
    if (path.empty()) throw std::invalid_argument("--args-file needs a file name, or - for standard input");
    std::ostringstream text;
    const auto name = path == "-" ? std::string("standard input") : "\"" + path + "\"";
    std::ifstream file;
    if (path != "-") {
        file.open(path, std::ios::binary);
        if (!file) throw std::invalid_argument("--args-file: cannot open " + name);
    }
    std::istream& in = path == "-" ? std::cin : file;
    // An empty source sets failbit on the copy; a read error sets badbit.
    if (!(text << in.rdbuf()) || in.bad() || text.str().empty())
        throw std::invalid_argument("--args-file: " + name + " could not be read or is empty");
    return text.str();
}

}  // namespace

int main(int argc, char** argv) {
    std::string name, cookie, balancer, key, algorithm, node, log_level, module, function, args_text, args_file;
    std::string tls_cert, tls_key, tls_ca, tls_min_version, traceparent, tracestate, discovery;
    std::vector<std::string> seeds, plugin_dirs;
    long count = 1, concurrency = 1, timeout_ms = 10000, wait_ms = 5000, retry_count = 5, retry_sleep_ms = 5000;
    long hedge_delay_ms = 0;
    int hedge_attempts = 2;
    bool idempotent = false;
    bool hedged = false;  // --hedge-delay or --hedge-attempts given
    po::options_description desc(
        "rpclb-call [options] MODULE FUNCTION [JSON-ARGS]\n"
        "Joins a cluster as a client node and makes calls; prints one JSON object");
    desc.add_options()
        ("help,h", "show this help")
        ("seed", po::value(&seeds)->composing(), "HOST:PORT of a node to join through, or dns:NAME:PORT for every address of NAME (repeatable; this or --discovery is required)")
        ("discovery", po::value(&discovery), "etcd://HOST:PORT/PREFIX: meet every node listed there (registers nothing; doc/how-to/discovery.md)")
        ("cookie", po::value(&cookie), "shared cluster secret (default: $RPCLB_COOKIE)")
        ("balancer", po::value(&balancer), "route through this balancer")
        ("key", po::value(&key), "routing key passed to the balancer's algorithm")
        ("algorithm", po::value(&algorithm), "route with this algorithm (and the default outlier options) instead of the announced ones")
        ("node", po::value(&node), "call this node directly (instead of --balancer)")
        ("count", po::value(&count)->default_value(1), "number of calls")
        ("concurrency", po::value(&concurrency)->default_value(1), "calls in flight at once, 1..65536")
        ("timeout", po::value(&timeout_ms)->default_value(10000), "per-call timeout, milliseconds")
        ("wait", po::value(&wait_ms)->default_value(5000), "longest wait to meet the cluster, milliseconds")
        ("retry-count", po::value(&retry_count)->default_value(5),
         "when a balancer has no members: retries after the first attempt (-1 = unlimited, 0 = none)")
        ("retry-sleep", po::value(&retry_sleep_ms)->default_value(5000), "wait between those retries, milliseconds")
        ("idempotent", po::bool_switch(&idempotent),
         "the function may run twice for one call: with --balancer, a call may be hedged (--hedge-delay or the balancer's hedging) and is sent again after its link was lost (a function the balancer lists in hedging.idempotent_functions is so without it)")
        ("hedge-delay", po::value(&hedge_delay_ms),
         "hedge each call: another attempt after this many milliseconds without an answer, 0 = the balancer's recent p95 (needs --balancer, and --idempotent unless the balancer lists the function in hedging.idempotent_functions)")
        ("hedge-attempts", po::value(&hedge_attempts)->default_value(2), "hedge each call (after --hedge-delay, default 0 = the balancer's recent p95) with at most this many attempts in flight, 2..5")
        ("traceparent", po::value(&traceparent),
         "W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>): each call is a child span of it; malformed: said on stderr, and each call starts a new trace")
        ("tracestate", po::value(&tracestate), "W3C tracestate carried with --traceparent (at most 512 bytes)")
        ("name", po::value(&name), "client node name (default client-<16 random hex digits>@<host name>)")
        ("plugins", po::value(&plugin_dirs)->composing(), "plugin directory searched first")
        ("log-level", po::value(&log_level)->default_value("warning"), "trace|debug|info|warning|error|fatal")
        ("tls-cert", po::value(&tls_cert), "PEM certificate of this client: TLS to every node (the cluster's nodes must use TLS)")
        ("tls-key", po::value(&tls_key), "PEM private key of --tls-cert")
        ("tls-ca", po::value(&tls_ca), "PEM CA certificate(s): verify every node's certificate (mutual TLS)")
        ("tls-min-version", po::value(&tls_min_version), "oldest TLS version accepted: 1.3 (default) or 1.2")
        ("args-file", po::value(&args_file),
         "read JSON-ARGS from this file ('-' = standard input): for arguments too long for a command line (one argument is at most 128 KiB on Linux)");
    // MODULE FUNCTION [JSON-ARGS] are positional: parsed as options, left out of --help.
    po::options_description hidden;
    hidden.add_options()
        ("module", po::value(&module))("function", po::value(&function))("args", po::value(&args_text));
    po::options_description all;
    all.add(desc).add(hidden);
    po::positional_options_description positional;
    positional.add("module", 1).add("function", 1).add("args", 1);
    po::variables_map vm;
    boost::json::array args;
    rpclb::ClusterOptions options;
    try {
        po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
        po::notify(vm);
        if (vm.count("help")) {
            std::cout << desc;
            return 0;
        }
        rpclb::log::init(log_level);
        if (module.empty() || function.empty()) throw std::invalid_argument("MODULE and FUNCTION are required");
        if (seeds.empty() && discovery.empty()) throw std::invalid_argument("give at least one --seed, or --discovery");
        // A node logs a seed it cannot dial and keeps serving; here it is a typo to report.
        for (const auto& seed : seeds)
            if (auto problem = rpclb::detail::dial_problem(seed))
                throw std::invalid_argument("--seed \"" + seed + "\" " + *problem);
        if (cookie.empty()) cookie = rpclb::environment_cookie();
        if (cookie.empty()) throw std::invalid_argument("give --cookie or set RPCLB_COOKIE");
        if (balancer.empty() && node.empty()) throw std::invalid_argument("give --balancer or --node");
        if (!balancer.empty() && !node.empty())
            throw std::invalid_argument("give --balancer or --node, not both (--node calls one node directly)");
        hedged = vm.count("hedge-delay") || !vm["hedge-attempts"].defaulted();
        if (count < 1 || count > 100'000'000) throw std::invalid_argument("--count must be in 1..100000000");
        if (concurrency < 1 || concurrency > max_concurrency)
            throw std::invalid_argument("--concurrency must be in 1.." + std::to_string(max_concurrency));
        if (timeout_ms < 1 || timeout_ms > 4'294'967'295L)
            throw std::invalid_argument("--timeout must be in 1..4294967295 milliseconds");
        concurrency = std::min(concurrency, count);  // no idle slots
        if (retry_count < -1) throw std::invalid_argument("--retry-count must be -1 (unlimited) or more");
        if (retry_sleep_ms < 0 || retry_sleep_ms > 4'294'967'295L)
            throw std::invalid_argument("--retry-sleep must be in 0..4294967295 milliseconds");
        if (wait_ms < 0 || wait_ms > 4'294'967'295L)
            throw std::invalid_argument("--wait must be in 0..4294967295 milliseconds");
        if (hedged && balancer.empty()) throw std::invalid_argument("--hedge-delay and --hedge-attempts need --balancer");
        if (hedge_delay_ms < 0 || hedge_delay_ms > timeout_ms)
            throw std::invalid_argument("--hedge-delay must be in 0..--timeout (" + std::to_string(timeout_ms) + ") milliseconds");
        if (hedge_attempts < 2 || hedge_attempts > 5) throw std::invalid_argument("--hedge-attempts must be in 2..5");
        if (vm.count("tracestate") && !vm.count("traceparent"))
            throw std::invalid_argument("--tracestate needs --traceparent");
        if (tracestate.size() > rpclb::max_tracestate_size)
            throw std::invalid_argument("--tracestate must be at most " + std::to_string(rpclb::max_tracestate_size) +
                                        " bytes; got " + std::to_string(tracestate.size()));
        if (vm.count("args-file")) {
            if (vm.count("args")) throw std::invalid_argument("give JSON-ARGS or --args-file, not both");
            args_text = read_args_file(args_file);
        }
        if (!args_text.empty()) {
            const std::string what = vm.count("args-file") ? "--args-file" : "JSON-ARGS";
            boost::system::error_code ec;
            auto parsed = boost::json::parse(args_text, ec);
            if (ec) throw std::invalid_argument(what + " is not JSON: " + ec.message());
            if (!parsed.is_array())
                throw std::invalid_argument(what + " must be a JSON array, e.g. '[1, \"abc\"]'");
            args = std::move(parsed.as_array());
        }
        if (!tls_min_version.empty() && !rpclb::parse_tls_version(tls_min_version))
            throw std::invalid_argument("--tls-min-version must be 1.2 or 1.3, got \"" + tls_min_version + "\"");
        options.tls = {tls_cert, tls_key, tls_ca,
                       rpclb::parse_tls_version(tls_min_version).value_or(rpclb::TlsVersion::v1_3)};
        if (auto problem = rpclb::detail::check_tls(options.tls))
            throw std::invalid_argument(problem->flag() + ": " + problem->reason);
        options.name = name;  // empty: a unique client-<hex>@<host> (with_defaults below)
        options.client = true;
        options.seeds = seeds;
        options.discovery = discovery;
        options.cookie = cookie;
        options.worker_threads = 1;
        for (const auto& dir : plugin_dirs) options.plugin_path.emplace_back(dir);
        rpclb::tools::add_tool_plugin_dirs(options.plugin_path);
        options = rpclb::with_defaults(std::move(options));
        // What the Cluster constructor would refuse (a --name without '@', say) is a bad
        // command line too: exit 2, naming the flag.
        if (auto problem = rpclb::detail::check(options))
            throw std::invalid_argument(problem->flag() + ": " + problem->reason);
    } catch (const std::exception& e) {
        std::cerr << "rpclb-call: " << e.what() << "\n(rpclb-call --help lists the options)\n";
        return 2;
    }

    try {
        rpclb::Cluster cluster(options);
        cluster.start();
        if (!algorithm.empty() && !balancer.empty()) {
            rpclb::LoadBalancerOptions lb;
            lb.name = balancer;
            lb.algorithm = algorithm;
            try {
                cluster.start_balancer(lb);  // a client never joins: it only routes
            } catch (const std::exception& e) {
                // No such plugin, or one that refused to load: a bad command line.
                std::cerr << "rpclb-call: --algorithm: " << e.what() << std::endl;
                return 2;
            }
        }
        if (!wait_for_cluster(cluster, balancer, milliseconds(wait_ms))) {
            if (cluster.stats().cookie_refusals > 0)
                std::cerr << "rpclb-call: the cluster refused the cookie" << std::endl;
            else if (cluster.stats().tls_failures > 0 && cluster.connected_nodes().empty()) {
                // Calls could only wait for a connection that these settings never make.
                std::cerr << "rpclb-call: every TLS handshake with the cluster failed (reasons above)" << std::endl;
                return 1;
            }
            else
                std::cerr << "rpclb-call: no node answered within " << wait_ms << " ms" << std::endl;
        } else if (!balancer.empty() && !cluster.get_members(balancer).has_value()) {
            std::cerr << "rpclb-call: balancer " << balancer << " has no members after " << wait_ms
                      << " ms; each call looks again every " << retry_sleep_ms << " ms (--retry-sleep), "
                      << (retry_count < 0 ? std::string("without limit") : std::to_string(retry_count) + " times")
                      << " (--retry-count), within its --timeout (" << timeout_ms << " ms)" << std::endl;
        }
        // Hedging needs an idempotent call: the flag, or the marking the balancer announces.
        if (hedged && !idempotent) {
            const auto b = cluster.balancer(balancer);
            if (!b || !(*b)->marks_idempotent(module, function)) {
                std::cerr << "rpclb-call: --hedge-delay and --hedge-attempts need --idempotent, or a function balancer "
                          << balancer << " lists in hedging.idempotent_functions (it does not list " << module << "."
                          << function << ")\n(rpclb-call --help lists the options)" << std::endl;
                cluster.stop();
                return 2;
            }
        }

        CallLoop::Spec spec{node, module, function, args, {}, {}, 0, {}};
        spec.options.timeout = milliseconds(timeout_ms);
        spec.options.load_balancer = balancer;
        // rpclb-call looks again at an empty balancer itself, to say so each time.
        spec.options.retry = false;
        spec.retry_count = retry_count;
        spec.retry_sleep = milliseconds(retry_sleep_ms);
        if (vm.count("key")) spec.options.key = key;
        spec.options.idempotent = idempotent;
        if (hedged)
            spec.options.hedging = rpclb::Hedging{.delay = milliseconds(hedge_delay_ms), .max_attempts = hedge_attempts};
        if (vm.count("traceparent")) {
            const rpclb::TraceScope given(traceparent, tracestate);
            if (given.continued())
                spec.trace = given.context();
            else  // never refused (W3C Trace Context §3.2.2: restart the trace)
                std::cerr << "rpclb-call: --traceparent \"" << traceparent
                          << "\" is not a valid traceparent; each call starts a new trace" << std::endl;
        }
        CallLoop loop(cluster, std::move(spec), count);
        // The calls alone: connecting and meeting the cluster came before.
        const auto wall = loop.run(concurrency);
        const long ok = loop.ok();
        auto& latencies = loop.latencies();

        std::sort(latencies.begin(), latencies.end());
        boost::json::object out;
        out["calls"] = count;
        out["ok"] = ok;
        boost::json::object e, p;
        for (const auto& [code, n] : loop.errors()) e[code] = n;
        for (const auto& [n, c] : loop.per_node()) p[n] = c;
        out["errors"] = std::move(e);
        out["per_node"] = std::move(p);
        // Counted when the calls may be hedged: marked by --idempotent or by the balancer.
        if (!balancer.empty())
            if (auto b = cluster.balancer(balancer); b && (idempotent || (*b)->marks_idempotent(module, function))) {
                const auto s = (*b)->hedge_stats();
                out["hedging"] = boost::json::object{{"hedged_calls", s.hedged_calls}, {"hedges", s.hedges},
                                                     {"hedge_wins", s.hedge_wins}, {"retries", s.retries},
                                                     {"budget_refusals", s.budget_refusals},
                                                     {"late_replies", s.late_replies}};
            }
        out["latency_us"] = boost::json::object{{"p50", percentile(latencies, 0.50)},
                                                {"p99", percentile(latencies, 0.99)},
                                                {"max", latencies.empty() ? 0 : latencies.back()}};
        const double wall_s = duration<double>(wall).count();
        // Whole calls per second once there is at least one (Boost.JSON writes every double
        // with an exponent: 2.6765561251960913E4).
        const double rate = wall_s > 0 ? static_cast<double>(count) / wall_s : 0.0;
        if (rate >= 1) out["calls_per_s"] = static_cast<std::int64_t>(std::llround(rate));
        else out["calls_per_s"] = rate;
        // One call is a call, not a load run: say what it returned.
        if (count == 1 && loop.first()) {
            if (const auto& r = *loop.first()) out["result"] = *r;
            else out["error"] = r.error().to_json();
        }
        std::cout << boost::json::serialize(out) << std::endl;
        cluster.stop();
        return ok == count ? 0 : 1;
    } catch (const std::exception& e) {
        std::cerr << "rpclb-call: " << e.what() << std::endl;
        return 1;
    }
}
