#define BOOST_TEST_MODULE algorithms
#include <boost/test/unit_test.hpp>

#include <rpclb/plugin_registry.hpp>

#include <boost/json/object.hpp>

#include <algorithm>
#include <array>
#include <latch>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH), so the tests exercise
// the built .so and not a copy of its source.
// Each test case works on a balancer of its own, named after it.
std::string this_balancer() { return boost::unit_test::framework::current_test_case().p_name; }

std::shared_ptr<rpclb::SelectionAlgorithm> load(const std::string& name, const std::string& balancer = this_balancer(),
                                                const boost::json::object& options = {}) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create(name);
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({balancer, "me@host", nullptr}, options);
    return *algorithm;
}

rpclb::MemberSnapshot members(std::size_t count) {
    rpclb::MemberSnapshot snapshot;
    for (std::size_t i = 0; i < count; ++i)
        snapshot.nodes.push_back("node" + std::to_string(i) + "@host");
    snapshot.version = 1;
    return snapshot;
}

std::size_t pick(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& snapshot,
                 const rpclb::PickOptions& options = {}) {
    auto index = algorithm.choose_from_nodes(snapshot, options);
    BOOST_TEST_REQUIRE(index.has_value());
    BOOST_TEST_REQUIRE(*index < snapshot.nodes.size());
    return *index;
}

const rpclb::MemberSnapshot abc{{"a@h", "b@h", "c@h"}, 1};

}  // namespace

BOOST_AUTO_TEST_SUITE(algorithms)

BOOST_AUTO_TEST_CASE(round_robin_picks_members_in_turn) {
    auto algorithm = load("round_robin");
    const std::size_t first = pick(*algorithm, abc);
    for (std::size_t i = 1; i < 7; ++i) BOOST_TEST(pick(*algorithm, abc) == (first + i) % 3);
}

BOOST_AUTO_TEST_CASE(round_robin_new_instances_start_at_random_members) {
    // 30 one-call clients over 3 members: a shared start would give one member all 30.
    std::array<int, 3> first_picks{};
    for (int client = 0; client < 30; ++client) ++first_picks[pick(*load("round_robin"), abc)];
    for (int count : first_picks) BOOST_TEST(count <= 20);
}

BOOST_AUTO_TEST_CASE(one_call_clients_spread_over_members_for_every_unkeyed_algorithm) {
    // 30 one-call clients over 3 members, each a new instance (no seed) picking once from a
    // fresh snapshot: every member ties, so an algorithm that broke ties by list order
    // would give one member all 30. A uniform pick puts more than 20 on one member with
    // probability 1.3e-4 per algorithm: this case fails by chance about once in 1,100 runs.
    for (const std::string name : {"random", "round_robin", "weighted_round_robin", "least_connections",
                                   "power_of_two", "peak_ewma", "least_cpu"}) {
        BOOST_TEST_CONTEXT(name) {
            std::array<int, 3> first_picks{};
            for (int client = 0; client < 30; ++client) {
                rpclb::MemberSnapshot fresh{{"a@h", "b@h", "c@h"}, 1};
                fresh.count_calls();
                ++first_picks[pick(*load(name), fresh)];
            }
            for (int count : first_picks) BOOST_TEST(count <= 20);
        }
    }
}

BOOST_AUTO_TEST_CASE(round_robin_first_picks_from_two_threads_reach_every_member) {
    for (int round = 0; round < 50; ++round) {
        auto algorithm = load("round_robin");
        const auto six = members(6);
        std::array<std::vector<std::size_t>, 2> picked;
        {
            std::latch start(2);
            std::vector<std::jthread> workers;
            for (std::size_t t = 0; t < 2; ++t)
                workers.emplace_back([&, t] {
                    start.arrive_and_wait();
                    for (int i = 0; i < 3; ++i) picked[t].push_back(algorithm->choose_from_nodes(six, {}).value());
                });
        }
        std::set<std::size_t> reached(picked[0].begin(), picked[0].end());
        reached.insert(picked[1].begin(), picked[1].end());
        BOOST_TEST(reached.size() == 6u);
    }
}

BOOST_AUTO_TEST_CASE(algorithms_reject_unknown_options_naming_them) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"random", "takes no options"},
        {"round_robin", "known: start"},
        {"least_connections", "known: failure_penalty, seed, test_now_ms"},
        {"call_direct", "takes no options"},
        {"power_of_two", "known: failure_penalty, reported_load, load_max_age_ms, seed, test_now_ms"},
        {"weighted_round_robin", "known: weights, start"},
        {"hash_ring", "known: weight, load_factor"},
        {"least_cpu", "known: poll_interval"},
    };
    for (const auto& [name, known] : cases) {
        rpclb::PluginRegistry registry;
        auto algorithm = registry.create(name);
        BOOST_TEST_REQUIRE(algorithm.has_value());
        try {
            (*algorithm)->init({this_balancer(), "me@host", nullptr}, boost::json::object{{"wieght", 3}});
            BOOST_ERROR(name << " accepted an unknown option");
        } catch (const std::invalid_argument& e) {
            const std::string message = e.what();
            BOOST_TEST(message.find(name + ": unknown option \"wieght\"") == 0, message);
            BOOST_TEST(message.find(known) != std::string::npos, message);
        }
    }
}

