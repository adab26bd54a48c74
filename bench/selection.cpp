// Cost of one pick (`choose_from_nodes`) for every selection-algorithm plugin, against a
// bare random-number draw measured in the same run (the rule of bench/README.md: a ratio to a floor, never a timed test).
//
// Each algorithm is loaded at run time through rpclb::PluginRegistry, as a balancer loads
// it, so the figure includes the virtual call into the shared object. An algorithm whose
// plugin isn't on the search path is skipped with a note on stderr.
//
// Benchmarks (Google Benchmark), each on 1 and 2 threads sharing one algorithm instance:
//   floor/rng               one draw of a uniform index in [0, 8) from a thread_local
//                           boost::random::taus88, as plugins/random does: the floor;
//   <algorithm>/<members>   one pick over 2, 8, 32 or 256 members, for random,
//                           round_robin, weighted_round_robin (weights 1, 2, 3, 1, 2, 3,
//                           ...), least_connections, power_of_two and peak_ewma (pick, the
//                           member's count up, then down, and the algorithm's release with
//                           a latency, as LoadBalancer does, all timed;
//                           `<algorithm>_pick_only/<members>` times the pick and count alone
//                           on another instance, whose counts then grow evenly), hash_ring
//                           and maglev (keyed: "user:<i>" from a precomputed array, so key
//                           building isn't timed), hash_ring_bounded (hash_ring with
//                           load_factor 1.25, keyed and counted), least_cpu (every member has a reading in
//                           rpclb::AlgorithmState with a fresh timestamp; values 10, 13, 16,
//                           ..., 31 repeating, so a quarter of the members are within the
//                           default 5-point threshold) and call_direct.
// Per pick, the `CPU` column is CPU time per pick per thread (the figure to read on a busy
// machine: it leaves out time the thread spent descheduled), the `wall_ns` counter wall
// time per pick per thread. Google Benchmark's `Time` column with threads:2 is wall time
// divided by the picks of *both* threads, i.e. the inverse of throughput.
//
// Before the benchmarks a short report (`--spread` prints only it, `--no-spread` skips it):
//   hash_ring_build   via_plugin: a membership change (on_node_change left + joined)
//                     followed by one keyed pick over a 256-member snapshot whose last
//                     member was never seen before (and a new version), so each pick builds
//                     a ring (256 × the default 128 virtual nodes); direct: the
//                     ConsistentHashRing constructor of plugins/hash_ring/hash_ring.hpp
//                     alone (left out when that header is absent). CPU and wall time;
//   hash_ring_spread  keys "user:0" .. "user:99999" over 8 and 32 members: max/mean and
//                     min/mean keys per member.
// After the benchmarks, one `pick` line per algorithm and size: CPU ns per pick on 1 and 2
// threads, the ratio to floor/rng on the same thread count, 2 threads ÷ 1 thread, and
// `overlap_t2` (CPU ÷ wall per thread on 2 threads): near 1.0 the two threads really ran at
// once; near 0.5 they took turns on one CPU (a busy machine), and the 2-thread figure then
// says nothing about contention between them.
//
// Flags (parsed before Google Benchmark's own, e.g. --benchmark_min_time=0.2):
//   --plugins=DIR   search DIR first for librpclb_<name>.so (repeatable). Without it and
//                   without RPCLB_PLUGIN_PATH, <binary dir>/../plugins is searched (the
//                   build tree's layout).
//   --spread        print the build/spread report only; --no-spread: benchmarks only.
//   --pin           pin benchmark thread i to CPU i mod (CPUs online).
#include <rpclb/algorithm_state.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <benchmark/benchmark.h>

#include <boost/json/object.hpp>
#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

