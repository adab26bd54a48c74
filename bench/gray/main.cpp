// gray: rpclb's balancing under gray failure (members that are slow, paused, stalling,
// overloaded, failing fast, unequal or cold), beside gRPC C++'s round_robin, in one run.
//
// Each scenario starts its members as processes on 127.0.0.1 (this binary run again,
// members.hpp): rpclb members hosting one balancer per algorithm under test, and as many
// gRPC servers with the same injected Behaviour (behaviour.hpp). A client node routes calls
// through each balancer in turn, then a gRPC channel with the round_robin policy over the
// gRPC servers, with the same client loops (load.hpp): a closed loop at fixed concurrency
// (some scenarios) and an open loop at a fixed rate whose latency counts from each call's
// intended send time. The figures are medians over `--runs` runs; `KEY VALUE` lines go to
// stdout, with `#` lines for the tables; progress goes to stderr. bench/README.md "gray"
// lists the scenarios and keys.
#include "members.hpp"

#include "../support/harness.hpp"

#include <rpclb/log.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>

namespace json = boost::json;
using namespace std::chrono_literals;
using gray::Behaviour;
using gray::Clock;
using gray::Sample;

namespace {

const char* const all_scenarios[] = {"healthy", "slow_member", "pauses", "stalls", "overload",
                                     "fast_fail", "heterogeneous", "cold_member"};

/// One rpclb stack: balancer `gray_<label>` with `algorithm` (none: LoadBalancerOptions'
/// default) and `opts` as its algorithm_opts.
struct Alg {
    std::string label;
    std::optional<std::string> algorithm;
    json::object opts;
    std::string balancer() const { return "gray_" + label; }
};

struct Options {
    std::string scenario = "all";
    int runs = 5;
    bool runs_given = false;
    bool quick = false;
    bool grpc = true;
    std::vector<Alg> algs;
    json::object common_opts;  // --balancer-opts, under each algorithm's own
    std::optional<bool> ejection;  // --ejection on|off: in place of each scenario's choice
};

/// What one scenario (or one variant of it) runs.
struct Setup {
    std::string name;
    std::vector<Behaviour> members;
    bool ejection = true;  // outlier detection at its defaults; false: all detectors off
    int bad = -1;          // the member whose share of calls is reported; -1 none
    double rate = 0;       // open loop, calls/s
    int concurrency = 0;   // closed loop; 0 = no closed loop
    double duration_s = 3;
    std::chrono::milliseconds timeout{2000};
    std::optional<Behaviour> cold;  // a member started during the open loop
    double cold_join_s = 0;
};

/// The measurements of one stack in one setup of one run.
struct StackRun {
    std::vector<Sample> open, closed;
    double join_s = -1;  // the cold member's start, seconds into the open loop
};

const std::string grpc_label = "grpc_round_robin";

std::string plugin_dir() {
    return (std::filesystem::path(bench::self_path()).parent_path().parent_path() / "plugins").string();
}

std::string loadavg_line() {
    std::string line;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
        char buf[128];
        if (std::fgets(buf, sizeof buf, f)) line = buf;
        std::fclose(f);
    }
    while (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
}

/// A free TCP port on 127.0.0.1 now (for a gRPC member that starts later).
unsigned short free_port() {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
}

// ---- scenarios -------------------------------------------------------------------------

Behaviour base_member() {
    Behaviour b;
    b.service_ms = 5;
    b.exponential = true;
    b.capacity = 8;
    return b;
}

/// The setups a scenario needs (a ratio's baseline included), in run order.
std::vector<Setup> setups_for(const std::string& scenario, bool quick) {
    const double d = quick ? 3 : 10;
    auto cluster = [&](const std::string& name, int n) {
        Setup s;
        s.name = name;
        s.members.assign(static_cast<std::size_t>(n), base_member());
        s.rate = 800;
        s.concurrency = 8;
        s.duration_s = d;
        return s;
    };
    std::vector<Setup> out;
    if (scenario == "healthy") out.push_back(cluster("healthy", 10));
    if (scenario == "slow_member") {
        auto s = cluster("slow_member", 10);
        s.members[0].service_ms *= 10;
        s.bad = 0;
        out.push_back(s);
    }
    if (scenario == "pauses") {
        auto s = cluster("pauses", 10);
        s.members[0].pause_every_s = 3;
        s.members[0].pause_ms = 300;
        s.bad = 0;
        s.duration_s = quick ? 6 : 12;
        out.push_back(s);
    }
    if (scenario == "stalls") {
        auto s = cluster("stalls", 10);
        for (auto& m : s.members) {
            m.stall_rate = 0.01;
            m.stall_ms = 20;
        }
        out.push_back(s);
    }
    if (scenario == "overload") {
        // Five members of one slot each: 5 ms calls would serve 1000/s and 500/s is offered,
        // but every member serves 10x slower (100/s in all).
        auto s = cluster("overload", 5);
        for (auto& m : s.members) {
            m.capacity = 1;
            m.service_ms = 50;
        }
        s.rate = 500;
        s.concurrency = 0;
        s.timeout = 1000ms;
        out.push_back(s);
    }
    if (scenario == "fast_fail") {
        auto s = cluster("fast_fail", 5);
        s.members[0].fail_rate = 1;
        s.ejection = false;
        s.bad = 0;
        s.rate = 500;
        s.concurrency = 0;
        out.push_back(s);
        auto t = cluster("fast_fail_2of3", 3);
        t.members[0].fail_rate = t.members[1].fail_rate = 1;
        t.ejection = false;
        t.bad = 0;
        t.rate = 300;
        t.concurrency = 0;
        out.push_back(t);
    }
    if (scenario == "heterogeneous") {
        // Capacities 3:6:12 slots of 20 ms (150 + 300 + 600 = 1050 calls/s), offered 70 %;
        // the ideal cluster has 7:7:7.
        for (const auto* name : {"heterogeneous", "heterogeneous_ideal"}) {
            auto s = cluster(name, 3);
            const int caps[2][3] = {{3, 6, 12}, {7, 7, 7}};
            for (int i = 0; i < 3; ++i) {
                s.members[static_cast<std::size_t>(i)].capacity = caps[name == std::string("heterogeneous") ? 0 : 1][i];
                s.members[static_cast<std::size_t>(i)].service_ms = 20;
                s.members[static_cast<std::size_t>(i)].exponential = false;
            }
            s.rate = 0.7 * 1050;
            s.concurrency = 0;
            out.push_back(s);
        }
    }
    if (scenario == "cold_member") {
        // Five members; a sixth starts at cold_join_s, 10x slower for its first cold_s.
        auto s = cluster("cold_member", 5);
        s.rate = 500;
        s.concurrency = 0;
        s.duration_s = quick ? 9 : 24;
        s.cold_join_s = quick ? 2 : 4;
        Behaviour c = base_member();
        c.cold_s = quick ? 3 : 8;
        c.cold_factor = 10;
        s.cold = c;
        s.bad = 5;
        out.push_back(s);
    }
    return out;
}

// ---- running a setup --------------------------------------------------------------------

/// Calls (4 at a time) until at least 200 were made and every member in `expected` has
/// answered (a success or its error), or `limit` passed. A gRPC channel needs the second:
/// its subchannels connect one by one. An rpclb algorithm may leave a member unpicked at
/// low load (least_connections breaks ties by order), so there it is only reported.
void warm_up(gray::Target& target, const std::set<int>& expected, const std::string& what,
             std::chrono::seconds limit, bool required) {
    std::set<int> seen;
    long calls = 0;
    const auto deadline = Clock::now() + limit;
    while (calls < 200 || !std::includes(seen.begin(), seen.end(), expected.begin(), expected.end())) {
        if (Clock::now() > deadline) {
            if (required) bench::die(what + ": not every member answered within the warm-up");
            std::fprintf(stderr, "gray: %s: warm-up of %ld calls over %lld s, %zu of %zu members answered\n", what.c_str(),
                         calls, static_cast<long long>(limit.count()), seen.size(), expected.size());
            return;
        }
        for (const auto& s : gray::closed_loop(target, 4, 100ms, 2000ms)) {
            ++calls;
            if (s.reply.member >= 0) seen.insert(s.reply.member);
        }
    }
}

/// Kills (SIGTERM) then reaps every child: members need no clean stop at the end of a setup.
void end_children(std::vector<std::unique_ptr<bench::Child>>& children) {
    for (auto& c : children)
        if (c && c->pid() > 0) ::kill(c->pid(), SIGTERM);
    children.clear();
}

std::map<std::string, StackRun> run_setup(const Setup& setup, const Options& o, int run) {
    const auto n = setup.members.size();
    const auto duration = std::chrono::milliseconds(static_cast<long>(setup.duration_s * 1000));
    const std::string dir = plugin_dir();
    json::array balancers;
    for (const auto& a : o.algs) {
        json::object b{{"name", a.balancer()}};
        if (a.algorithm) b["algorithm"] = *a.algorithm;
        json::object opts = o.common_opts;
        for (const auto& [k, v] : a.opts) opts[k] = v;
        b["opts"] = opts;
        balancers.push_back(b);
    }
    std::map<std::string, StackRun> out;
    std::set<int> expected;
    for (std::size_t i = 0; i < n; ++i) expected.insert(static_cast<int>(i));

    auto rpclb_member = [&](int index, const std::string& name, const Behaviour& b, std::optional<unsigned short> seed) {
        json::object spec{{"index", index}, {"name", name}, {"behaviour", b.to_text()}, {"balancers", balancers},
                          {"ejection", o.ejection.value_or(setup.ejection)}, {"plugin_dir", dir}};
        json::array seeds;
        if (seed) seeds.push_back(json::string("127.0.0.1:" + std::to_string(*seed)));
        spec["seeds"] = seeds;
        return std::make_unique<bench::Child>(bench::self_child("--rpclb-member", std::nullopt, {json::serialize(spec)}));
    };
    auto grpc_member = [&](int index, const Behaviour& b, unsigned short port) {
        json::object spec{{"index", index}, {"behaviour", b.to_text()}, {"port", port}};
        return std::make_unique<bench::Child>(bench::self_child("--grpc-member", std::nullopt, {json::serialize(spec)}));
    };

    // The open loop, with the cold member (if any) started at its time. The loop paces from
    // a thread of its own and the member is started from this one: a child started by a
    // thread that then exits would get its PR_SET_PDEATHSIG at once.
    auto open_with_cold = [&](gray::Target& target, StackRun& r, auto start_cold) {
        if (!setup.cold) {
            r.open = gray::open_loop(target, setup.rate, duration, setup.timeout);
            return;
        }
        std::unique_ptr<bench::Child> cold;
        const auto t0 = Clock::now();
        std::thread loop([&] { r.open = gray::open_loop(target, setup.rate, duration, setup.timeout); });
        std::this_thread::sleep_until(t0 + std::chrono::milliseconds(static_cast<long>(setup.cold_join_s * 1000)));
        r.join_s = std::chrono::duration<double>(Clock::now() - t0).count();
        try {
            cold = start_cold();
            std::fprintf(stderr, "gray: cold member started %.2f s into the open loop, listening %.2f s in\n", r.join_s,
                         std::chrono::duration<double>(Clock::now() - t0).count());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "gray: cold member did not start: %s\n", e.what());
        }
        loop.join();
        cold.reset();  // stops it cleanly: it leaves its groups before the next stack runs
    };

