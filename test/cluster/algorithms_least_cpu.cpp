// The least_cpu plugin (predecessor-compatibility §2.7, §10.9): picks over readings written
// directly into AlgorithmState with a frozen clock, option checks, the /proc/stat
// arithmetic, and the poller on real in-process clusters.
#define BOOST_TEST_MODULE algorithms_least_cpu
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "../../plugins/least_cpu/cpu_times.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <rpclb/algorithm_state.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/node_load.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/serialize.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::consistently;
using rpclb::test::eventually;

namespace {

// The frozen "now" of pick tests, in steady_clock milliseconds.
constexpr std::int64_t now_ms = 1'000'000;

// $RPCLB_PLUGIN_PATH (set by ctest), else <build>/plugins next to <build>/test.
std::filesystem::path plugin_dir() {
    if (const char* value = std::getenv("RPCLB_PLUGIN_PATH"); value && *value) {
        const std::string v(value);
        return v.substr(0, v.find(':'));
    }
    return std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "plugins";
}

// Loads the real plugin through the registry.
std::shared_ptr<rpclb::SelectionAlgorithm> load(boost::json::object options = {}) {
    if (!options.contains("test_now_ms")) options["test_now_ms"] = now_ms;
    rpclb::PluginRegistry registry({plugin_dir()});
    auto algorithm = registry.create("least_cpu");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({"workers", "me@host", nullptr}, options);
    return *algorithm;
}

// Readings are process-wide, so every test uses node names of its own.
// A reading lives while something holds it (a snapshot, a poller): the tests hold those
// they write or read, for the whole run, as a group's snapshot would.
std::shared_ptr<rpclb::NodeReading> held_reading(const std::string& node) {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<rpclb::NodeReading>> held;
    std::lock_guard lock(mutex);
    auto& reading = held[node];
    if (!reading) reading = rpclb::AlgorithmState::instance().reading(node);
    return reading;
}

void set_reading(const std::string& node, double cpu, std::int64_t at = now_ms) {
    const auto reading = held_reading(node);
    reading->value.store(cpu);
    reading->at_ms.store(at);
}

double reading_of(const std::string& node) { return held_reading(node)->value.load(); }

std::int64_t reading_time_of(const std::string& node) { return held_reading(node)->at_ms.load(); }

// How often each node is picked in `picks` picks.
std::map<std::string, int> tally(rpclb::SelectionAlgorithm& algorithm,
                                 const rpclb::MemberSnapshot& members, int picks) {
    std::map<std::string, int> counts;
    for (int i = 0; i < picks; ++i) {
        auto index = algorithm.choose_from_nodes(members, {});
        BOOST_TEST_REQUIRE(index.has_value());
        BOOST_TEST_REQUIRE(*index < members.nodes.size());
        ++counts[members.nodes[*index]];
    }
    return counts;
}

rpclb::ClusterOptions cluster_options(std::string name) { return rpclb::test::in_process_node_options(std::move(name)); }

rpclb::LoadBalancerOptions least_cpu_balancer(std::string name, boost::json::object options) {
    return rpclb::test::balancer_options(std::move(name), "least_cpu", std::move(options), std::chrono::seconds(1));
}

std::string address(const rpclb::Cluster& c) {
    return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port());
}

// Milliseconds since `start`, printable by BOOST_TEST.
std::int64_t ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
        .count();
}

// Threads of this process now.
std::size_t thread_count() {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                                  std::filesystem::directory_iterator()));
}

bool is_mapped(const std::string& file) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.ends_with("/" + file)) return true;
    return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(least_cpu)