// The ring type itself, to time its construction without the plugin around it. The header
// is self-contained (header-only xxHash); without it the direct build line is left out.
#if __has_include("../plugins/hash_ring/hash_ring.hpp")
#include "../plugins/hash_ring/hash_ring.hpp"
#define RPCLB_BENCH_HAVE_RING 1
#else
#define RPCLB_BENCH_HAVE_RING 0
#endif

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<std::size_t, 4> member_counts{2, 8, 32, 256};
constexpr std::array<std::string_view, 11> algorithms{
    "random",    "round_robin", "weighted_round_robin", "least_connections", "power_of_two", "peak_ewma",
    "hash_ring", "hash_ring_bounded", "maglev",         "least_cpu",         "call_direct"};

// The plugin a benchmark name stands for: hash_ring_bounded is hash_ring with load_factor.
std::string_view plugin_of(std::string_view algorithm) {
    return algorithm == "hash_ring_bounded" ? std::string_view("hash_ring") : algorithm;
}

// Keys for keyed picks, built once so building them isn't timed. A power of two, so the
// index wraps with a mask.
constexpr std::size_t key_count = 4096;
std::vector<std::string> keys;

enum class Kind {
    plain,    // choose_from_nodes only
    keyed,    // choose_from_nodes with PickOptions::key
    counted,  // choose_from_nodes, then the count and release a balancer makes
    keyed_counted,  // the same with a key
    pick_only,  // a counted algorithm's choose_from_nodes and count alone (counts grow, evenly)
    cpu,      // choose_from_nodes after refreshing every member's reading timestamp
};

Kind kind_of(std::string_view algorithm) {
    if (algorithm == "hash_ring" || algorithm == "maglev") return Kind::keyed;
    if (algorithm == "hash_ring_bounded") return Kind::keyed_counted;
    if (algorithm == "least_connections" || algorithm == "power_of_two" || algorithm == "peak_ewma")
        return Kind::counted;
    if (algorithm == "least_cpu") return Kind::cpu;
    return Kind::plain;
}

std::string node_name(std::size_t i) {
    char name[32];
    std::snprintf(name, sizeof name, "node%04zu@host", i);  // zero-padded: sorts by i
    return name;
}

rpclb::MemberSnapshot make_members(std::size_t count, std::uint64_t version) {
    rpclb::MemberSnapshot snapshot;
    for (std::size_t i = 0; i < count; ++i) snapshot.nodes.push_back(node_name(i));
    snapshot.version = version;
    snapshot.count_calls();
    return snapshot;
}

boost::json::object options_for(std::string_view algorithm, std::size_t members) {
    boost::json::object options;
    if (algorithm == "hash_ring_bounded") options["load_factor"] = 1.25;
    if (algorithm == "weighted_round_robin") {
        boost::json::object weights;
        for (std::size_t i = 0; i < members; ++i)
            weights[node_name(i)] = static_cast<std::int64_t>(1 + i % 3);
        options["weights"] = std::move(weights);
    }
    return options;
}

// CPU time of the calling thread, in microseconds: unlike wall time it leaves out the time
// the thread spent descheduled, which dominates on a busy machine.
double thread_cpu_us() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

std::int64_t steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               Clock::now().time_since_epoch())
        .count();
}

struct Case {
    std::string algorithm;
    std::size_t members = 0;
    std::shared_ptr<rpclb::SelectionAlgorithm> instance;
    rpclb::MemberSnapshot snapshot;
    std::vector<std::shared_ptr<rpclb::NodeReading>> readings;  // least_cpu: one per member, held
    std::unique_ptr<Case> pick_only;            // counted algorithms: a second instance

    void refresh_readings() const {
        const std::int64_t now = steady_ms();
        for (const auto& reading : readings) reading->at_ms.store(now, std::memory_order_relaxed);
    }
};

std::deque<Case> cases;  // stable addresses: benchmarks hold pointers

