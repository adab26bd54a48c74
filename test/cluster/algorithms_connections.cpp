// least_connections and power_of_two over the calls in flight a balancer counts
// (MemberSnapshot::in_flight): here the test counts, as LoadBalancer does, one call more at
// each pick and one fewer at each release.
#define BOOST_TEST_MODULE algorithms_connections
#include <boost/test/unit_test.hpp>

#include <rpclb/plugin_registry.hpp>

#include <boost/json/parse.hpp>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string this_balancer() { return boost::unit_test::framework::current_test_case().p_name; }

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH).
std::shared_ptr<rpclb::SelectionAlgorithm> load(const std::string& name, std::string_view options_json = "{}") {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create(name);
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({this_balancer(), "me@host", nullptr}, boost::json::parse(options_json).as_object());
    return *algorithm;
}

// A snapshot whose members count their calls.
rpclb::MemberSnapshot counted(std::vector<std::string> nodes) {
    rpclb::MemberSnapshot members(std::move(nodes), 1);
    members.count_calls();
    return members;
}

std::size_t index_of(const rpclb::MemberSnapshot& members, std::string_view node) {
    return static_cast<std::size_t>(std::find(members.nodes.begin(), members.nodes.end(), node) - members.nodes.begin());
}

// A pick as a balancer makes it: chosen, then counted.
std::string pick(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members) {
    auto index = algorithm.choose_from_nodes(members, {});
    BOOST_TEST_REQUIRE(index.has_value(), (index ? "" : index.error().message));
    BOOST_TEST_REQUIRE(*index < members.nodes.size());
    members.calls[*index]->acquire();
    return members.nodes[*index];
}

void release(const rpclb::MemberSnapshot& members, std::string_view node) {
    members.calls[index_of(members, node)]->release();
}