    auto progress = [&](const std::string& stack, const StackRun& r) {
        const auto s = gray::stats_of(r.open);
        std::fprintf(stderr, "gray: run %d %-20s %-20s open calls=%zu p50=%.0f p99=%.0f p99.9=%.0f errors=%zu\n", run,
                     setup.name.c_str(), stack.c_str(), s.calls, s.p50, s.p99, s.p999, s.errors);
    };

    // Children are declared before the client, so the client stops first.
    std::vector<std::unique_ptr<bench::Child>> children;
    try {
        std::vector<std::string> seeds;
        std::optional<unsigned short> first;
        for (std::size_t i = 0; i < n; ++i) {
            children.push_back(rpclb_member(static_cast<int>(i), "gm" + std::to_string(i) + "@127.0.0.1",
                                            setup.members[i], first));
            if (!first) first = children.back()->port();
            seeds.push_back("127.0.0.1:" + std::to_string(children.back()->port()));
        }
        {
            gray::RpclbClient client(seeds, dir);
            int cold_count = 0;
            for (const auto& a : o.algs) {
                // A stack that fails (e.g. an algorithm that doesn't load) is left out of the
                // figures; the others run.
                try {
                    client.wait_members(a.balancer(), n);
                    auto target = client.target(a.balancer());
                    warm_up(*target, expected, a.balancer(), 3s, false);
                    StackRun r;
                    if (setup.concurrency > 0) r.closed = gray::closed_loop(*target, setup.concurrency, duration, setup.timeout);
                    open_with_cold(*target, r, [&] {
                        const std::string name = "gm" + std::to_string(n) + "c" + std::to_string(cold_count++) + "@127.0.0.1";
                        return rpclb_member(static_cast<int>(n), name, *setup.cold, first);
                    });
                    progress(a.label, r);
                    out[a.label] = std::move(r);
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "gray: run %d %s %s failed: %s\n", run, setup.name.c_str(), a.label.c_str(), e.what());
                }
            }
        }
        end_children(children);