// ---- picks ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(pick_chooses_lowest_reading) {
    // predecessor-compatibility §7 case 77.
    set_reading("l77_a@h", 80);
    set_reading("l77_b@h", 20);
    set_reading("l77_c@h", 50);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"l77_a@h", "l77_b@h", "l77_c@h"}, 1};
    const auto counts = tally(*algorithm, members, 200);
    BOOST_TEST(counts.size() == 1u);
    BOOST_TEST(counts.count("l77_b@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_counts_missing_reading_as_fifty) {
    // predecessor-compatibility §7 case 80: only a has a reading (60); b and c read 50 and beat it.
    set_reading("l80_a@h", 60);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"l80_a@h", "l80_b@h", "l80_c@h"}, 1};
    const auto counts = tally(*algorithm, members, 400);
    BOOST_TEST(counts.count("l80_a@h") == 0u);
    BOOST_TEST(counts.count("l80_b@h") == 1u);
    BOOST_TEST(counts.count("l80_c@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_counts_missing_reading_as_exactly_fifty) {
    const rpclb::MemberSnapshot members{{"l50_a@h", "l50_b@h"}, 1};
    // 50 is more than 5 points above 44.9: only a.
    set_reading("l50_a@h", 44.9);
    const auto below = tally(*load(), members, 200);
    BOOST_TEST(below.size() == 1u);
    BOOST_TEST(below.count("l50_a@h") == 1u);
    // 50 is within 5 points of 45.5: both.
    set_reading("l50_a@h", 45.5);
    BOOST_TEST(tally(*load(), members, 200).size() == 2u);
}

BOOST_AUTO_TEST_CASE(pick_counts_stale_reading_as_fifty) {
    // a's 10 is 10,001 ms old with the default ttl of 10,000: it reads 50, so b (30) wins.
    set_reading("stale_a@h", 10, now_ms - 10'001);
    set_reading("stale_b@h", 30);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"stale_a@h", "stale_b@h"}, 1};
    const auto counts = tally(*algorithm, members, 200);
    BOOST_TEST(counts.size() == 1u);
    BOOST_TEST(counts.count("stale_b@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_keeps_reading_exactly_ttl_old) {
    set_reading("ttl_edge_a@h", 10, now_ms - 10'000);
    set_reading("ttl_edge_b@h", 30);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"ttl_edge_a@h", "ttl_edge_b@h"}, 1};
    const auto counts = tally(*algorithm, members, 200);
    BOOST_TEST(counts.size() == 1u);
    BOOST_TEST(counts.count("ttl_edge_a@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_uses_cpu_cache_ttl_option) {
    set_reading("ttl_opt_a@h", 10, now_ms - 15'000);
    set_reading("ttl_opt_b@h", 30);
    const rpclb::MemberSnapshot members{{"ttl_opt_a@h", "ttl_opt_b@h"}, 1};
    // 15 s old: fresh with a 20 s ttl, stale with a 14.999 s one.
    const auto fresh = tally(*load({{"cpu_cache_ttl", 20'000}}), members, 100);
    BOOST_TEST(fresh.size() == 1u);
    BOOST_TEST(fresh.count("ttl_opt_a@h") == 1u);
    const auto stale = tally(*load({{"cpu_cache_ttl", 14'999}}), members, 100);
    BOOST_TEST(stale.size() == 1u);
    BOOST_TEST(stale.count("ttl_opt_b@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_spreads_over_threshold_band) {
    // 10 and 12 are within 5 points of the minimum, 30 is not.
    set_reading("band_a@h", 10);
    set_reading("band_b@h", 12);
    set_reading("band_c@h", 30);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"band_a@h", "band_b@h", "band_c@h"}, 1};
    auto counts = tally(*algorithm, members, 1000);
    BOOST_TEST(counts["band_c@h"] == 0);
    // Uniform over two: 500 each, standard deviation about 16.
    BOOST_TEST(counts["band_a@h"] >= 400);
    BOOST_TEST(counts["band_b@h"] >= 400);
}

BOOST_AUTO_TEST_CASE(pick_uses_cpu_threshold_option) {
    set_reading("thr_a@h", 10);
    set_reading("thr_b@h", 12);
    set_reading("thr_c@h", 30);
    const rpclb::MemberSnapshot members{{"thr_a@h", "thr_b@h", "thr_c@h"}, 1};
    auto wide = tally(*load({{"cpu_threshold", 25}}), members, 600);
    BOOST_TEST(wide.size() == 3u);
    // The band is inclusive: 12 is exactly 2 points above 10.
    auto edge = tally(*load({{"cpu_threshold", 2.0}}), members, 300);
    BOOST_TEST(edge.size() == 2u);
    BOOST_TEST(edge.count("thr_c@h") == 0u);
    auto narrow = tally(*load({{"cpu_threshold", 0}}), members, 100);
    BOOST_TEST(narrow.size() == 1u);
    BOOST_TEST(narrow.count("thr_a@h") == 1u);
}

BOOST_AUTO_TEST_CASE(pick_sees_readings_written_after_previous_picks) {
    set_reading("live_a@h", 10);
    set_reading("live_b@h", 60);
    auto algorithm = load();
    const rpclb::MemberSnapshot members{{"live_a@h", "live_b@h"}, 1};
    BOOST_TEST(algorithm->choose_from_nodes(members, {}).value() == 0u);
    set_reading("live_a@h", 90);
    BOOST_TEST(algorithm->choose_from_nodes(members, {}).value() == 1u);
}

BOOST_AUTO_TEST_CASE(pick_follows_membership_version_change) {
    set_reading("ver_a@h", 10);
    set_reading("ver_b@h", 60);
    set_reading("ver_c@h", 70);
    set_reading("ver_d@h", 20);
    auto algorithm = load();
    const rpclb::MemberSnapshot one{{"ver_a@h", "ver_b@h"}, 1};
    const rpclb::MemberSnapshot two{{"ver_c@h", "ver_d@h"}, 2};
    BOOST_TEST(algorithm->choose_from_nodes(one, {}).value() == 0u);
    // Same size, new version: the slots must be looked up again (reusing version 1's
    // would read a and b and answer 0).
    BOOST_TEST(algorithm->choose_from_nodes(two, {}).value() == 1u);
    // A picker still holding the older snapshot gets its own slots back.
    BOOST_TEST(algorithm->choose_from_nodes(one, {}).value() == 0u);
    const rpclb::MemberSnapshot three{{"ver_b@h", "ver_c@h", "ver_d@h"}, 3};
    BOOST_TEST(algorithm->choose_from_nodes(three, {}).value() == 2u);
}

BOOST_AUTO_TEST_CASE(pick_new_instance_sees_existing_readings) {
    // Readings belong to the process, not to the algorithm: a restarted balancer keeps them.
    set_reading("restart_a@h", 70);
    set_reading("restart_b@h", 5);
    const rpclb::MemberSnapshot members{{"restart_a@h", "restart_b@h"}, 1};
    BOOST_TEST(load()->choose_from_nodes(members, {}).value() == 1u);
    BOOST_TEST(load()->choose_from_nodes(members, {}).value() == 1u);
}

BOOST_AUTO_TEST_CASE(pick_single_member_picks_it) {
    set_reading("single_a@h", 99);
    auto algorithm = load();
    BOOST_TEST(algorithm->choose_from_nodes({{"single_a@h"}, 1}, {}).value() == 0u);
    BOOST_TEST(algorithm->choose_from_nodes({{"single_never_read@h"}, 2}, {}).value() == 0u);
}

BOOST_AUTO_TEST_CASE(pick_empty_member_list_returns_service_unavailable) {
    auto algorithm = load();
    auto index = algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
    BOOST_TEST_REQUIRE(!index.has_value());
    BOOST_TEST((index.error() == rpclb::empty_members_error("workers")));
    BOOST_TEST((index.error().code == rpclb::ErrorCode::service_unavailable));
    BOOST_TEST(index.error().message == "no members registered");
    auto sample = algorithm->choose_nodes(rpclb::MemberSnapshot{}, 2, {});
    BOOST_TEST_REQUIRE(!sample.has_value());
    BOOST_TEST((sample.error().code == rpclb::ErrorCode::service_unavailable));
}

BOOST_AUTO_TEST_CASE(pick_with_many_members_spreads_over_band) {
    // More members than the pick's 64-value buffer: the band is still exact.
    rpclb::MemberSnapshot members;
    members.version = 1;
    for (int i = 0; i < 100; ++i) {
        const std::string node = "many_" + std::to_string(100 + i) + "@h";
        members.nodes.push_back(node);
        set_reading(node, i == 20 || i == 90 ? 10.0 : 40.0);
    }
    const auto counts = tally(*load(), members, 1000);
    BOOST_TEST(counts.size() == 2u);
    BOOST_TEST(counts.count("many_120@h") == 1u);
    BOOST_TEST(counts.count("many_190@h") == 1u);
}

BOOST_AUTO_TEST_CASE(seed_option_makes_picks_reproducible) {
    for (int i = 0; i < 4; ++i) set_reading("seed_" + std::to_string(i) + "@h", 10 + i);
    const rpclb::MemberSnapshot members{{"seed_0@h", "seed_1@h", "seed_2@h", "seed_3@h"}, 1};
    auto sequence = [&](std::uint64_t seed) {
        auto algorithm = load({{"seed", seed}});
        std::vector<std::size_t> picks;
        for (int i = 0; i < 200; ++i) picks.push_back(algorithm->choose_from_nodes(members, {}).value());
        return picks;
    };
    const auto first = sequence(42);
    BOOST_TEST(first == sequence(42), boost::test_tools::per_element());
    BOOST_TEST((first != sequence(43)));
    BOOST_TEST(std::set<std::size_t>(first.begin(), first.end()).size() == 4u);
}

BOOST_AUTO_TEST_CASE(concurrent_picks_across_membership_changes_stay_in_range) {
    const rpclb::MemberSnapshot small{{"conc_a@h", "conc_b@h"}, 1};
    const rpclb::MemberSnapshot large{{"conc_a@h", "conc_b@h", "conc_c@h", "conc_d@h"}, 2};
    set_reading("conc_c@h", 1);
    auto algorithm = load();
    std::atomic<bool> failed{false};
    {
        std::vector<std::jthread> pickers;
        for (int t = 0; t < 2; ++t)
            pickers.emplace_back([&, t] {
                for (int i = 0; i < 50'000; ++i) {
                    const auto& members = (i + t) % 3 == 0 ? large : small;
                    auto index = algorithm->choose_from_nodes(members, {});
                    if (!index || *index >= members.nodes.size()) failed = true;
                    if (index && &members == &large && *index != 2) failed = true;
                }
            });
        for (int i = 0; i < 1000; ++i) set_reading(i % 2 ? "conc_a@h" : "conc_b@h", 50 + i % 50);
    }
    BOOST_TEST(!failed.load());
}

// ---- options ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(init_rejects_bad_options_naming_them) {
    const std::vector<std::pair<boost::json::object, std::string>> cases{
        {{{"poll_interval", 0}}, "poll_interval"},
        {{{"poll_interval", -5}}, "poll_interval"},
        {{{"poll_interval", "5000"}}, "poll_interval"},
        {{{"poll_interval", 1.5}}, "poll_interval"},
        {{{"poll_interval", 86'400'001}}, "poll_interval"},
        {{{"poll_startup_jitter", -1}}, "poll_startup_jitter"},
        {{{"poll_startup_jitter", true}}, "poll_startup_jitter"},
        {{{"cpu_cache_ttl", -1}}, "cpu_cache_ttl"},
        {{{"cpu_cache_ttl", nullptr}}, "cpu_cache_ttl"},
        {{{"cpu_threshold", -0.5}}, "cpu_threshold"},
        {{{"cpu_threshold", "5"}}, "cpu_threshold"},
        {{{"cpu_threshold", 100.5}}, "cpu_threshold"},
        {{{"cpu_sampler_fixed", 101}}, "cpu_sampler_fixed"},
        {{{"cpu_sampler_fixed", -1}}, "cpu_sampler_fixed"},
        {{{"cpu_sampler_fixed", "17"}}, "cpu_sampler_fixed"},
        {{{"test_now_ms", 0}}, "test_now_ms"},
        {{{"test_now_ms", -1}}, "test_now_ms"},
        {{{"seed", -1}}, "seed"},
        {{{"seed", "x"}}, "seed"},
        {{{"poll_intervall", 100}}, "poll_intervall"},
    };
    for (const auto& c : cases) {
        const auto& options = c.first;
        const auto& name = c.second;  // a name, not a binding: the lambda below captures it
        BOOST_TEST_CONTEXT(boost::json::serialize(options)) {
            rpclb::PluginRegistry registry({plugin_dir()});
            auto algorithm = registry.create("least_cpu").value();
            BOOST_CHECK_EXCEPTION(algorithm->init({"workers", "me@host", nullptr}, options),
                                  std::invalid_argument, [&](const std::invalid_argument& e) {
                                      return std::string(e.what()).find(name) != std::string::npos;
                                  });
        }
    }
}

BOOST_AUTO_TEST_CASE(init_accepts_valid_options) {
    rpclb::PluginRegistry registry({plugin_dir()});
    auto algorithm = registry.create("least_cpu").value();
    BOOST_CHECK_NO_THROW(algorithm->init({"workers", "me@host", nullptr}, {}));
    BOOST_CHECK_NO_THROW(algorithm->init(
        {"workers", "me@host", nullptr},
        {{"poll_interval", 1}, {"poll_startup_jitter", 0}, {"cpu_cache_ttl", 0},
         {"cpu_threshold", 7.5}, {"cpu_sampler_fixed", 100}, {"test_now_ms", 1}, {"seed", 0u}}));
}

BOOST_AUTO_TEST_CASE(services_is_one_poller_named_after_balancer) {
    // predecessor-compatibility §7 case 82.
    auto algorithm = load();
    const auto services = algorithm->services();
    BOOST_TEST_REQUIRE(services.size() == 1u);
    BOOST_TEST(services[0]->name() == "workers_cpu_poller");
    // Without a host there is nothing to poll with.
    BOOST_CHECK_THROW(services[0]->start(), std::logic_error);
    services[0]->stop();
}

// ---- /proc/stat arithmetic ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(proc_stat_cpu_line_parses_busy_and_total) {
    using rpclb::plugins::parse_proc_stat;
    // user nice system idle iowait irq softirq steal guest guest_nice
    const auto t = parse_proc_stat("cpu  100 20 30 800 40 5 6 7 50 60\ncpu0 1 2 3 4\n");
    BOOST_TEST_REQUIRE(t.has_value());
    BOOST_TEST(t->busy == 168u);          // 100 + 20 + 30 + 5 + 6 + 7; guest is inside user
    BOOST_TEST(t->total == 168u + 840u);  // + idle + iowait
    const auto old_kernel = parse_proc_stat("cpu 1 2 3 4");
    BOOST_TEST_REQUIRE(old_kernel.has_value());
    BOOST_TEST(old_kernel->busy == 6u);
    BOOST_TEST(old_kernel->total == 10u);
    BOOST_TEST(!parse_proc_stat("cpu0 1 2 3 4").has_value());
    BOOST_TEST(!parse_proc_stat("cpu 1 2 3").has_value());
    BOOST_TEST(!parse_proc_stat("cpu 1 2 x 4").has_value());
    BOOST_TEST(!parse_proc_stat("").has_value());
}

BOOST_AUTO_TEST_CASE(cpu_percent_is_busy_share_of_elapsed_time) {
    using rpclb::plugins::cpu_percent;
    using rpclb::plugins::CpuTimes;
    BOOST_TEST(cpu_percent(CpuTimes{100, 1000}, CpuTimes{130, 1100}).value() == 30.0);
    BOOST_TEST(cpu_percent(CpuTimes{100, 1000}, CpuTimes{100, 1100}).value() == 0.0);
    BOOST_TEST(cpu_percent(CpuTimes{100, 1000}, CpuTimes{200, 1100}).value() == 100.0);
    // No time passed, or counters went backwards: no value.
    BOOST_TEST(!cpu_percent(CpuTimes{100, 1000}, CpuTimes{100, 1000}).has_value());
    BOOST_TEST(!cpu_percent(CpuTimes{100, 1000}, CpuTimes{90, 990}).has_value());
    BOOST_TEST(rpclb::plugins::parse_proc_stat([] {
                   std::ifstream f("/proc/stat");
                   std::string line;
                   std::getline(f, line);
                   return line;
               }()).has_value());
}

// ---- the poller on real clusters ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(poller_stores_fixed_sample_for_local_node_soon_after_start) {
    // predecessor-compatibility §7 case 86.
    const std::string me = "lc_fixed@127.0.0.1";
    rpclb::Cluster cluster(cluster_options(me));
    cluster.start();
    const auto started = std::chrono::steady_clock::now();
    cluster.start_balancer(least_cpu_balancer(
        "cpu_fixed", {{"poll_startup_jitter", 0}, {"poll_interval", 100}, {"cpu_sampler_fixed", 17}}));
    BOOST_TEST(eventually([&] { return reading_time_of(me) != 0 && reading_of(me) == 17.0; }, 2s));
    BOOST_TEST(ms_since(started) < 1000);
    BOOST_TEST(cluster.select_node("cpu_fixed").value() == me);
    // The reading every node serves to its peers.
    const auto served = cluster.call(me, "rpclb", "cpu_reading");
    BOOST_TEST_REQUIRE(served.has_value());
    BOOST_TEST(served->as_object().at("cpu").to_number<double>() == 17.0);
    BOOST_TEST(cluster.stop_balancer("cpu_fixed"));
}

BOOST_AUTO_TEST_CASE(poller_samples_proc_stat_repeatedly) {
    // predecessor-compatibility §7 cases 87, 88: a reading in [0, 100] appears, and a later
    // one has a later time.
    const std::string me = "lc_proc@127.0.0.1";
    rpclb::Cluster cluster(cluster_options(me));
    cluster.start();
    cluster.start_balancer(
        least_cpu_balancer("cpu_proc", {{"poll_startup_jitter", 0}, {"poll_interval", 50}}));
    BOOST_TEST_REQUIRE(eventually([&] { return reading_time_of(me) != 0; }, 2s));
    const auto first = reading_time_of(me);
    BOOST_TEST(reading_of(me) >= 0.0);
    BOOST_TEST(reading_of(me) <= 100.0);
    BOOST_TEST(eventually([&] { return reading_time_of(me) > first; }, 2s));
}

BOOST_AUTO_TEST_CASE(poller_waits_for_startup_jitter_and_stops_during_it) {
    const std::string me = "lc_jitter@127.0.0.1";
    rpclb::Cluster cluster(cluster_options(me));
    cluster.start();
    // A one-day jitter: the first poll will not come during the test.
    cluster.start_balancer(least_cpu_balancer(
        "cpu_jitter", {{"poll_startup_jitter", 86'400'000}, {"cpu_sampler_fixed", 17}, {"seed", 7}}));
    BOOST_TEST(consistently([&] { return reading_time_of(me) == 0; }, 300ms));
    const auto stopping = std::chrono::steady_clock::now();
    BOOST_TEST(cluster.stop_balancer("cpu_jitter"));
    BOOST_TEST(ms_since(stopping) < 500);
}

BOOST_AUTO_TEST_CASE(pollers_run_on_timers_without_threads_of_their_own) {
    // Every poller cycles (its poll span ends), and a least_cpu balancer costs no more
    // threads than a random one: the pollers are timers on the host's executor.
    const std::string me = "lc_timers@127.0.0.1";
    rpclb::Cluster cluster(cluster_options(me));
    cluster.start();
    std::mutex mutex;
    std::map<std::string, int> cycles;  // by balancer
    rpclb::TelemetryBus::ScopedConnection listening(cluster.telemetry().connect([&](const rpclb::Event& e) {
        if (e.name != rpclb::EventName::least_cpu_poll_stop) return;
        std::lock_guard lock(mutex);
        ++cycles[std::string(e.load_balancer)];
    }));
    const auto cycled = [&](const std::string& balancer) {
        std::lock_guard lock(mutex);
        return cycles[balancer] >= 3;
    };
    const auto start = [&](int i) {
        const auto name = "cpu_timers_" + std::to_string(i);
        cluster.start_balancer(least_cpu_balancer(
            name, {{"poll_startup_jitter", 0}, {"poll_interval", 20}, {"cpu_sampler_fixed", 11}}));
        return name;
    };
    const auto first = start(0);
    BOOST_TEST_REQUIRE(eventually([&] { return cycled(first); }, 3s));
    // Each balancer's supervision subtree has a thread of its own, whatever its
    // algorithm: balancers of an algorithm without services give the baseline.
    const auto at_first = thread_count();
    for (int i = 1; i <= 8; ++i)
        cluster.start_balancer(rpclb::test::balancer_options("plain_" + std::to_string(i), "random", {},
                                                             std::chrono::seconds(1)));
    const auto per_plain_balancer = thread_count() - at_first;
    const auto before = thread_count();
    std::vector<std::string> names;
    for (int i = 1; i <= 8; ++i) names.push_back(start(i));
    for (const auto& name : names) BOOST_TEST(eventually([&] { return cycled(name); }, 3s), name);
    BOOST_TEST(thread_count() - before == per_plain_balancer);
    // Stopping cancels the timers at once.
    const auto stopping = std::chrono::steady_clock::now();
    for (const auto& name : names) BOOST_TEST(cluster.stop_balancer(name));
    BOOST_TEST(ms_since(stopping) < 1000);
    std::map<std::string, int> after;
    {
        std::lock_guard lock(mutex);
        after = cycles;
    }
    BOOST_TEST(consistently([&] {
        std::lock_guard lock(mutex);
        for (const auto& name : names)
            if (cycles[name] != after[name]) return false;
        return true;
    }, 200ms));
}

BOOST_AUTO_TEST_CASE(readings_carry_over_a_membership_change) {
    // A snapshot frees its readings with itself; the poller holds those it polled last,
    // so the snapshot after a change still finds them. Here only b runs a poller (one
    // cycle, then a minute's pause), so nothing else in the process holds a's reading.
    const std::string a_name = "carry_a@127.0.0.1", b_name = "carry_b@127.0.0.1", c_name = "carry_c@127.0.0.1";
    const boost::json::object announced{{"algorithm", "least_cpu"}, {"algorithm_opts", boost::json::object{}}};
    rpclb::Cluster a(cluster_options(a_name));
    a.start();
    a.register_function("rpclb", "cpu_reading",
                        [](const boost::json::array&) -> rpclb::CallResult { return boost::json::object{{"cpu", 17}}; });
    a.groups().join("cpu_carry", announced);
    auto ob = cluster_options(b_name);
    ob.seeds = {address(a)};
    rpclb::Cluster b(ob);
    b.start();
    BOOST_TEST_REQUIRE(eventually([&] { return b.groups().members("cpu_carry")->nodes.size() == 1u; }, 5s));
    b.start_balancer(least_cpu_balancer(
        "cpu_carry", {{"poll_startup_jitter", 0}, {"poll_interval", 60'000}, {"cpu_sampler_fixed", 30}}));
    const auto all_picks_are = [&](const std::string& node) {
        for (int i = 0; i < 50; ++i)
            if (b.select_node("cpu_carry").value() != node) return false;
        return true;
    };
    // Before b's poll a reads as missing (50) and b's own 30 wins; after it, a's 17.
    BOOST_TEST_REQUIRE(eventually([&] { return all_picks_are(a_name); }, 5s));
    auto oc = cluster_options(c_name);
    oc.seeds = {address(a)};
    rpclb::Cluster c(oc);
    c.start();
    c.groups().join("cpu_carry", announced);
    BOOST_TEST_REQUIRE(eventually([&] { return b.groups().members("cpu_carry")->nodes.size() == 3u; }, 5s));
    // a 17, b 30, c missing (50): still a. Had a's reading been lost with the old
    // snapshot, a and c would read 50 and b would win.
    BOOST_TEST(all_picks_are(a_name));
    BOOST_TEST(b.stop_balancer("cpu_carry"));
}

BOOST_AUTO_TEST_CASE(poller_fetches_remote_readings_over_the_mesh) {
    const std::string a_name = "lc_a@127.0.0.1", b_name = "lc_b@127.0.0.1";
    const auto errors = [] {
        return rpclb::AlgorithmState::instance().counter("cpu_mesh", "least_cpu.remote_errors").load();
    };
    {
        rpclb::Cluster a(cluster_options(a_name));
        a.start();
        auto ob = cluster_options(b_name);
        ob.seeds = {address(a)};
        rpclb::Cluster b(ob);
        b.start();
        // a polls once, at start (a one-minute interval), so from then on only b's poller
        // writes a's reading, with what it fetches from a.
        a.start_balancer(least_cpu_balancer(
            "cpu_mesh", {{"poll_startup_jitter", 0}, {"poll_interval", 60'000}, {"cpu_sampler_fixed", 17}}));
        b.start_balancer(least_cpu_balancer(
            "cpu_mesh", {{"poll_startup_jitter", 0}, {"poll_interval", 100}, {"cpu_sampler_fixed", 80}}));
        BOOST_TEST_REQUIRE(eventually([&] {
            auto members = b.get_members("cpu_mesh");
            return members && members->size() == 2u && reading_of(a_name) == 17.0 && reading_of(b_name) == 80.0;
        }, 5s));

        // What a serves is its own latest reading.
        const auto served = b.call(a_name, "rpclb", "cpu_reading");
        BOOST_TEST_REQUIRE(served.has_value());
        BOOST_TEST(served->as_object().at("cpu").to_number<double>() == 17.0);

        // A new value served by a reaches a's slot only through b's fetch.
        a.register_function("rpclb", "cpu_reading",
                            [](const boost::json::array&) -> rpclb::CallResult { return boost::json::object{{"cpu", 3}}; });
        BOOST_TEST_REQUIRE(eventually([&] { return reading_of(a_name) == 3.0; }, 3s));
        for (int i = 0; i < 100; ++i) BOOST_TEST_REQUIRE(b.select_node("cpu_mesh").value() == a_name);

        // Malformed replies are counted and don't stop the poller.
        const auto before = errors();
        a.register_function("rpclb", "cpu_reading",
                            [](const boost::json::array&) -> rpclb::CallResult { return "garbage"; });
        BOOST_TEST(eventually([&] { return errors() >= before + 2; }, 3s));
        a.register_function("rpclb", "cpu_reading",
                            [](const boost::json::array&) -> rpclb::CallResult { return boost::json::object{{"cpu", 250}}; });
        const auto after_garbage = errors();
        BOOST_TEST(eventually([&] { return errors() >= after_garbage + 2; }, 3s));
        BOOST_TEST(reading_of(a_name) == 3.0);
        a.register_function("rpclb", "cpu_reading",
                            [](const boost::json::array&) -> rpclb::CallResult { return boost::json::object{{"cpu", 4}}; });
        BOOST_TEST(eventually([&] { return reading_of(a_name) == 4.0; }, 3s));

        // stop() doesn't wait for a reply in flight, and drops it when it comes.
        std::atomic<bool> entered{false}, finished{false};
        a.register_function("rpclb", "cpu_reading", [&](const boost::json::array&) -> rpclb::CallResult {
            entered = true;
            std::this_thread::sleep_for(1s);  // a reply still in flight when the balancer stops
            finished = true;
            return boost::json::object{{"cpu", 5}};
        });
        BOOST_TEST_REQUIRE(eventually([&] { return entered.load(); }, 3s));
        const auto stopping = std::chrono::steady_clock::now();
        BOOST_TEST(b.stop_balancer("cpu_mesh"));
        BOOST_TEST(ms_since(stopping) < 500);
        BOOST_TEST_REQUIRE(eventually([&] { return finished.load(); }, 3s));
        BOOST_TEST(consistently([&] { return reading_of(a_name) == 4.0; }, 200ms));
        BOOST_TEST(a.stop_balancer("cpu_mesh"));
    }
    // The clusters are gone (their registered cpu_reading functions with them) and every
    // algorithm object is destroyed: the plugin stays mapped, so nothing ran unmapped code.
    BOOST_TEST(is_mapped(rpclb::PluginRegistry::file_name("least_cpu")));
}

// ---- "source": "reported" -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(pick_reported_source_takes_the_member_reporting_least_load) {
    const rpclb::MemberSnapshot members{{"lc_rep_a", "lc_rep_b", "lc_rep_c"}, 90};
    // Records as a connection's answers fill them, at the frozen now; no poller reading.
    auto a = rpclb::NodeLoads::instance().of("lc_rep_a");
    auto b = rpclb::NodeLoads::instance().of("lc_rep_b");
    auto c = rpclb::NodeLoads::instance().of("lc_rep_c");
    a->store(900, 0, 0.0, now_ms);
    b->store(100, 0, 0.0, now_ms);
    c->store(500, 0, 0.0, now_ms);
    auto algorithm = load({{"source", "reported"}, {"seed", 7}});
    for (int i = 0; i < 50; ++i) BOOST_TEST(algorithm->choose_from_nodes(members, {}).value() == 1u);

    // A step change: the next pick follows it. An application number wins over the pool.
    b->store(100, 0, 0.97, now_ms);  // 97
    for (int i = 0; i < 50; ++i) BOOST_TEST(algorithm->choose_from_nodes(members, {}).value() == 2u);
    // A queue counts as a fully busy pool per queued call: 40 + 200.
    c->store(400, 2, 0.0, now_ms);
    for (int i = 0; i < 50; ++i) BOOST_TEST(algorithm->choose_from_nodes(members, {}).value() == 0u);

    // Unknown (malformed or stale) reports count as 50, as a missing reading does.
    a->forget();
    c->store(0, 0, 0.0, now_ms - 20'000);  // older than cpu_cache_ttl (10 s)
    std::set<std::size_t> picked;
    for (int i = 0; i < 100; ++i) picked.insert(algorithm->choose_from_nodes(members, {}).value());
    BOOST_TEST((picked == std::set<std::size_t>{0, 2}));
}

BOOST_AUTO_TEST_CASE(reported_source_runs_no_poller_and_poll_stays_the_default) {
    BOOST_TEST(load({{"source", "reported"}})->services().empty());
    BOOST_TEST(load({{"source", "poll"}})->services().size() == 1u);
    BOOST_TEST(load()->services().size() == 1u);
    rpclb::PluginRegistry registry({plugin_dir()});
    for (const auto& bad : {boost::json::value("cpu"), boost::json::value(1)}) {
        auto algorithm = registry.create("least_cpu").value();
        try {
            algorithm->init({"workers", "me@host", nullptr}, {{"source", bad}});
            BOOST_ERROR("init accepted source " << boost::json::serialize(bad));
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()) == "least_cpu option source must be \"poll\" or \"reported\"");
        }
    }
    // The poller's options with a source that starts no poller: a configuration meant for
    // the other source.
    for (const char* key : {"poll_interval", "poll_startup_jitter", "cpu_sampler_fixed"}) {
        auto algorithm = registry.create("least_cpu").value();
        try {
            algorithm->init({"workers", "me@host", nullptr}, {{"source", "reported"}, {key, 50}});
            BOOST_ERROR("init accepted " << key << " with source reported");
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()) ==
                       std::string("least_cpu option ") + key + " applies only with \"source\": \"poll\"");
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
