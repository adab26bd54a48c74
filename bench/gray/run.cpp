// The scenarios (run.hpp).
#include "run.hpp"

#include "../support/harness.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

#include <signal.h>

namespace json = boost::json;
using namespace std::chrono_literals;

namespace gray {

namespace {

std::string plugin_dir() {
    return (std::filesystem::path(bench::self_path()).parent_path().parent_path() / "plugins").string();
}


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

}  // namespace

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
        // Members that serve in a fixed 0.5 ms, so that the stalls are the tail, as in "The
        // Tail at Scale": on the base member's exponential 5 ms service a 20 ms stall lies
        // inside the service time's own tail (its p99.9 is 5 ms × ln 1000 ≈ 35 ms), where
        // no hedge can gain much.
        auto s = cluster("stalls", 10);
        for (auto& m : s.members) {
            m.service_ms = 0.5;
            m.exponential = false;
            m.stall_rate = 0.01;
            m.stall_ms = 20;
        }
        out.push_back(s);
        // The same with stalls of 500 ms.
        s.name = "stalls_long";
        for (auto& m : s.members) m.stall_ms = 500;
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
        // Slow start over the cold start: the joining member's share ramps up as it warms.
        s.slow_start_ms = static_cast<int>(c.cold_s * 1000);
        out.push_back(s);
    }
    return out;
}

// ---- running a setup --------------------------------------------------------------------

namespace {

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

}  // namespace

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
                          {"ejection", o.ejection.value_or(setup.ejection)}, {"plugin_dir", dir},
                          {"slow_start_ms", o.slow_start_ms.value_or(setup.slow_start_ms)}};
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
                    auto target = client.target(a.balancer(), a.hedging);
                    warm_up(*target, expected, a.balancer(), 3s, false);
                    StackRun r;
                    const auto hedges_before = client.hedges(a.balancer());
                    if (setup.concurrency > 0) r.closed = gray::closed_loop(*target, setup.concurrency, duration, setup.timeout);
                    open_with_cold(*target, r, [&] {
                        const std::string name = "gm" + std::to_string(n) + "c" + std::to_string(cold_count++) + "@127.0.0.1";
                        return rpclb_member(static_cast<int>(n), name, *setup.cold, first);
                    });
                    if (a.hedging)
                        r.extra_fraction = static_cast<double>(client.hedges(a.balancer()) - hedges_before) /
                                           static_cast<double>(std::max<std::size_t>(1, r.open.size() + r.closed.size()));
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


}  // namespace gray