        if (o.grpc) try {  // as an rpclb stack, a failing gRPC stack is left out
            std::vector<std::pair<int, unsigned short>> ports;
            for (std::size_t i = 0; i < n; ++i) {
                children.push_back(grpc_member(static_cast<int>(i), setup.members[i], 0));
                ports.emplace_back(static_cast<int>(i), children.back()->port());
            }
            const unsigned short cold_port = setup.cold ? free_port() : 0;
            if (setup.cold) ports.emplace_back(static_cast<int>(n), cold_port);
            auto target = gray::make_grpc_target(ports);
            warm_up(*target, expected, grpc_label, 20s, true);
            StackRun r;
            if (setup.concurrency > 0) r.closed = gray::closed_loop(*target, setup.concurrency, duration, setup.timeout);
            open_with_cold(*target, r, [&] { return grpc_member(static_cast<int>(n), *setup.cold, cold_port); });
            progress(grpc_label, r);
            out[grpc_label] = std::move(r);
            target.reset();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "gray: run %d %s %s failed: %s\n", run, setup.name.c_str(), grpc_label.c_str(), e.what());
        }
        end_children(children);
    } catch (...) {
        end_children(children);
        throw;
    }
    return out;
}

// ---- figures ----------------------------------------------------------------------------

/// Per-run values under "<setup>/<stack>/<loop>/<stat>" and derived keys; medians at the end.
using Values = std::map<std::string, std::vector<double>>;

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    const auto m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