std::shared_ptr<rpclb::SelectionAlgorithm> create(rpclb::PluginRegistry& registry,
                                                  std::string_view algorithm,
                                                  const std::string& balancer,
                                                  const boost::json::object& options) {
    auto created = registry.create(algorithm);
    if (!created) {
        std::fprintf(stderr, "selection: skipping %.*s: %s\n", int(algorithm.size()),
                     algorithm.data(), created.error().message.c_str());
        return nullptr;
    }
    // local_node is a member, so call_direct has something to return.
    const rpclb::AlgorithmContext context{balancer, node_name(0), nullptr};
    try {
        (*created)->init(context, options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "selection: skipping %.*s: init: %s\n", int(algorithm.size()),
                     algorithm.data(), e.what());
        return nullptr;
    }
    return *created;
}

// ---- benchmarks ----------------------------------------------------------------------

// --pin: benchmark thread i runs on CPU i mod (CPUs), so the two threads of a threads:2
// run sit on different CPUs (other processes may still take those CPUs from them).
bool pin_threads = false;

void pin(const benchmark::State& state) {
    if (!pin_threads) return;
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(state.thread_index() % (cpus > 0 ? cpus : 1)), &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

boost::random::taus88& floor_rng() {
    thread_local boost::random::taus88 rng = [] {
        std::random_device device;
        std::seed_seq seed{device(), device(), device(), device()};
        return boost::random::taus88(seed);
    }();
    return rng;
}

void bench_floor(benchmark::State& state) {
    pin(state);
    std::size_t size = 8;
    benchmark::DoNotOptimize(size);  // a run-time bound, as a plugin sees it
    const auto start = Clock::now();
    for (auto _ : state) {
        boost::random::uniform_int_distribution<std::size_t> pick(0, size - 1);
        benchmark::DoNotOptimize(pick(floor_rng()));
    }
    const std::chrono::duration<double, std::nano> elapsed = Clock::now() - start;
    state.counters["wall_ns"] = benchmark::Counter(
        elapsed.count() / static_cast<double>(state.iterations()),
        benchmark::Counter::kAvgThreads);
}

template <Kind kind>
void bench_pick(benchmark::State& state, const Case* c) {
    pin(state);
    rpclb::SelectionAlgorithm& algorithm = *c->instance;
    const rpclb::MemberSnapshot& members = c->snapshot;
    if constexpr (kind == Kind::cpu) c->refresh_readings();
    // Threads walk the keys from different places.
    std::size_t k = static_cast<std::size_t>(state.thread_index()) * 1031;
    rpclb::PickOptions options;
    rpclb::CallOutcome outcome;
    outcome.latency = std::chrono::microseconds(100);
    const auto start = Clock::now();
    for (auto _ : state) {
        if constexpr (kind == Kind::keyed || kind == Kind::keyed_counted) options.key = keys[k++ & (key_count - 1)];
        auto index = algorithm.choose_from_nodes(members, options);
        if (!index) {
            state.SkipWithError(index.error().message.c_str());
            break;
        }
        // As LoadBalancer does: one call more at the pick, one fewer and the algorithm told
        // at the release.
        if constexpr (kind == Kind::counted || kind == Kind::keyed_counted || kind == Kind::pick_only)
            members.calls[*index]->acquire();
        if constexpr (kind == Kind::counted || kind == Kind::keyed_counted) {
            members.calls[*index]->release();
            algorithm.release(members, *index, outcome);
        }
        benchmark::DoNotOptimize(index);
    }
    const std::chrono::duration<double, std::nano> elapsed = Clock::now() - start;
    if (state.iterations() > 0)
        state.counters["wall_ns"] = benchmark::Counter(
            elapsed.count() / static_cast<double>(state.iterations()),
            benchmark::Counter::kAvgThreads);
}

void register_case(const Case& c) {
    const std::string name = c.algorithm + "/" + std::to_string(c.members);
    benchmark::internal::Benchmark* b = nullptr;
    switch (kind_of(c.algorithm)) {
        case Kind::plain:
            b = benchmark::RegisterBenchmark(name.c_str(), &bench_pick<Kind::plain>, &c);
            break;
        case Kind::keyed:
            b = benchmark::RegisterBenchmark(name.c_str(), &bench_pick<Kind::keyed>, &c);
            break;
        case Kind::counted:
            b = benchmark::RegisterBenchmark(name.c_str(), &bench_pick<Kind::counted>, &c);
            break;
        case Kind::keyed_counted:
            b = benchmark::RegisterBenchmark(name.c_str(), &bench_pick<Kind::keyed_counted>, &c);
            break;
        case Kind::cpu:
            b = benchmark::RegisterBenchmark(name.c_str(), &bench_pick<Kind::cpu>, &c);
            break;
        case Kind::pick_only:
            break;
    }
    b->Threads(1)->Threads(2);
    if (kind_of(c.algorithm) == Kind::counted && c.pick_only) {
        // The same pick without its release, on its own instance, to show what each costs.
        benchmark::RegisterBenchmark(
            (c.algorithm + "_pick_only/" + std::to_string(c.members)).c_str(),
            &bench_pick<Kind::pick_only>, c.pick_only.get())
            ->Threads(1)
            ->Threads(2);
    }
}

// Collects CPU and wall ns per pick per thread of every run for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
public:
    struct Figures {
        std::vector<double> cpu_ns;
        std::vector<double> wall_ns;
    };
    // (benchmark name without /threads:N, threads) -> figures of each repetition
    std::map<std::pair<std::string, int>, Figures> runs;

    // Colour only on a terminal (--benchmark_color applies to the default reporter only).
    SummaryReporter()
        : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

    void ReportRuns(const std::vector<Run>& reports) override {
        for (const Run& run : reports) {
            if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
            auto& figures = runs[{run.run_name.function_name, static_cast<int>(run.threads)}];
            figures.cpu_ns.push_back(run.GetAdjustedCPUTime());
            auto wall = run.counters.find("wall_ns");
            if (wall != run.counters.end()) figures.wall_ns.push_back(wall->second.value);
        }
        ConsoleReporter::ReportRuns(reports);
    }
};

