// Cost of emitting a telemetry event: with nobody listening (the state of every call site
// of a node that no one watches), to one empty listener, and to rpclb::Metrics. Measured
// against an empty out-of-line function call taken in the same run (the rule of bench/README.md: a ratio to a floor, never a timed test).
//
// Benchmarks (Google Benchmark):
//   floor/empty_call           an out-of-line call of an empty function taking the Event:
//                              the cheapest way an emitter could hand an event to anyone;
//   emit/idle                  TelemetryBus::emit of a prebuilt rpc.stop Event, no listener;
//   emit/idle_guarded          the call-site pattern: `if (bus.active())` then build the
//                              Event from the call's strings and emit it, no listener;
//   signals2/no_slot           a bare boost::signals2::signal with no slot, invoked: what
//                              emit/idle would cost without the bus's listener count;
//   emit/empty_listener        emit of the prebuilt Event to one listener that does nothing
//                              (Signals2's invocation alone);
//   emit/metrics_rpc_stop      emit of an rpc.stop Event to a connected rpclb::Metrics: the
//                              stop counter and the duration histogram of an existing series;
//   emit/metrics_node_selected emit of a node_selected Event to Metrics: the selected
//                              counter and the pool_size histogram.
// The Metrics benchmarks run on 1 and 2 threads sharing one bus and one Metrics, all
// threads hitting the same series (the worst case: one hot balancer and function).
//
// After the benchmarks, one `ratio` line per benchmark and thread count: CPU ns per event
// per thread and its ratio to floor/empty_call on one thread.
#include <rpclb/metrics.hpp>
#include <rpclb/telemetry.hpp>

#include <benchmark/benchmark.h>

#include <boost/signals2/signal.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

using namespace std::chrono_literals;
using rpclb::Event;
using rpclb::EventName;
using rpclb::TelemetryBus;

// The strings a call site holds: the Event only views them.
const std::string node = "worker-17@10.0.0.17";
const std::string module_name = "billing";
const std::string function_name = "charge";
const std::string balancer = "workers";

Event rpc_stop_event() {
    return Event{.name = EventName::rpc_stop,
                 .duration = 1200us,
                 .type = "call",
                 .node = node,
                 .module = module_name,
                 .function = function_name,
                 .load_balancer = balancer,
                 .status = "ok"};
}

__attribute__((noinline)) void empty_call(const Event& event) {
    benchmark::DoNotOptimize(&event);
}

void bench_floor(benchmark::State& state) {
    const Event event = rpc_stop_event();
    for (auto _ : state) empty_call(event);
}

void bench_idle(benchmark::State& state) {
    TelemetryBus bus;
    const Event event = rpc_stop_event();
    for (auto _ : state) {
        benchmark::DoNotOptimize(&event);
        bus.emit(event);
    }
}

void bench_idle_guarded(benchmark::State& state) {
    TelemetryBus bus;
    std::chrono::nanoseconds elapsed = 1200us;
    for (auto _ : state) {
        benchmark::DoNotOptimize(elapsed);
        if (bus.active())
            bus.emit({.name = EventName::rpc_stop, .duration = elapsed, .type = "call",
                      .node = node, .module = module_name, .function = function_name,
                      .load_balancer = balancer, .status = "ok"});
        benchmark::ClobberMemory();
    }
}

void bench_signals2_no_slot(benchmark::State& state) {
    boost::signals2::signal<void(const Event&)> signal;
    const Event event = rpc_stop_event();
    for (auto _ : state) {
        benchmark::DoNotOptimize(&event);
        signal(event);
    }
}

void bench_empty_listener(benchmark::State& state) {
    TelemetryBus bus;
    TelemetryBus::ScopedConnection c = bus.connect([](const Event&) {});
    const Event event = rpc_stop_event();
    for (auto _ : state) {
        benchmark::DoNotOptimize(&event);
        bus.emit(event);
    }
}

// Shared by the threads of one multi-threaded run.
TelemetryBus shared_bus;
rpclb::Metrics shared_metrics(shared_bus);

template <EventName name>
void bench_metrics(benchmark::State& state) {
    Event event = rpc_stop_event();
    if constexpr (name == EventName::node_selected)
        event = Event{.name = name, .count = 1, .members_count = 8, .node = node,
                      .load_balancer = balancer, .algorithm = "round_robin"};
    shared_bus.emit(event);  // the series exists before timing starts
    for (auto _ : state) {
        benchmark::DoNotOptimize(&event);
        shared_bus.emit(event);
    }
}

class RatioReporter : public benchmark::ConsoleReporter {
public:
    // (benchmark name, threads) -> CPU ns of each repetition, or the median aggregate
    // when only aggregates are reported (--benchmark_report_aggregates_only).
    std::map<std::pair<std::string, int>, std::vector<double>> cpu_ns;
    std::map<std::pair<std::string, int>, double> cpu_median_ns;

    RatioReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

    void ReportRuns(const std::vector<Run>& reports) override {
        for (const Run& run : reports) {
            if (run.error_occurred) continue;
            const std::pair<std::string, int> key{run.run_name.function_name,
                                                  static_cast<int>(run.threads)};
            if (run.run_type == Run::RT_Iteration)
                cpu_ns[key].push_back(run.GetAdjustedCPUTime());
            else if (run.aggregate_name == "median")
                cpu_median_ns[key] = run.GetAdjustedCPUTime();
        }
        ConsoleReporter::ReportRuns(reports);
    }

    double median(const std::pair<std::string, int>& key) const {
        if (auto m = cpu_median_ns.find(key); m != cpu_median_ns.end()) return m->second;
        auto it = cpu_ns.find(key);
        if (it == cpu_ns.end() || it->second.empty()) return 0.0;
        auto v = it->second;
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    }
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::RegisterBenchmark("floor/empty_call", bench_floor);
    benchmark::RegisterBenchmark("emit/idle", bench_idle);
    benchmark::RegisterBenchmark("emit/idle_guarded", bench_idle_guarded);
    benchmark::RegisterBenchmark("signals2/no_slot", bench_signals2_no_slot);
    benchmark::RegisterBenchmark("emit/empty_listener", bench_empty_listener);
    benchmark::RegisterBenchmark("emit/metrics_rpc_stop", bench_metrics<EventName::rpc_stop>)
        ->Threads(1)
        ->Threads(2);
    benchmark::RegisterBenchmark("emit/metrics_node_selected",
                                 bench_metrics<EventName::node_selected>)
        ->Threads(1)
        ->Threads(2);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();

    const double floor = reporter.median({"floor/empty_call", 1});
    std::printf("# ratio: CPU ns per event per thread (median of repetitions), and ÷ "
                "floor/empty_call on one thread\n");
    std::map<std::pair<std::string, int>, double> all = reporter.cpu_median_ns;
    for (const auto& entry : reporter.cpu_ns) all.emplace(entry.first, 0.0);
    for (const auto& [key, unused] : all) {
        const double ns = reporter.median(key);
        std::printf("ratio %s threads=%d cpu_ns=%.2f ratio_floor=%.2f\n", key.first.c_str(),
                    key.second, ns, floor > 0 ? ns / floor : 0.0);
    }
    return 0;
}