void record(std::map<std::string, double>& cur, const Setup& setup, const std::string& stack, const StackRun& r) {
    for (const auto* loop : {"open", "closed"}) {
        const auto& samples = std::string(loop) == "open" ? r.open : r.closed;
        if (samples.empty()) continue;
        const std::string k = setup.name + "/" + stack + "/" + loop + "/";
        const auto s = gray::stats_of(samples);
        cur[k + "calls"] = static_cast<double>(s.calls);
        cur[k + "p50"] = s.p50;
        cur[k + "p99"] = s.p99;
        cur[k + "p999"] = s.p999;
        cur[k + "max"] = s.max;
        cur[k + "errors"] = static_cast<double>(s.errors);
        double bad = 0;
        for (const auto& x : samples)
            if (x.reply.member == setup.bad) ++bad;
        if (setup.bad >= 0) cur[k + "share_bad"] = bad / static_cast<double>(samples.size());
        cur[k + "ok_share"] = 1.0 - static_cast<double>(s.errors) / static_cast<double>(samples.size());
    }
    if (r.open.empty()) return;
    const std::string k = setup.name + "/" + stack + "/open/";
    // Utilization: service time served by each member over its capacity x the span.
    if (setup.members[0].capacity > 0 && !setup.cold) {
        std::vector<double> busy(setup.members.size(), 0);
        for (const auto& x : r.open)
            if (x.reply.ok && x.reply.member >= 0 && static_cast<std::size_t>(x.reply.member) < busy.size())
                busy[static_cast<std::size_t>(x.reply.member)] += static_cast<double>(x.reply.service_us);
        // The span runs to the last completion: a member with a backlog serves past the loop.
        double span_s = setup.duration_s;
        for (const auto& x : r.open) span_s = std::max(span_s, x.at_s + static_cast<double>(x.latency_us) / 1e6);
        double lo = 1e9, hi = -1e9;
        for (std::size_t i = 0; i < busy.size(); ++i) {
            const double u = busy[i] / (setup.members[i].capacity * span_s * 1e6);
            cur[k + "util." + std::to_string(i)] = u;
            lo = std::min(lo, u);
            hi = std::max(hi, u);
        }
        cur[k + "util_spread"] = (hi - lo) * 100;
    }
    if (setup.cold && r.join_s >= 0) {
        const double end_cold = r.join_s + setup.cold->cold_s;
        const auto cold = gray::stats_of(r.open, r.join_s, end_cold);
        const auto steady = gray::stats_of(r.open, end_cold + 1, setup.duration_s);
        cur[k + "cold_p99"] = cold.p99;
        cur[k + "steady_p99"] = steady.p99;
    }
}