BOOST_AUTO_TEST_CASE(round_robin_single_node_picks_it_every_time) {
    auto algorithm = load("round_robin");
    const auto one = members(1);
    BOOST_TEST(pick(*algorithm, one) == 0u);
    BOOST_TEST(pick(*algorithm, one) == 0u);
}

BOOST_AUTO_TEST_CASE(round_robin_membership_change_keeps_the_turn) {
    auto algorithm = load("round_robin");
    (void)pick(*algorithm, abc);
    const auto two = members(2);
    const std::size_t next = pick(*algorithm, two);
    BOOST_TEST(pick(*algorithm, two) == 1 - next);
}

BOOST_AUTO_TEST_CASE(round_robin_concurrent_picks_spread_exactly_evenly) {
    auto algorithm = load("round_robin");
    const auto four = members(4);
    constexpr int threads = 4, picks_per_thread = 64 * 400;
    std::array<std::array<int, 4>, threads> counts{};
    {
        std::vector<std::jthread> workers;
        for (int t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                for (int i = 0; i < picks_per_thread; ++i)
                    ++counts[t][algorithm->choose_from_nodes(four, {}).value()];
            });
    }
    // No two picks share a cursor value: exact totals.
    for (std::size_t node = 0; node < 4; ++node) {
        int total = 0;
        for (const auto& per_thread : counts) total += per_thread[node];
        BOOST_TEST(total == threads * picks_per_thread / 4);
    }
}

BOOST_AUTO_TEST_CASE(random_returns_a_member) {
    auto algorithm = load("random");
    const auto five = members(5);
    for (int i = 0; i < 100; ++i) BOOST_TEST(pick(*algorithm, five) < 5u);
    BOOST_TEST(pick(*algorithm, members(1)) == 0u);
}

BOOST_AUTO_TEST_CASE(random_many_picks_spread_evenly_across_members) {
    auto algorithm = load("random");
    const auto four = members(4);
    std::array<int, 4> counts{};
    for (int i = 0; i < 10'000; ++i) ++counts[pick(*algorithm, four)];
    // Each count has standard deviation about 43; ±250 is more than 5 of them.
    for (int count : counts) {
        BOOST_TEST(count >= 2250);
        BOOST_TEST(count <= 2750);
    }
}

BOOST_AUTO_TEST_CASE(random_same_key_still_picks_at_random) {
    auto algorithm = load("random");
    const auto four = members(4);
    rpclb::PickOptions options;
    options.key = "user-42";
    std::set<std::size_t> seen;
    for (int i = 0; i < 200; ++i) seen.insert(pick(*algorithm, four, options));
    BOOST_TEST(seen.size() == 4u);
}

BOOST_AUTO_TEST_CASE(empty_member_list_returns_service_unavailable) {
    for (const std::string name : {"round_robin", "random"}) {
        BOOST_TEST_CONTEXT(name) {
            auto algorithm = load(name, "workers");
            auto index = algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
            BOOST_TEST_REQUIRE(!index.has_value());
            BOOST_TEST((index.error().code == rpclb::ErrorCode::service_unavailable));
            BOOST_TEST(index.error().message == "no members registered");
            BOOST_TEST((index.error() == rpclb::empty_members_error("workers")));
            BOOST_TEST(index.error().details.at("load_balancer").as_string() == "workers");

            auto sample = algorithm->choose_nodes(rpclb::MemberSnapshot{}, 2, {});
            BOOST_TEST_REQUIRE(!sample.has_value());
            BOOST_TEST((sample.error().code == rpclb::ErrorCode::service_unavailable));
            BOOST_TEST(sample.error().message == "no members registered");
        }
    }
}

BOOST_AUTO_TEST_CASE(round_robin_empty_member_list_does_not_move_cursor) {
    auto algorithm = load("round_robin");
    const std::size_t before = pick(*algorithm, abc);
    (void)algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
    BOOST_TEST(pick(*algorithm, abc) == (before + 1) % 3);
}

BOOST_AUTO_TEST_CASE(default_choose_nodes_returns_min_count_size_distinct_indices) {
    for (const std::string name : {"round_robin", "random"}) {
        BOOST_TEST_CONTEXT(name) {
            auto algorithm = load(name);
            const auto five = members(5);
            for (std::size_t count : {0u, 1u, 3u, 5u, 9u}) {
                BOOST_TEST_CONTEXT("count " << count) {
                    auto sample = algorithm->choose_nodes(five, count, {});
                    BOOST_TEST_REQUIRE(sample.has_value());
                    BOOST_TEST(sample->size() == std::min<std::size_t>(count, 5));
                    const std::set<std::size_t> distinct(sample->begin(), sample->end());
                    BOOST_TEST(distinct.size() == sample->size());
                    for (std::size_t index : *sample) BOOST_TEST(index < 5u);
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(default_choose_nodes_first_choice_is_random) {
    auto algorithm = load("round_robin");
    const auto four = members(4);
    std::array<int, 4> first{};
    for (int i = 0; i < 4'000; ++i) ++first[algorithm->choose_nodes(four, 2, {}).value().front()];
    for (int count : first) {
        BOOST_TEST(count >= 800);
        BOOST_TEST(count <= 1200);
    }
}

BOOST_AUTO_TEST_SUITE_END()