double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void print_summary(const SummaryReporter& reporter) {
    auto cpu = [&](const std::string& name, int threads) {
        auto it = reporter.runs.find({name, threads});
        return it == reporter.runs.end() ? 0.0 : median(it->second.cpu_ns);
    };
    auto wall = [&](const std::string& name, int threads) {
        auto it = reporter.runs.find({name, threads});
        return it == reporter.runs.end() ? 0.0 : median(it->second.wall_ns);
    };
    const double floor1 = cpu("floor/rng", 1), floor2 = cpu("floor/rng", 2);
    std::printf("# summary: CPU ns per pick per thread; ratio_floor = ÷ floor/rng on the same "
                "thread count; t2_over_t1 = 2 threads ÷ 1 thread; overlap_t2 = CPU ÷ wall "
                "time of each thread with 2 threads (1.0: both ran in parallel the whole time, "
                "0.5: they shared one CPU and never contended)\n");
    std::printf("floor/rng t1_ns=%.2f t2_ns=%.2f wall_t1_ns=%.2f wall_t2_ns=%.2f\n", floor1,
                floor2, wall("floor/rng", 1), wall("floor/rng", 2));
    std::vector<const Case*> all;
    for (const Case& c : cases) {
        all.push_back(&c);
        if (c.pick_only) all.push_back(c.pick_only.get());
    }
    for (const Case* c : all) {
        const std::string name = c->algorithm + "/" + std::to_string(c->members);
        const double t1 = cpu(name, 1), t2 = cpu(name, 2);
        if (t1 == 0.0) continue;  // skipped with an error
        std::printf("pick %s t1_ns=%.2f t2_ns=%.2f ratio_floor_t1=%.2f ratio_floor_t2=%.2f "
                    "t2_over_t1=%.2f wall_t1_ns=%.2f wall_t2_ns=%.2f overlap_t2=%.2f\n",
                    name.c_str(), t1, t2, floor1 > 0 ? t1 / floor1 : 0.0,
                    floor2 > 0 ? t2 / floor2 : 0.0, t2 / t1, wall(name, 1), wall(name, 2),
                    wall(name, 2) > 0 ? t2 / wall(name, 2) : 0.0);
    }
}