/// The headline ratios of one run, from its recorded values.
void derive(std::map<std::string, double>& cur, const std::vector<std::string>& stacks) {
    auto get = [&](const std::string& key) {
        const auto it = cur.find(key);
        return it == cur.end() ? std::nan("") : it->second;
    };
    for (const auto& s : stacks) {
        cur["slow_member_p99_ratio." + s] = get("slow_member/" + s + "/open/p99") / get("healthy/" + s + "/open/p99");
        cur["slow_member_p999_ratio." + s] = get("slow_member/" + s + "/open/p999") / get("healthy/" + s + "/open/p999");
        cur["vs_grpc_slow_member_p99." + s] =
            get("slow_member/" + s + "/open/p99") / get("slow_member/" + grpc_label + "/open/p99");
        cur["pause_p999_ratio." + s] = get("pauses/" + s + "/open/p999") / get("healthy/" + s + "/open/p999");
        cur["fast_fail_share." + s] = get("fast_fail/" + s + "/open/share_bad");
        cur["fast_fail_ok." + s] = get("fast_fail/" + s + "/open/ok_share");
        cur["fast_fail_2of3_ok." + s] = get("fast_fail_2of3/" + s + "/open/ok_share");
        cur["heterogeneous_p99_ratio." + s] =
            get("heterogeneous/" + s + "/open/p99") / get("heterogeneous_ideal/" + s + "/open/p99");
        cur["heterogeneous_util_spread." + s] = get("heterogeneous/" + s + "/open/util_spread");
        cur["cold_member_p99_ratio." + s] = get("cold_member/" + s + "/open/cold_p99") / get("cold_member/" + s + "/open/steady_p99");
    }
}

