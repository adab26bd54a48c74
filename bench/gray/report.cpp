// The figures of the gray bench (report.hpp).
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gray {

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

namespace {

double median(std::vector<double> v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    const auto m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

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
    if (!std::isnan(r.extra_fraction)) cur[setup.name + "/" + stack + "/extra_fraction"] = r.extra_fraction;
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
        // Hedging's: the default stack against this one, and this one's extra attempts.
        cur["stall_p999_gain." + s] = get("stalls/default/open/p999") / get("stalls/" + s + "/open/p999");
        cur["hedge_extra_fraction." + s] = get("stalls/" + s + "/extra_fraction");
        cur["stall_long_p999_gain." + s] = get("stalls_long/default/open/p999") / get("stalls_long/" + s + "/open/p999");
        cur["stall_long_extra_fraction." + s] = get("stalls_long/" + s + "/extra_fraction");
        cur["overload_extra_fraction." + s] = get("overload/" + s + "/extra_fraction");
        cur["overload_goodput_ratio." + s] =
            get("overload/" + s + "/open/ok_share") / get("overload/default/open/ok_share");
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
                          "cold_member_p99_ratio", "stall_p999_gain",         "hedge_extra_fraction",
                          "stall_long_p999_gain",  "stall_long_extra_fraction",
                          "overload_extra_fraction", "overload_goodput_ratio"};
    for (const auto* key : keys) {
        bool any = false;
        for (const auto& s : stacks) any = any || have(std::string(key) + "." + s);
        if (!any) continue;
        // Hedging's keys without a suffix are the `hedged` stack's.
        const bool hedging_key = std::string(key).find("p999_gain") != std::string::npos ||
                                 std::string(key).find("extra") != std::string::npos ||
                                 std::string(key) == "overload_goodput_ratio";
        if (std::string(key) != "fast_fail_2of3_ok" && std::string(key) != "fast_fail_ok")
            std::printf("%s %.3f\n", key, med(std::string(key) + "." + (hedging_key ? std::string("hedged") : headline)));
        for (const auto& s : stacks) {
            if (std::string(key) == "vs_grpc_slow_member_p99" && s == grpc_label) continue;
            if (have(std::string(key) + "." + s)) std::printf("%s.%s %.3f\n", key, s.c_str(), med(std::string(key) + "." + s));
        }
    }
    // The spread behind each median: the lowest and highest run.
    for (const auto* key : keys) {
        std::string line;
        for (const auto& s : stacks) {
            const auto it = values.find(std::string(key) + "." + s);
            if (it == values.end() || it->second.size() < 2 || std::isnan(median(it->second))) continue;
            double lo = 1e300, hi = -1e300;
            for (double v : it->second)
                if (!std::isnan(v)) lo = std::min(lo, v), hi = std::max(hi, v);
            char part[96];
            std::snprintf(part, sizeof part, " %s %.3f-%.3f", s.c_str(), lo, hi);
            line += part;
        }
        if (!line.empty()) std::printf("# range over runs %s:%s\n", key, line.c_str());
    }

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


}  // namespace gray