// ---- ring build time and key spread ---------------------------------------------------

void report_hash_ring(rpclb::PluginRegistry& registry) {
    constexpr std::size_t ring_members = 256;
    auto ring = create(registry, "hash_ring", "bench_ring_build", {});
    if (!ring) {
        std::printf("hash_ring_build skipped: no plugin\n");
        return;
    }
    // Each change replaces the last member by one never seen before (and bumps the
    // version), so the change must build new rings: the plugin reuses a ring for a member
    // set it still keeps, so alternating two lists would only time the first two builds.
    rpclb::MemberSnapshot current = make_members(ring_members, 9000);
    rpclb::PickOptions options;
    options.key = keys[0];
    if (!ring->choose_from_nodes(current, options)) {
        std::printf("hash_ring_build skipped: pick failed\n");
        return;
    }
    constexpr int builds = 40;
    std::vector<rpclb::MemberSnapshot> snapshots;
    snapshots.reserve(builds);
    std::vector<double> build_us, build_cpu_us;
    for (int i = 0; i < builds; ++i) {
        const rpclb::MemberSnapshot& before = i == 0 ? current : snapshots.back();
        rpclb::MemberSnapshot& next = snapshots.emplace_back(before);
        const std::string left = next.nodes.back();
        next.nodes.back() = node_name(ring_members + static_cast<std::size_t>(i));
        next.version = 9001 + static_cast<std::uint64_t>(i);
        const std::string& joined = next.nodes.back();
        options.key = keys[static_cast<std::size_t>(i) & (key_count - 1)];
        const double cpu0 = thread_cpu_us();
        const auto start = Clock::now();
        ring->on_node_change(rpclb::NodeChange::left, std::span<const std::string>(&left, 1));
        ring->on_node_change(rpclb::NodeChange::joined,
                             std::span<const std::string>(&joined, 1));
        auto index = ring->choose_from_nodes(next, options);
        const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
        build_cpu_us.push_back(thread_cpu_us() - cpu0);
        benchmark::DoNotOptimize(index);
        build_us.push_back(elapsed.count());
    }
    // A keyed pick without a change, to show what the rebuild adds.
    constexpr int picks = 20000;
    const double cpu0 = thread_cpu_us();
    const auto start = Clock::now();
    for (int i = 0; i < picks; ++i) {
        options.key = keys[static_cast<std::size_t>(i) & (key_count - 1)];
        auto index = ring->choose_from_nodes(snapshots.back(), options);
        benchmark::DoNotOptimize(index);
    }
    const std::chrono::duration<double, std::nano> cached = Clock::now() - start;
    const double cached_cpu_ns = (thread_cpu_us() - cpu0) * 1e3 / picks;
    std::sort(build_us.begin(), build_us.end());
    std::sort(build_cpu_us.begin(), build_cpu_us.end());
    std::printf("hash_ring_build via_plugin members=%zu virtual_nodes=default(128) changes=%d "
                "change+pick cpu_us median=%.1f min=%.1f max=%.1f wall_us median=%.1f min=%.1f "
                "max=%.1f; cached keyed pick cpu_ns=%.1f wall_ns=%.1f\n",
                ring_members, builds, median(build_cpu_us), build_cpu_us.front(),
                build_cpu_us.back(), median(build_us), build_us.front(), build_us.back(),
                cached_cpu_ns, cached.count() / picks);
#if RPCLB_BENCH_HAVE_RING
    // The ring's own constructor, as plugins/hash_ring/hash_ring.hpp exposes it.
    std::vector<double> direct_us, direct_cpu_us;
    for (int i = 0; i < builds; ++i) {
        const double c0 = thread_cpu_us();
        const auto t0 = Clock::now();
        {
            rpclb::plugins::ConsistentHashRing built(current.nodes, 128);
            benchmark::DoNotOptimize(built.size());
        }
        const std::chrono::duration<double, std::micro> elapsed = Clock::now() - t0;
        direct_cpu_us.push_back(thread_cpu_us() - c0);
        direct_us.push_back(elapsed.count());
    }
    std::sort(direct_us.begin(), direct_us.end());
    std::sort(direct_cpu_us.begin(), direct_cpu_us.end());
    std::printf("hash_ring_build direct members=%zu virtual_nodes=128 builds=%d "
                "build+free cpu_us median=%.1f min=%.1f max=%.1f wall_us median=%.1f min=%.1f "
                "max=%.1f\n",
                ring_members, builds, median(direct_cpu_us), direct_cpu_us.front(),
                direct_cpu_us.back(), median(direct_us), direct_us.front(), direct_us.back());
#endif

    // Keys moved when one of 32 members leaves, for hash_ring and maglev.
    for (std::string_view algorithm : {std::string_view("hash_ring"), std::string_view("maglev")}) {
        auto instance = create(registry, algorithm, "bench_moved", {});
        if (!instance) continue;
        const rpclb::MemberSnapshot all = make_members(32, 9300);
        rpclb::MemberSnapshot less = make_members(32, 9301);
        less.nodes.erase(less.nodes.begin() + 7);
        less.calls.erase(less.calls.begin() + 7);
        constexpr std::size_t moved_keys = 100'000;
        std::size_t moved = 0, owned_by_gone = 0;
        for (std::size_t i = 0; i < moved_keys; ++i) {
            const std::string key = "user:" + std::to_string(i);
            rpclb::PickOptions keyed;
            keyed.key = key;
            auto before = instance->choose_from_nodes(all, keyed);
            auto after = instance->choose_from_nodes(less, keyed);
            if (!before || !after) break;
            owned_by_gone += *before == 7;
            moved += all.nodes[*before] != less.nodes[*after];
        }
        std::printf("%.*s_moved members=32->31 keys=%zu moved=%.4f owned_by_leaver=%.4f\n", int(algorithm.size()),
                    algorithm.data(), moved_keys, static_cast<double>(moved) / moved_keys,
                    static_cast<double>(owned_by_gone) / moved_keys);
    }

    for (std::string_view algorithm : {std::string_view("hash_ring"), std::string_view("maglev")})
    for (std::size_t members : {std::size_t{8}, std::size_t{32}}) {
        auto spread = create(registry, algorithm, "bench_ring_spread", {});
        if (!spread) continue;
        const rpclb::MemberSnapshot snapshot = make_members(members, 9100 + members);
        std::vector<std::size_t> counts(members, 0);
        constexpr std::size_t spread_keys = 100'000;
        for (std::size_t i = 0; i < spread_keys; ++i) {
            const std::string key = "user:" + std::to_string(i);
            rpclb::PickOptions keyed;
            keyed.key = key;
            auto index = spread->choose_from_nodes(snapshot, keyed);
            if (!index) {
                std::printf("%.*s_spread members=%zu failed: %s\n", int(algorithm.size()), algorithm.data(), members,
                            index.error().message.c_str());
                return;
            }
            ++counts.at(*index);
        }
        const double mean = static_cast<double>(spread_keys) / static_cast<double>(members);
        const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
        std::printf("%.*s_spread members=%zu keys=%zu max_over_mean=%.3f "
                    "min_over_mean=%.3f max=%zu min=%zu mean=%.1f\n",
                    int(algorithm.size()), algorithm.data(), members, spread_keys, static_cast<double>(*hi) / mean,
                    static_cast<double>(*lo) / mean, *hi, *lo, mean);
    }
}