void print_results(const Values& values, const std::vector<std::string>& stacks, const std::string& headline,
                   const std::vector<Setup>& setups) {
    auto med = [&](const std::string& key) {
        const auto it = values.find(key);
        return it == values.end() ? std::nan("") : median(it->second);
    };
    auto have = [&](const std::string& key) {
        const auto it = values.find(key);
        return it != values.end() && !std::isnan(median(it->second));
    };
    const char* keys[] = {"slow_member_p99_ratio", "slow_member_p999_ratio", "vs_grpc_slow_member_p99",
                          "pause_p999_ratio",      "fast_fail_share",        "fast_fail_ok",
                          "fast_fail_2of3_ok",     "heterogeneous_p99_ratio", "heterogeneous_util_spread",
                          "cold_member_p99_ratio"};
    for (const auto* key : keys) {
        bool any = false;
        for (const auto& s : stacks) any = any || have(std::string(key) + "." + s);
        if (!any) continue;
        if (std::string(key) != "fast_fail_2of3_ok" && std::string(key) != "fast_fail_ok")
            std::printf("%s %.3f\n", key, med(std::string(key) + "." + headline));
        for (const auto& s : stacks) {
            if (std::string(key) == "vs_grpc_slow_member_p99" && s == grpc_label) continue;
            if (have(std::string(key) + "." + s)) std::printf("%s.%s %.3f\n", key, s.c_str(), med(std::string(key) + "." + s));
        }
    }
    std::printf("# stall_p999_gain, hedge_extra_fraction and overload_extra_fraction measure hedging, which\n"
                "# CallOptions does not have yet: nan until it is built.\n");
    std::printf("stall_p999_gain nan\nhedge_extra_fraction nan\noverload_extra_fraction nan\n");

    std::printf("# headline keys without a suffix are the %s stack's; medians over runs; latency from the\n"
                "# intended send time (open loop) or the issue (closed loop), errors included, in us\n",
                headline.c_str());
    std::printf("# | scenario | stack | loop | calls | p50 | p99 | p99.9 | max | errors | share to bad member |\n");
    std::printf("# |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto& setup : setups)
        for (const auto* loop : {"closed", "open"})
            for (const auto& s : stacks) {
                const std::string k = setup.name + "/" + s + "/" + loop + "/";
                if (!have(k + "calls")) continue;
                char share[32] = "-";
                if (have(k + "share_bad")) std::snprintf(share, sizeof share, "%.3f", med(k + "share_bad"));
                std::printf("# | %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", setup.name.c_str(),
                            s.c_str(), loop, med(k + "calls"), med(k + "p50"), med(k + "p99"), med(k + "p999"),
                            med(k + "max"), med(k + "errors"), share);
            }
    for (const auto& setup : setups) {
        if (setup.name.rfind("heterogeneous", 0) != 0) continue;
        for (const auto& s : stacks) {
            const std::string k = setup.name + "/" + s + "/open/util.";
            if (!have(k + "0")) continue;
            std::printf("# utilization %s %s:", setup.name.c_str(), s.c_str());
            for (std::size_t i = 0; i < setup.members.size(); ++i)
                std::printf(" m%zu(cap %d)=%.2f", i, setup.members[i].capacity, med(k + std::to_string(i)));
            std::printf("\n");
        }
    }
    for (const auto& setup : setups) {
        if (!setup.cold) continue;
        for (const auto& s : stacks) {
            const std::string k = setup.name + "/" + s + "/open/";
            if (have(k + "cold_p99"))
                std::printf("# cold window %s: p99 %.0f us during the cold start, %.0f us after\n", s.c_str(),
                            med(k + "cold_p99"), med(k + "steady_p99"));
        }
    }
}

// ---- command line -----------------------------------------------------------------------

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

void usage() {
    std::puts(
        "gray --scenario NAME [--runs N] [--quick] [--algorithms LIST] [--balancer-opts JSON]\n"
        "     [--ejection on|off|scenario] [--no-grpc]\n"
        "  rpclb's balancing under gray failure beside gRPC C++ round_robin (bench/README.md \"gray\").\n"
        "  --scenario NAME   healthy, slow_member, pauses, stalls, overload, fast_fail, heterogeneous,\n"
        "                    cold_member or all (default all); slow_member and pauses run healthy too\n"
        "  --runs N          runs of each scenario; figures are medians (default 5, 1 with --quick)\n"
        "  --quick           3 s loops instead of 10 s (all scenarios in about 7 minutes)\n"
        "  --algorithms L    rpclb stacks, comma-separated: NAME (an algorithm plugin), default (the\n"
        "                    LoadBalancerOptions default), LABEL=NAME, any of them followed by\n"
        "                    :{json} for its algorithm_opts (default:\n"
        "                    default,round_robin,peak_ewma,power_of_two,least_connections)\n"
        "  --balancer-opts J algorithm_opts given to every algorithm (under its own :{json})\n"
        "  --ejection E      outlier detection: scenario (default: off in fast_fail, at its\n"
        "                    defaults elsewhere), on (defaults everywhere) or off (everywhere)\n"
        "  --no-grpc         rpclb stacks only (also when built without RPCLB_BUILD_GRAY_BENCH)\n"
        "  (--rpclb-member and --grpc-member are internal: run a member)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        o.algs = parse_algorithms("default,round_robin,peak_ewma,power_of_two,least_connections");
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
            } else if (a == "--help" || a == "-h") return usage(), 0;
            else bench::die("unknown option " + a + " (see --help)");
        }
        if (o.quick && !o.runs_given) o.runs = 1;
        if (o.grpc && !gray::grpc_built()) {
            std::fprintf(stderr, "gray: built without gRPC (RPCLB_BUILD_GRAY_BENCH off): rpclb stacks only\n");
            o.grpc = false;
        }
        std::vector<std::string> names;
        if (o.scenario == "all") names.assign(std::begin(all_scenarios), std::end(all_scenarios));
        else if (std::find(std::begin(all_scenarios), std::end(all_scenarios), o.scenario) != std::end(all_scenarios)) {
            if (o.scenario == "slow_member" || o.scenario == "pauses") names.push_back("healthy");
            names.push_back(o.scenario);
        } else bench::die("unknown scenario " + o.scenario + " (see --help)");
        std::vector<Setup> setups;
        for (const auto& n : names)
            for (auto& s : setups_for(n, o.quick)) setups.push_back(std::move(s));
        std::vector<std::string> stacks;
        for (const auto& a : o.algs) stacks.push_back(a.label);
        if (o.grpc) stacks.push_back(grpc_label);
        std::string headline = stacks.front();
        for (const auto& a : o.algs)
            if (!a.algorithm) headline = a.label;

        rpclb::log::init("warning");
        bench::install_signal_handlers();
        std::printf("# gray scenario=%s runs=%d quick=%d grpc=%d ejection=%s balancer_opts=%s stacks=", o.scenario.c_str(),
                    o.runs, o.quick ? 1 : 0, o.grpc ? 1 : 0, !o.ejection ? "scenario" : *o.ejection ? "on" : "off",
                    json::serialize(o.common_opts).c_str());
        for (const auto& s : stacks) std::printf("%s%s", s.c_str(), &s == &stacks.back() ? "\n" : ",");
        std::printf("# loadavg start %s nproc=%u\n", loadavg_line().c_str(), std::thread::hardware_concurrency());
        std::fflush(stdout);

        Values values;
        for (int run = 1; run <= o.runs; ++run) {
            std::map<std::string, double> cur;
            for (const auto& setup : setups) {
                const auto started = Clock::now();
                const auto result = run_setup(setup, o, run);
                for (const auto& [stack, r] : result) record(cur, setup, stack, r);
                std::fprintf(stderr, "gray: run %d %s done in %.0f s (loadavg %s)\n", run, setup.name.c_str(),
                             std::chrono::duration<double>(Clock::now() - started).count(), bench::load_average().c_str());
            }
            derive(cur, stacks);
            for (const auto& [k, v] : cur) values[k].push_back(v);
        }
        print_results(values, stacks, headline, setups);
        std::printf("# loadavg end %s\n", loadavg_line().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gray: %s\n", e.what());
        return 1;
    }
}
