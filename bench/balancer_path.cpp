// Cost of a load-balanced call's balancer work on the caller, as the router does it around
// every call: pick a member, count the call in flight, release it (the algorithm's release
// and the in-flight count). Measured against a bare pick and a bare random draw in the same
// run (the rule of bench/README.md: a ratio to a floor, never a timed test).
//
// One in-process node hosts balancer "bench" (round_robin) and is its only member, named
// longer than std::string's inline buffer like most real node names. No network traffic:
// only the balancer's work is timed.
//
// Benchmarks (Google Benchmark), each on 1 and 2 threads sharing the balancer:
//   floor/rng           one draw of a uniform index in [0, 8) from a thread_local taus88;
//   pick                LoadBalancer::pick alone;
//   pick_track_release  pick, the target's name copied for the dispatch, the call
//                       counted, then released, exactly as src/routing/router.cpp does.
// and, for the W3C trace context every call carries (doc/explanation/trace-context.md):
//   trace/ids           an unsampled call's ids on both sides, as the router and the server
//                       make them: a new trace for the call, an attempt span, the request's
//                       traceparent, the handler's span;
//   trace/codec/0|1     a request frame like the router's encoded and decoded, without (0)
//                       or with (1) its "tp": the difference is the context's wire cost.
// Read the `CPU` column (CPU time per iteration per thread) on a shared machine.
//
// Flags: --plugins=DIR searches DIR for librpclb_round_robin.so (default: <binary
// dir>/../plugins, the build tree's layout); Google Benchmark's own flags follow.
#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/trace.hpp>
#include <rpclb/detail/wire.hpp>

#include <benchmark/benchmark.h>

#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace {

std::shared_ptr<rpclb::LoadBalancer> balancer;

void bench_floor(benchmark::State& state) {
    thread_local boost::random::taus88 rng;
    boost::random::uniform_int_distribution<std::size_t> index(0, 7);
    for (auto _ : state) benchmark::DoNotOptimize(index(rng));
}

void bench_pick(benchmark::State& state) {
    for (auto _ : state) {
        auto picked = balancer->pick();
        benchmark::DoNotOptimize(picked);
    }
}

void bench_pick_track_release(benchmark::State& state) {
    for (auto _ : state) {
        auto picked = balancer->pick();
        if (!picked) {
            state.SkipWithError("pick failed");
            break;
        }
        std::string target = picked->node();  // the router's dispatch takes the name
        balancer->track(*picked);
        benchmark::DoNotOptimize(target.data());
        balancer->release(*picked, {});
    }
}

void bench_trace_ids(benchmark::State& state) {
    for (auto _ : state) {
        auto call = rpclb::new_trace(false);  // a call with no context starts a trace
        const auto attempt = rpclb::new_span_id();
        rpclb::detail::wire::Request request{};
        request.trace = rpclb::TraceParent{call.trace_id, attempt, call.flags};
        request.trace_read = rpclb::detail::wire::TraceRead::valid;
        request.tracestate = call.tracestate;
        auto served = rpclb::TraceContext::child_of(request.trace, rpclb::new_span_id(), std::move(request.tracestate));
        benchmark::DoNotOptimize(served);
    }
}

void bench_trace_codec(benchmark::State& state) {
    namespace wire = rpclb::detail::wire;
    wire::Request request{42, "demo", "node", {}, "bench"};
    request.timeout_ms = 10000;
    if (state.range(0)) {
        const auto t = rpclb::new_trace(false);
        request.trace = rpclb::TraceParent{t.trace_id, rpclb::new_span_id(), t.flags};
        request.trace_read = wire::TraceRead::valid;
    }
    std::string buffer;
    for (auto _ : state) {
        buffer = wire::encode(request, std::move(buffer));
        auto frame = wire::decode(buffer);
        benchmark::DoNotOptimize(frame);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path plugins = std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "plugins";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with("--plugins="))
            plugins = std::string(arg.substr(std::strlen("--plugins=")));
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

    rpclb::ClusterOptions options;
    options.name = "bench-member@127.0.0.1";
    options.listen = "127.0.0.1:0";
    options.cookie = "bench-balancer-path";
    options.plugin_path = {plugins};
    rpclb::Cluster node(options);
    node.start();
    rpclb::LoadBalancerOptions lb;
    lb.name = "bench";
    lb.algorithm = "round_robin";
    balancer = node.start_balancer(lb);
    // The balancer's snapshot follows the group's join on the node's own thread.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!balancer->get_members() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!balancer->get_members()) {
        std::fprintf(stderr, "balancer_path: the node did not become a member of its balancer\n");
        return 1;
    }
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 1) load[0] = -1;
    std::printf("# balancer_path nproc=%ld loadavg=%.2f\n", sysconf(_SC_NPROCESSORS_ONLN), load[0]);

    benchmark::RegisterBenchmark("floor/rng", &bench_floor)->Threads(1)->Threads(2);
    benchmark::RegisterBenchmark("pick", &bench_pick)->Threads(1)->Threads(2);
    benchmark::RegisterBenchmark("pick_track_release", &bench_pick_track_release)->Threads(1)->Threads(2);
    benchmark::RegisterBenchmark("trace/ids", &bench_trace_ids);
    benchmark::RegisterBenchmark("trace/codec", &bench_trace_codec)->Arg(0)->Arg(1);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    balancer.reset();
    node.stop();
    return 0;
}