void set_calls(const rpclb::MemberSnapshot& members, std::string_view node, int calls) {
    members.calls[index_of(members, node)]->calls.store(calls);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(least_connections)

// predecessor-compatibility §7 case 67, with ties broken at random: a fresh balancer picks
// every member once, in some order, then the one released.
BOOST_AUTO_TEST_CASE(pick_fresh_three_nodes_each_once_then_released_node) {
    auto algorithm = load("least_connections");
    const auto abc = counted({"a", "b", "c"});
    std::set<std::string> first;
    for (int i = 0; i < 3; ++i) first.insert(pick(*algorithm, abc));
    BOOST_TEST(first.size() == 3u);
    release(abc, "b");
    BOOST_TEST(pick(*algorithm, abc) == "b");
}

BOOST_AUTO_TEST_CASE(pick_takes_fewest_in_flight) {
    auto algorithm = load("least_connections");
    const auto abc = counted({"a", "b", "c"});
    set_calls(abc, "a", 5);
    set_calls(abc, "b", 2);
    set_calls(abc, "c", 3);
    BOOST_TEST(pick(*algorithm, abc) == "b");
    // b and c now tie at 3: one of them, then the other.
    const auto tied = pick(*algorithm, abc);
    BOOST_TEST((tied == "b" || tied == "c"));
    BOOST_TEST(pick(*algorithm, abc) == (tied == "b" ? "c" : "b"));
}

BOOST_AUTO_TEST_CASE(pick_breaks_ties_uniformly_at_random) {
    // a is busier; b, c and d tie: each should get a third of 3,000 picks (sd about 26).
    // Released after every pick so the counts stay as set. Seeded and per-thread alike.
    for (const std::string options : {R"({"seed": 3})", R"({})"}) {
        BOOST_TEST_CONTEXT(options) {
            auto algorithm = load("least_connections", options);
            const auto abcd = counted({"a", "b", "c", "d"});
            set_calls(abcd, "a", 1);
            std::map<std::string, int> picks;
            for (int i = 0; i < 3'000; ++i) {
                const auto node = pick(*algorithm, abcd);
                ++picks[node];
                release(abcd, node);
            }
            BOOST_TEST(picks["a"] == 0);
            for (const std::string node : {"b", "c", "d"}) {
                BOOST_TEST(picks[node] >= 850, node << " " << picks[node]);
                BOOST_TEST(picks[node] <= 1150, node << " " << picks[node]);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(pick_breaks_ties_at_random_past_the_buffered_members) {
    // 100 members, all tied: the second pass reads members past the 64 it buffered.
    auto algorithm = load("least_connections", R"({"seed": 11})");
    std::vector<std::string> nodes;
    for (int i = 0; i < 100; ++i) nodes.push_back("n" + std::to_string(i));
    const auto many = counted(nodes);
    std::set<std::string> seen;
    for (int i = 0; i < 2'000; ++i) {
        const auto node = pick(*algorithm, many);
        seen.insert(node);
        release(many, node);
    }
    BOOST_TEST(seen.size() == 100u);
}

BOOST_AUTO_TEST_CASE(uncounted_snapshot_picks_any_member) {
    auto algorithm = load("least_connections");
    const rpclb::MemberSnapshot abc({"a", "b", "c"}, 1);
    std::set<std::size_t> seen;
    for (int i = 0; i < 200; ++i) seen.insert(algorithm->choose_from_nodes(abc, {}).value());
    BOOST_TEST(seen.size() == 3u);
    BOOST_TEST(abc.in_flight(1) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(power_of_two)

BOOST_AUTO_TEST_CASE(pick_single_node_picks_it) {
    auto algorithm = load("power_of_two");
    const auto a = counted({"a"});
    BOOST_TEST(pick(*algorithm, a) == "a");
    BOOST_TEST(a.in_flight(0) == 1);
}

BOOST_AUTO_TEST_CASE(pick_equal_counts_spread_evenly) {
    // Released after every pick, all counts stay equal, so the first member drawn always
    // wins: a pick is then uniform. Each count has standard deviation about 43; ±250 is
    // more than 5 of them. Seeded (deterministic) and per-thread generators alike.
    for (const std::string options : {R"({"seed": 12345})", R"({})"}) {
        BOOST_TEST_CONTEXT(options) {
            auto algorithm = load("power_of_two", options);
            const auto abcd = counted({"a", "b", "c", "d"});
            std::map<std::string, int> picks;
            for (int i = 0; i < 10'000; ++i) {
                const auto node = pick(*algorithm, abcd);
                ++picks[node];
                release(abcd, node);
            }
            for (const auto& node : abcd.nodes) {
                BOOST_TEST(picks[node] >= 2250, node << " " << picks[node]);
                BOOST_TEST(picks[node] <= 2750, node << " " << picks[node]);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(pick_prefers_less_loaded_member) {
    auto algorithm = load("power_of_two", R"({"seed": 7})");
    const auto abc = counted({"a", "b", "c"});
    set_calls(abc, "a", 100);
    std::map<std::string, int> picks;
    for (int i = 0; i < 1'000; ++i) {
        const auto node = pick(*algorithm, abc);
        ++picks[node];
        release(abc, node);
    }
    // Both drawn members are distinct, so a always meets a less loaded rival.
    BOOST_TEST(picks["a"] == 0);
    BOOST_TEST(picks["b"] > 400);
    BOOST_TEST(picks["c"] > 400);
}

BOOST_AUTO_TEST_CASE(pick_without_release_keeps_counts_level) {
    auto algorithm = load("power_of_two", R"({"seed": 99})");
    const auto abcd = counted({"a", "b", "c", "d"});
    for (int i = 0; i < 4'000; ++i) (void)pick(*algorithm, abcd);
    std::vector<std::int64_t> counts;
    for (std::size_t i = 0; i < 4; ++i) counts.push_back(abcd.in_flight(i));
    const auto [low, high] = std::minmax_element(counts.begin(), counts.end());
    // Two choices keep the gap to a few calls; uniform random picks would spread by ~±30.
    BOOST_TEST(*high - *low <= 3);
}

BOOST_AUTO_TEST_CASE(pick_same_seed_repeats_sequence) {
    std::vector<std::vector<std::string>> runs;
    for (const std::string options : {R"({"seed": 42})", R"({"seed": 42})", R"({"seed": 43})"}) {
        auto algorithm = load("power_of_two", options);
        const auto abcd = counted({"a", "b", "c", "d"});
        auto& run = runs.emplace_back();
        for (int i = 0; i < 64; ++i) {
            run.push_back(pick(*algorithm, abcd));
            release(abcd, run.back());
        }
    }
    BOOST_TEST(runs[0] == runs[1], boost::test_tools::per_element());
    BOOST_TEST((runs[0] != runs[2]));
}

BOOST_AUTO_TEST_CASE(init_bad_seed_throws_naming_seed) {
    for (const std::string options : {R"({"seed": -1})", R"({"seed": 1.5})", R"({"seed": "1"})"}) {
        BOOST_TEST_CONTEXT(options) {
            rpclb::PluginRegistry registry;
            auto algorithm = registry.create("power_of_two").value();
            try {
                algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(options).as_object());
                BOOST_ERROR("init accepted it");
            } catch (const std::invalid_argument& e) {
                BOOST_TEST(std::string(e.what()).starts_with("seed"));
            }
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(peak_ewma)

rpclb::CallOutcome took(std::chrono::milliseconds latency) {
    rpclb::CallOutcome outcome;
    outcome.latency = latency;
    return outcome;
}

BOOST_AUTO_TEST_CASE(a_slow_member_is_avoided_then_tried_again_once_its_cost_decays) {
    using namespace std::chrono_literals;
    auto algorithm = load("peak_ewma", R"({"decay": 50, "seed": 5})");
    const auto abc = counted({"a", "b", "c"});
    algorithm->release(abc, 0, took(1ms));
    algorithm->release(abc, 1, took(1ms));
    algorithm->release(abc, 2, took(1000ms));
    // A call as a balancer makes it: picked, counted, released with its latency (1 ms).
    const auto call = [&] {
        const auto node = pick(*algorithm, abc);
        release(abc, node);
        algorithm->release(abc, index_of(abc, node), took(1ms));
        return node;
    };
    int on_c = 0;
    for (int i = 0; i < 300; ++i) on_c += call() == "c";
    // Every pick that drew c beside a or b went to the other (two draws are distinct).
    BOOST_TEST(on_c == 0);
    // a and b keep their 1 ms samples; c has none: its cost decays (50 ms) until a pick
    // tries it again.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    bool tried = false;
    while (!tried && std::chrono::steady_clock::now() < deadline) tried = call() == "c";
    BOOST_TEST(tried);
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_naming_them) {
    rpclb::PluginRegistry registry;
    for (const std::string options : {R"({"decay": 0})", R"({"failure_penalty": -1})", R"({"decay": "10"})"}) {
        auto algorithm = registry.create("peak_ewma").value();
        try {
            algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(options).as_object());
            BOOST_ERROR("init accepted " << options);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).starts_with("peak_ewma: option "), e.what());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(in_flight_count)

BOOST_AUTO_TEST_CASE(release_never_goes_below_zero) {
    rpclb::InFlightCount count;
    BOOST_TEST(!count.release());
    count.acquire();
    BOOST_TEST(count.release());
    BOOST_TEST(!count.release());
    BOOST_TEST(count.value() == 0);
}

BOOST_AUTO_TEST_CASE(counts_from_many_threads_stay_exact) {
    rpclb::InFlightCount count;
    std::atomic<int> refused{0};  // Boost.Test's checks are not for other threads
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&] {
                for (int i = 0; i < 100'000; ++i) count.acquire();
                for (int i = 0; i < 100'000; ++i) refused += !count.release();
            });
    }
    BOOST_TEST(refused.load() == 0);
    BOOST_TEST(count.value() == 0);
}

BOOST_AUTO_TEST_CASE(snapshot_copies_share_counts_but_not_state) {
    const auto ab = counted({"a", "b"});
    ab.calls[0]->acquire();
    int built = 0;
    const std::uint64_t owner = rpclb::new_snapshot_owner();
    (void)ab.state<int>(owner, [&] { return ++built; });
    const rpclb::MemberSnapshot copy = ab;
    BOOST_TEST(copy.in_flight(0) == 1);
    BOOST_TEST(copy.state<int>(owner, [&] { return ++built; }) == 2);
    BOOST_TEST(ab.state<int>(owner, [&] { return ++built; }) == 1);
    BOOST_TEST(built == 2);
}

BOOST_AUTO_TEST_CASE(concurrent_first_uses_of_state_keep_one) {
    const auto ab = counted({"a", "b"});
    const std::uint64_t owner = rpclb::new_snapshot_owner();
    std::atomic<int> built{0};
    std::vector<const std::string*> seen(8);
    {
        std::vector<std::jthread> threads;
        for (std::size_t t = 0; t < seen.size(); ++t)
            threads.emplace_back([&, t] {
                seen[t] = &ab.state<std::string>(owner, [&] { return std::to_string(++built); });
            });
    }
    for (const auto* s : seen) BOOST_TEST(s == seen[0]);
}

BOOST_AUTO_TEST_SUITE_END()
