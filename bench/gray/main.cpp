// gray: rpclb's balancing under gray failure (members that are slow, paused, stalling,
// overloaded, failing fast, unequal or cold), beside gRPC C++'s round_robin, in one run.
//
// Each scenario (run.hpp) starts its members as processes on 127.0.0.1 (this binary run
// again, members.hpp): rpclb members hosting one balancer per algorithm under test, and as
// many gRPC servers with the same injected Behaviour (behaviour.hpp). A client node routes
// calls through each balancer in turn, then a gRPC channel with the round_robin policy over
// the gRPC servers, with the same client loops (load.hpp): a closed loop at fixed
// concurrency (some scenarios) and an open loop at a fixed rate whose latency counts from
// each call's intended send time. The figures (report.hpp) are medians over `--runs` runs:
// `KEY VALUE` lines on stdout, with `#` lines for the tables; progress goes to stderr.
// bench/README.md "gray" lists the scenarios and keys.
#include "report.hpp"
#include "run.hpp"

#include "../support/harness.hpp"

#include <rpclb/log.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>

namespace json = boost::json;
using gray::Alg;
using gray::Options;
using gray::Setup;
using gray::Values;
using gray::Clock;

namespace {

/// `label[=algorithm][:{json}]` items separated by commas outside braces; `default` (or a
/// label with `=default`) names no algorithm.
std::vector<Alg> parse_algorithms(const std::string& text) {
    std::vector<std::string> items;
    int depth = 0;
    std::string cur;
    for (char c : text) {
        if (c == '{') ++depth;
        if (c == '}') --depth;
        if (c == ',' && depth == 0) {
            items.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) items.push_back(cur);
    std::vector<Alg> out;
    for (auto item : items) {
        Alg a;
        if (const auto colon = item.find(':'); colon != std::string::npos) {
            boost::system::error_code ec;
            auto v = json::parse(item.substr(colon + 1), ec);
            if (ec || !v.is_object()) bench::die("--algorithms: options of " + item.substr(0, colon) + " are not a JSON object");
            a.opts = v.as_object();
            item = item.substr(0, colon);
            // Hedging's keys are the stack's, not the algorithm's.
            const auto* delay = a.opts.if_contains("hedge_delay_ms");
            const auto* attempts = a.opts.if_contains("hedge_attempts");
            if (delay || attempts) {
                rpclb::Hedging h;
                if (delay) h.delay = std::chrono::milliseconds(delay->to_number<std::int64_t>());
                if (attempts) h.max_attempts = attempts->to_number<int>();
                a.hedging = h;
                a.opts.erase("hedge_delay_ms");
                a.opts.erase("hedge_attempts");
            }
        }
        std::string algorithm = item;
        if (const auto eq = item.find('='); eq != std::string::npos) {
            a.label = item.substr(0, eq);
            algorithm = item.substr(eq + 1);
        } else {
            a.label = item;
        }
        if (a.label.empty() || algorithm.empty()) bench::die("--algorithms: empty name in \"" + text + "\"");
        if (algorithm != "default") a.algorithm = algorithm;
        out.push_back(std::move(a));
    }
    return out;
}

// The stacks without --algorithms: `hedged` is the default algorithm with its calls
// hedged after 25 ms (about the p98 of the base member's 5 ms exponential service time).
const char* const default_stacks =
    "default,hedged=default:{\"hedge_delay_ms\":25},round_robin,peak_ewma,power_of_two,least_connections";

void usage() {
    std::puts(
        "gray --scenario NAME [--runs N] [--quick] [--algorithms LIST] [--balancer-opts JSON]\n"
        "     [--ejection on|off|scenario] [--slow-start-ms N] [--no-grpc]\n"
        "  rpclb's balancing under gray failure beside gRPC C++ round_robin (bench/README.md \"gray\").\n"
        "  --scenario NAME   healthy, slow_member, pauses, stalls, overload, fast_fail, heterogeneous,\n"
        "                    cold_member or all (default all); slow_member and pauses run healthy too\n"
        "  --runs N          runs of each scenario; figures are medians (default 5, 1 with --quick)\n"
        "  --quick           3 s loops instead of 10 s (all scenarios in about 7 minutes)\n"
        "  --algorithms L    rpclb stacks, comma-separated: NAME (an algorithm plugin), default (the\n"
        "                    LoadBalancerOptions default), LABEL=NAME, any of them followed by\n"
        "                    :{json} for its algorithm_opts, where hedge_delay_ms and hedge_attempts\n"
        "                    hedge its calls instead (default: default,\n"
        "                    hedged=default:{\"hedge_delay_ms\":25},round_robin,peak_ewma,\n"
        "                    power_of_two,least_connections)\n"
        "  --balancer-opts J algorithm_opts given to every algorithm (under its own :{json})\n"
        "  --ejection E      outlier detection: scenario (default: off in fast_fail, at its\n"
        "                    defaults elsewhere), on (defaults everywhere) or off (everywhere)\n"
        "  --slow-start-ms N every rpclb balancer's slow-start window, 0 = off (default: the\n"
        "                    cold start's length in cold_member, off elsewhere)\n"
        "  --no-grpc         rpclb stacks only (also when built without RPCLB_BUILD_GRAY_BENCH)\n"
        "  (--rpclb-member and --grpc-member are internal: run a member)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        o.algs = parse_algorithms(default_stacks);
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> std::string {
                if (i + 1 >= argc) bench::die(a + " needs a value");
                return argv[++i];
            };
            if (a == "--rpclb-member" || a == "--grpc-member") {
                const auto spec = next();
                rpclb::log::init("warning");
                ::signal(SIGPIPE, SIG_IGN);
                return a == "--rpclb-member" ? gray::run_rpclb_member(spec) : gray::run_grpc_member(spec);
            }
            if (a == "--scenario") o.scenario = next();
            else if (a == "--runs") {
                o.runs = static_cast<int>(bench::parse_count("--runs", next().c_str(), 1));
                o.runs_given = true;
            } else if (a == "--quick") o.quick = true;
            else if (a == "--no-grpc") o.grpc = false;
            else if (a == "--algorithms") o.algs = parse_algorithms(next());
            else if (a == "--balancer-opts") {
                boost::system::error_code ec;
                auto v = json::parse(next(), ec);
                if (ec || !v.is_object()) bench::die("--balancer-opts needs a JSON object");
                o.common_opts = v.as_object();
            } else if (a == "--ejection") {
                const auto v = next();
                if (v != "on" && v != "off" && v != "scenario") bench::die("--ejection takes on, off or scenario, not " + v);
                o.ejection = v == "scenario" ? std::nullopt : std::optional<bool>(v == "on");
            } else if (a == "--slow-start-ms") {
                o.slow_start_ms = static_cast<int>(bench::parse_count("--slow-start-ms", next().c_str(), 0));
            } else if (a == "--help" || a == "-h") return usage(), 0;
            else bench::die("unknown option " + a + " (see --help)");
        }
        if (o.quick && !o.runs_given) o.runs = 1;
        if (o.grpc && !gray::grpc_built()) {
            std::fprintf(stderr, "gray: built without gRPC (RPCLB_BUILD_GRAY_BENCH off): rpclb stacks only\n");
            o.grpc = false;
        }
        std::vector<std::string> names;
        if (o.scenario == "all") names.assign(std::begin(gray::all_scenarios), std::end(gray::all_scenarios));
        else if (std::find(std::begin(gray::all_scenarios), std::end(gray::all_scenarios), o.scenario) != std::end(gray::all_scenarios)) {
            if (o.scenario == "slow_member" || o.scenario == "pauses") names.push_back("healthy");
            names.push_back(o.scenario);
        } else bench::die("unknown scenario " + o.scenario + " (see --help)");
        std::vector<Setup> setups;
        for (const auto& n : names)
            for (auto& s : gray::setups_for(n, o.quick)) setups.push_back(std::move(s));
        std::vector<std::string> stacks;
        for (const auto& a : o.algs) stacks.push_back(a.label);
        if (o.grpc) stacks.push_back(gray::grpc_label);
        // The headline stack: the first with the default algorithm and no hedging.
        std::string headline = stacks.front();
        for (const auto& a : o.algs)
            if (!a.algorithm && !a.hedging) {
                headline = a.label;
                break;
            }

        rpclb::log::init("warning");
        bench::install_signal_handlers();
        std::printf("# gray scenario=%s runs=%d quick=%d grpc=%d ejection=%s balancer_opts=%s stacks=", o.scenario.c_str(),
                    o.runs, o.quick ? 1 : 0, o.grpc ? 1 : 0, !o.ejection ? "scenario" : *o.ejection ? "on" : "off",
                    json::serialize(o.common_opts).c_str());
        for (const auto& s : stacks) std::printf("%s%s", s.c_str(), &s == &stacks.back() ? "\n" : ",");
        std::printf("# loadavg start %s nproc=%u\n", gray::loadavg_line().c_str(), std::thread::hardware_concurrency());
        std::fflush(stdout);

        Values values;
        for (int run = 1; run <= o.runs; ++run) {
            std::map<std::string, double> cur;
            for (const auto& setup : setups) {
                const auto started = Clock::now();
                const auto result = gray::run_setup(setup, o, run);
                for (const auto& [stack, r] : result) gray::record(cur, setup, stack, r);
                std::fprintf(stderr, "gray: run %d %s done in %.0f s (loadavg %s)\n", run, setup.name.c_str(),
                             std::chrono::duration<double>(Clock::now() - started).count(), bench::load_average().c_str());
            }
            gray::derive(cur, stacks);
            for (const auto& [k, v] : cur) values[k].push_back(v);
        }
        gray::print_results(values, stacks, headline, setups);
        std::printf("# loadavg end %s\n", gray::loadavg_line().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gray: %s\n", e.what());
        return 1;
    }
}