std::vector<std::filesystem::path> default_search_path() {
    if (std::getenv("RPCLB_PLUGIN_PATH")) return {};
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    return {self.parent_path().parent_path() / "plugins"};
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::filesystem::path> search_path;
    bool report_only = false, report = true;
    // Take our flags out of argv before Google Benchmark sees it.
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with("--plugins=")) {
            search_path.emplace_back(std::string(arg.substr(std::strlen("--plugins="))));
        } else if (arg == "--spread") {
            report_only = true;
        } else if (arg == "--no-spread") {
            report = false;
        } else if (arg == "--pin") {
            pin_threads = true;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    if (search_path.empty()) search_path = default_search_path();

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

    for (std::size_t i = 0; i < key_count; ++i) keys.push_back("user:" + std::to_string(i));

    rpclb::PluginRegistry registry(search_path);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 1) load[0] = -1;
    std::printf("# selection nproc=%ld loadavg=%.2f pin=%s\n", sysconf(_SC_NPROCESSORS_ONLN), load[0],
                pin_threads ? "on" : "off");
    for (std::string_view algorithm : algorithms) {
        auto file = registry.find(algorithm);
        if (file) std::printf("# plugin %.*s %s\n", int(algorithm.size()), algorithm.data(),
                              file->c_str());
    }

    if (report || report_only) {
        report_hash_ring(registry);
        std::fflush(stdout);
    }
    if (report_only) return 0;

    benchmark::RegisterBenchmark("floor/rng", &bench_floor)->Threads(1)->Threads(2);
    for (std::string_view algorithm : algorithms) {
        bool available = true;
        for (std::size_t members : member_counts) {
            if (!available) break;
            const std::string balancer =
                "bench_" + std::string(algorithm) + "_" + std::to_string(members);
            auto instance =
                create(registry, plugin_of(algorithm), balancer, options_for(algorithm, members));
            if (!instance) {
                available = false;  // one note per algorithm
                break;
            }
            Case& c = cases.emplace_back();
            c.algorithm = std::string(algorithm);
            c.members = members;
            c.instance = std::move(instance);
            c.snapshot = make_members(members, 1);
            if (kind_of(algorithm) == Kind::cpu) {
                for (std::size_t i = 0; i < members; ++i) {
                    auto reading = rpclb::AlgorithmState::instance().reading(c.snapshot.nodes[i]);
                    reading->value.store(10.0 + 3.0 * static_cast<double>(i % 8));
                    c.readings.push_back(std::move(reading));
                }
                c.refresh_readings();
            }
            if (kind_of(algorithm) == Kind::counted) {
                c.pick_only = std::make_unique<Case>();
                c.pick_only->algorithm = c.algorithm + "_pick_only";
                c.pick_only->members = members;
                c.pick_only->instance = create(registry, algorithm, balancer + "_pick_only", {});
                c.pick_only->snapshot = make_members(members, 2);
                if (!c.pick_only->instance || !c.pick_only->instance->choose_from_nodes(
                                                  c.pick_only->snapshot, {}))
                    c.pick_only.reset();
            }
            // The first pick builds whatever the algorithm caches per membership version.
            const rpclb::PickOptions warm{kind_of(algorithm) == Kind::keyed || kind_of(algorithm) == Kind::keyed_counted
                                              ? std::optional<std::string_view>(keys[0])
                                              : std::nullopt};
            auto first = c.instance->choose_from_nodes(c.snapshot, warm);
            if (first && (kind_of(algorithm) == Kind::counted || kind_of(algorithm) == Kind::keyed_counted))
                c.instance->release(c.snapshot, *first, rpclb::CallOutcome{});
            register_case(c);
        }
    }

    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_summary(reporter);
    benchmark::Shutdown();
    return 0;
}
