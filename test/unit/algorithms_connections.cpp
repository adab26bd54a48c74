#define BOOST_TEST_MODULE algorithms_connections
#include <boost/test/unit_test.hpp>

#include <rpclb/algorithm_state.hpp>
#include <rpclb/plugin_registry.hpp>

#include <boost/json/parse.hpp>

#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::array<std::string, 2> both{"least_connections", "power_of_two"};

// Counts in AlgorithmState outlive an algorithm instance, so every test case (and every
// algorithm within one) works on a balancer of its own.
std::string this_balancer(std::string_view suffix = "") {
    std::string name = boost::unit_test::framework::current_test_case().p_name;
    if (!suffix.empty()) name.append("/").append(suffix);
    return name;
}

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH).
std::shared_ptr<rpclb::SelectionAlgorithm> load(const std::string& name, const std::string& balancer,
                                                std::string_view options_json = "{}") {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create(name);
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({balancer, "me@host", nullptr}, boost::json::parse(options_json).as_object());
    return *algorithm;
}

std::shared_ptr<rpclb::detail::InFlight> count(const std::string& balancer, std::string_view node) {
    return rpclb::AlgorithmState::instance().in_flight(balancer, node);
}

// Puts `node`'s count at `calls` the way picks do: one acquire per call.
void set_calls(const std::string& balancer, std::string_view node, int calls) {
    const auto in_flight = count(balancer, node);
    in_flight->reset();
    for (int i = 0; i < calls; ++i) in_flight->acquire();
}

std::string pick(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members) {
    auto index = algorithm.choose_from_nodes(members, {});
    BOOST_TEST_REQUIRE(index.has_value(), (index ? "" : index.error().message));
    BOOST_TEST_REQUIRE(*index < members.nodes.size());
    return members.nodes[*index];
}

// Different member lists carry different versions, as the groups give them.
const rpclb::MemberSnapshot a_only{{"a"}, 1};
const rpclb::MemberSnapshot ab{{"a", "b"}, 2};
const rpclb::MemberSnapshot abc{{"a", "b", "c"}, 3};
const rpclb::MemberSnapshot abcd{{"a", "b", "c", "d"}, 4};
const rpclb::MemberSnapshot bc{{"b", "c"}, 5};

}  // namespace

BOOST_AUTO_TEST_SUITE(least_connections)

// Seed §7 case 67.
BOOST_AUTO_TEST_CASE(pick_fresh_three_nodes_in_order_then_released_node) {
    auto algorithm = load("least_connections", this_balancer());
    BOOST_TEST(pick(*algorithm, abc) == "a");
    BOOST_TEST(pick(*algorithm, abc) == "b");
    BOOST_TEST(pick(*algorithm, abc) == "c");
    algorithm->release_node("b");
    BOOST_TEST(pick(*algorithm, abc) == "b");
}

// Seed §7 case 68.
BOOST_AUTO_TEST_CASE(pick_two_nodes_after_releasing_first_picks_it_again) {
    auto algorithm = load("least_connections", this_balancer());
    BOOST_TEST(pick(*algorithm, ab) == "a");
    BOOST_TEST(pick(*algorithm, ab) == "b");
    algorithm->release_node("a");
    BOOST_TEST(pick(*algorithm, ab) == "a");
}

BOOST_AUTO_TEST_CASE(pick_takes_fewest_in_flight_and_counts_it) {
    const auto balancer = this_balancer();
    auto algorithm = load("least_connections", balancer);
    set_calls(balancer, "a", 5);
    set_calls(balancer, "b", 2);
    set_calls(balancer, "c", 3);
    BOOST_TEST(pick(*algorithm, abc) == "b");
    BOOST_TEST(count(balancer, "b")->value() == 3);
    // b and c now tie at 3: the earlier in list order wins.
    BOOST_TEST(pick(*algorithm, abc) == "b");
    BOOST_TEST(pick(*algorithm, abc) == "c");
}

BOOST_AUTO_TEST_CASE(pick_tie_goes_to_earliest_in_list_order) {
    const auto balancer = this_balancer();
    auto algorithm = load("least_connections", balancer);
    set_calls(balancer, "a", 2);
    set_calls(balancer, "b", 1);
    set_calls(balancer, "c", 1);
    BOOST_TEST(pick(*algorithm, abc) == "b");
    // The list order counts, not the name order.
    set_calls(balancer, "b", 1);
    BOOST_TEST(pick(*algorithm, rpclb::MemberSnapshot{{"c", "b", "a"}, 100}) == "c");
}

BOOST_AUTO_TEST_CASE(release_below_zero_stays_at_zero) {
    const auto balancer = this_balancer();
    auto algorithm = load("least_connections", balancer);
    BOOST_TEST(pick(*algorithm, ab) == "a");
    algorithm->release_node("a");
    algorithm->release_node("a");
    BOOST_TEST(count(balancer, "a")->value() == 0);
    // Had a gone to -1, it would win the next two picks.
    BOOST_TEST(pick(*algorithm, ab) == "a");
    BOOST_TEST(pick(*algorithm, ab) == "b");
}

BOOST_AUTO_TEST_CASE(new_instance_on_same_balancer_keeps_counts) {
    const auto balancer = this_balancer();
    auto first = load("least_connections", balancer);
    BOOST_TEST(pick(*first, ab) == "a");
    BOOST_TEST(pick(*first, ab) == "b");
    BOOST_TEST(pick(*first, ab) == "a");  // a 2, b 1
    first.reset();
    auto restarted = load("least_connections", balancer);
    BOOST_TEST(pick(*restarted, ab) == "b");  // a fresh count would pick a
    BOOST_TEST(count(balancer, "a")->value() == 2);
    BOOST_TEST(count(balancer, "b")->value() == 2);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(power_of_two)

// Seed §7 case 71.
BOOST_AUTO_TEST_CASE(pick_single_node_picks_it_and_counts_it) {
    const auto balancer = this_balancer();
    auto algorithm = load("power_of_two", balancer);
    BOOST_TEST(pick(*algorithm, a_only) == "a");
    BOOST_TEST(pick(*algorithm, a_only) == "a");
    BOOST_TEST(count(balancer, "a")->value() == 2);
}

// Seed §7 case 72.
BOOST_AUTO_TEST_CASE(pick_three_nodes_returns_a_member) {
    auto algorithm = load("power_of_two", this_balancer());
    std::set<std::string> seen;
    for (int i = 0; i < 300; ++i) {
        seen.insert(pick(*algorithm, abc));
        algorithm->release_node(*seen.rbegin());
    }
    BOOST_TEST(seen.size() <= 3u);
    for (const auto& node : seen) BOOST_TEST((node == "a" || node == "b" || node == "c"));
}

// Seed §7 case 74.
BOOST_AUTO_TEST_CASE(release_and_node_change_after_pick_succeed) {
    const auto balancer = this_balancer();
    auto algorithm = load("power_of_two", balancer);
    const auto node = pick(*algorithm, abc);
    BOOST_TEST(count(balancer, node)->value() == 1);
    algorithm->release_node(node);
    BOOST_TEST(count(balancer, node)->value() == 0);
    const std::vector<std::string> d{"d"};
    algorithm->on_node_change(rpclb::NodeChange::joined, d);
    algorithm->on_node_change(rpclb::NodeChange::left, d);
    BOOST_TEST(pick(*algorithm, abc).size() == 1u);
}

BOOST_AUTO_TEST_CASE(pick_equal_counts_spread_evenly) {
    // Released after every pick, all counts stay equal, so the first member drawn always
    // wins: a pick is then uniform. Each count has standard deviation about 43; ±250 is
    // more than 5 of them. Seeded (deterministic) and per-thread generators alike.
    for (const std::string options : {R"({"seed": 12345})", R"({})"}) {
        BOOST_TEST_CONTEXT(options) {
            const auto balancer = this_balancer(options);
            auto algorithm = load("power_of_two", balancer, options);
            std::map<std::string, int> picks;
            for (int i = 0; i < 10'000; ++i) {
                const auto node = pick(*algorithm, abcd);
                ++picks[node];
                algorithm->release_node(node);
            }
            for (const auto& node : abcd.nodes) {
                BOOST_TEST(picks[node] >= 2250, node << " " << picks[node]);
                BOOST_TEST(picks[node] <= 2750, node << " " << picks[node]);
                BOOST_TEST(count(balancer, node)->value() == 0);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(pick_prefers_less_loaded_member) {
    const auto balancer = this_balancer();
    auto algorithm = load("power_of_two", balancer, R"({"seed": 7})");
    set_calls(balancer, "a", 100);
    std::map<std::string, int> picks;
    for (int i = 0; i < 1'000; ++i) {
        const auto node = pick(*algorithm, abc);
        ++picks[node];
        algorithm->release_node(node);
    }
    // Both drawn members are distinct, so a always meets a less loaded rival; uniformly
    // random picks would have given a about 333.
    BOOST_TEST(picks["a"] == 0);
    BOOST_TEST(picks["b"] > 400);
    BOOST_TEST(picks["c"] > 400);
    // With two members both are drawn every time: the less loaded always wins.
    for (int i = 0; i < 50; ++i) {
        BOOST_TEST(pick(*algorithm, ab) == "b");
        algorithm->release_node("b");
    }
}

BOOST_AUTO_TEST_CASE(pick_without_release_keeps_counts_level) {
    const auto balancer = this_balancer();
    auto algorithm = load("power_of_two", balancer, R"({"seed": 99})");
    for (int i = 0; i < 4'000; ++i) (void)pick(*algorithm, abcd);
    std::vector<std::int64_t> counts;
    for (const auto& node : abcd.nodes) counts.push_back(count(balancer, node)->value());
    const auto [low, high] = std::minmax_element(counts.begin(), counts.end());
    // Two choices keep the gap to a few calls; uniform random picks would spread by ~±30.
    BOOST_TEST(*high - *low <= 3);
    BOOST_TEST(*low + *high > 0);
}

BOOST_AUTO_TEST_CASE(pick_same_seed_repeats_sequence) {
    std::vector<std::vector<std::string>> runs;
    for (const std::string name : {"first", "second", "other seed"}) {
        auto algorithm = load("power_of_two", this_balancer(name),
                              name == "other seed" ? R"({"seed": 43})" : R"({"seed": 42})");
        auto& run = runs.emplace_back();
        for (int i = 0; i < 64; ++i) {
            run.push_back(pick(*algorithm, abcd));
            algorithm->release_node(run.back());
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

BOOST_AUTO_TEST_CASE(shares_counts_with_least_connections_on_same_balancer) {
    const auto balancer = this_balancer();
    auto least = load("least_connections", balancer);
    auto two = load("power_of_two", balancer);
    BOOST_TEST(pick(*least, ab) == "a");
    BOOST_TEST(pick(*two, ab) == "b");  // a already has one call in flight
    two->release_node("a");
    BOOST_TEST(count(balancer, "a")->value() == 0);
    BOOST_TEST(pick(*least, ab) == "a");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(connection_counts)

BOOST_AUTO_TEST_CASE(release_never_goes_below_zero) {
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            const auto node = pick(*algorithm, a_only);
            for (int i = 0; i < 3; ++i) algorithm->release_node(node);
            BOOST_TEST(count(balancer, node)->value() == 0);
            (void)pick(*algorithm, a_only);
            BOOST_TEST(count(balancer, node)->value() == 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(release_unknown_node_changes_nothing) {
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            algorithm->release_node("never-picked");  // before any pick
            const auto node = pick(*algorithm, ab);
            algorithm->release_node("never-picked");
            algorithm->release_node("");
            BOOST_TEST(count(balancer, node)->value() == 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(node_left_resets_its_count) {
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            for (int i = 0; i < 6; ++i) (void)pick(*algorithm, abc);
            BOOST_TEST(count(balancer, "a")->value() + count(balancer, "b")->value() +
                           count(balancer, "c")->value() == 6);
            const auto b_before = count(balancer, "b")->value();
            const std::vector<std::string> left{"a", "c"};
            algorithm->on_node_change(rpclb::NodeChange::left, left);
            BOOST_TEST(count(balancer, "a")->value() == 0);
            BOOST_TEST(count(balancer, "c")->value() == 0);
            BOOST_TEST(count(balancer, "b")->value() == b_before);
            // A join changes no count.
            algorithm->on_node_change(rpclb::NodeChange::joined, left);
            BOOST_TEST(count(balancer, "a")->value() == 0);
            BOOST_TEST(count(balancer, "b")->value() == b_before);
        }
    }
}

BOOST_AUTO_TEST_CASE(release_after_membership_change_counts_down) {
    // A call picked before a member list change is released after it.
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            BOOST_TEST(pick(*algorithm, a_only) == "a");
            (void)pick(*algorithm, bc);  // a newer member list without a
            algorithm->release_node("a");
            BOOST_TEST(count(balancer, "a")->value() == 0);
        }
    }
}

BOOST_AUTO_TEST_CASE(pick_empty_member_list_returns_service_unavailable) {
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            auto index = algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
            BOOST_TEST_REQUIRE(!index.has_value());
            BOOST_TEST((index.error() == rpclb::empty_members_error(balancer)));
            auto sample = algorithm->choose_nodes(rpclb::MemberSnapshot{}, 2, {});
            BOOST_TEST_REQUIRE(!sample.has_value());
            BOOST_TEST((sample.error().code == rpclb::ErrorCode::service_unavailable));
        }
    }
}

// A count driven below zero and clamped on read would hide behind a 0. This makes it show:
// `threads` threads and this one each count one call on `node`, which must then read
// exactly threads + 1.
void expect_no_hidden_debt(const std::string& balancer, std::string_view node, int threads) {
    const auto in_flight = count(balancer, node);
    std::latch all_alive(threads);
    {
        std::vector<std::jthread> holders;
        for (int t = 0; t < threads; ++t)
            holders.emplace_back([&] {
                all_alive.arrive_and_wait();
                in_flight->acquire();
            });
    }
    in_flight->acquire();
    BOOST_TEST(in_flight->value() == threads + 1, node);
    in_flight->reset();
}

BOOST_AUTO_TEST_CASE(concurrent_picks_and_releases_during_membership_changes_stay_non_negative) {
    // Two threads pick and release (keeping a few calls in flight each) while a third
    // switches the member list and reports the nodes that left; a fourth watches that no
    // count goes below zero. Once every call is released, every count is back at zero.
    const std::array<rpclb::MemberSnapshot, 3> lists{
        rpclb::MemberSnapshot{{"a", "b", "c", "d"}, 10}, rpclb::MemberSnapshot{{"a", "b", "c"}, 11},
        rpclb::MemberSnapshot{{"b", "c", "d", "e"}, 12}};
    const std::vector<std::string> everyone{"a", "b", "c", "d", "e"};
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            std::atomic<std::size_t> current{0};
            std::atomic<int> working{2};
            std::atomic<bool> negative{false};
            std::atomic<int> errors{0};
            std::atomic<int> changes{0};
            {
                std::vector<std::jthread> threads;
                for (int t = 0; t < 2; ++t)
                    threads.emplace_back([&] {
                        std::deque<std::string> in_flight;
                        // Runs until the member list has changed often enough (bounded all
                        // the same, in case the switching thread is starved).
                        for (int i = 0; i < 50'000 || (changes.load() < 200 && i < 20'000'000); ++i) {
                            const auto& members = lists[current.load()];
                            auto index = algorithm->choose_from_nodes(members, {});
                            if (!index || *index >= members.nodes.size()) {
                                ++errors;
                                continue;
                            }
                            in_flight.push_back(members.nodes[*index]);
                            if (in_flight.size() > 5) {
                                algorithm->release_node(in_flight.front());
                                in_flight.pop_front();
                            }
                        }
                        for (const auto& node : in_flight) algorithm->release_node(node);
                        --working;
                    });
                threads.emplace_back([&] {
                    std::size_t at = 0;
                    while (working.load() > 0) {
                        const std::size_t next = (at + 1) % lists.size();
                        current.store(next);
                        std::vector<std::string> left;
                        for (const auto& node : lists[at].nodes)
                            if (!std::ranges::binary_search(lists[next].nodes, node)) left.push_back(node);
                        algorithm->on_node_change(rpclb::NodeChange::left, left);
                        at = next;
                        ++changes;
                        std::this_thread::yield();
                    }
                });
                threads.emplace_back([&] {
                    while (working.load() > 0)
                        for (const auto& node : everyone)
                            if (count(balancer, node)->value() < 0) negative = true;
                });
            }
            BOOST_TEST(errors.load() == 0);
            BOOST_TEST(!negative.load());
            BOOST_TEST(changes.load() >= 200);
            for (const auto& node : everyone) BOOST_TEST(count(balancer, node)->value() == 0, node);
            for (const auto& node : everyone) expect_no_hidden_debt(balancer, node, 8);
        }
    }
}

BOOST_AUTO_TEST_CASE(picks_see_calls_counted_on_other_threads_within_a_view_period) {
    // A thread counts on its own stripe and reads the other stripes through a view at most
    // one period (a few microseconds) old: calls another thread adds after this thread's
    // view was read must steer this thread's picks once the view is read again.
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            algorithm->release_node(pick(*algorithm, ab));  // this thread's view of ab is read
            std::size_t other_stripe = 0;
            std::jthread([&] {
                other_stripe = rpclb::detail::this_thread_stripe();
                for (int i = 0; i < 3; ++i) count(balancer, "a")->acquire();
            }).join();
            BOOST_TEST_REQUIRE(other_stripe != rpclb::detail::this_thread_stripe(),
                               "the two threads must count on different stripes for this test");
            BOOST_TEST(count(balancer, "a")->on_stripe(rpclb::detail::this_thread_stripe()) == 0);
            // Poll with a deadline: the view is at most one period old, far below 2 s.
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            std::string picked;
            do {
                picked = pick(*algorithm, ab);
                algorithm->release_node(picked);
            } while (picked != "b" && std::chrono::steady_clock::now() < deadline);
            BOOST_TEST(picked == "b");
            // From then on a counts 3 and b 0 (each pick is released): every pick is b.
            int to_b = 0;
            for (int i = 0; i < 50; ++i) {
                picked = pick(*algorithm, ab);
                algorithm->release_node(picked);
                to_b += picked == "b";
            }
            BOOST_TEST(to_b == 50);
            BOOST_TEST(count(balancer, "a")->value() == 3);
            BOOST_TEST(count(balancer, "b")->value() == 0);
        }
    }
}

BOOST_AUTO_TEST_CASE(release_on_another_thread_cancels_pick_exactly) {
    // Calls complete on network threads: the release comes from a thread that never picked.
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            std::vector<std::string> picked;
            std::jthread([&] {
                for (int i = 0; i < 10; ++i) picked.push_back(ab.nodes[algorithm->choose_from_nodes(ab, {}).value()]);
            }).join();
            BOOST_TEST(count(balancer, "a")->value() + count(balancer, "b")->value() == 10);
            std::jthread([&] {
                for (const auto& node : picked) algorithm->release_node(node);
            }).join();
            BOOST_TEST(count(balancer, "a")->value() == 0);
            BOOST_TEST(count(balancer, "b")->value() == 0);
            // Nothing left to cancel: a surplus release is dropped.
            algorithm->release_node("a");
            BOOST_TEST(count(balancer, "a")->value() == 0);
            const auto node = pick(*algorithm, ab);
            BOOST_TEST(count(balancer, node)->value() == 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(concurrent_releases_on_other_threads_cancel_picks_exactly) {
    // Two threads pick and hand each call to a third that releases it, as a network thread
    // would; a fourth watches that no count goes below zero. Afterwards every count is zero.
    const std::vector<std::string> everyone{"a", "b", "c", "d"};
    for (const auto& name : both) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            std::mutex mutex;
            std::deque<std::string> completed;
            std::atomic<int> picking{2};
            std::atomic<bool> negative{false};
            std::atomic<long> released{0};
            {
                std::vector<std::jthread> threads;
                for (int t = 0; t < 2; ++t)
                    threads.emplace_back([&] {
                        for (int i = 0; i < 50'000; ++i) {
                            auto index = algorithm->choose_from_nodes(abcd, {});
                            if (!index) continue;
                            std::lock_guard lock(mutex);
                            completed.push_back(abcd.nodes[*index]);
                        }
                        --picking;
                    });
                threads.emplace_back([&] {
                    for (;;) {
                        std::string node;
                        {
                            std::lock_guard lock(mutex);
                            if (completed.empty() && picking.load() == 0) return;
                            if (!completed.empty()) {
                                node = std::move(completed.front());
                                completed.pop_front();
                            }
                        }
                        if (node.empty()) {
                            std::this_thread::yield();
                            continue;
                        }
                        algorithm->release_node(node);
                        ++released;
                    }
                });
                threads.emplace_back([&] {
                    while (picking.load() > 0)
                        for (const auto& node : everyone)
                            if (count(balancer, node)->value() < 0) negative = true;
                });
            }
            BOOST_TEST(released.load() == 100'000);
            BOOST_TEST(!negative.load());
            for (const auto& node : everyone) BOOST_TEST(count(balancer, node)->value() == 0, node);
            for (const auto& node : everyone) expect_no_hidden_debt(balancer, node, 8);
        }
    }
}

BOOST_AUTO_TEST_CASE(concurrent_surplus_releases_never_push_count_below_zero) {
    // One thread picks and releases a (a few calls in flight at a time); another releases a
    // without having picked it. Surplus releases are dropped at zero, exactly as on one
    // counter, so once the picking thread has released all its calls the count is zero.
    const auto balancer = this_balancer();
    auto algorithm = load("least_connections", balancer);
    std::atomic<bool> picking{true};
    std::atomic<bool> negative{false};
    {
        std::vector<std::jthread> threads;
        threads.emplace_back([&] {
            std::deque<std::string> in_flight;
            for (int i = 0; i < 100'000; ++i) {
                in_flight.push_back(a_only.nodes[algorithm->choose_from_nodes(a_only, {}).value()]);
                if (in_flight.size() > 3) {
                    algorithm->release_node(in_flight.front());
                    in_flight.pop_front();
                }
            }
            for (const auto& node : in_flight) algorithm->release_node(node);
            picking = false;
        });
        threads.emplace_back([&] {
            while (picking.load()) algorithm->release_node("a");
        });
        threads.emplace_back([&] {
            while (picking.load())
                if (count(balancer, "a")->value() < 0) negative = true;
        });
    }
    BOOST_TEST(!negative.load());
    BOOST_TEST(count(balancer, "a")->value() == 0);
    expect_no_hidden_debt(balancer, "a", 4);
}

BOOST_AUTO_TEST_CASE(counts_from_many_threads_stay_exact) {
    // Every call of many threads picking at once is counted once.
    const auto balancer = this_balancer();
    auto algorithm = load("least_connections", balancer);
    const std::size_t threads = 16;
    std::latch all_alive(static_cast<std::ptrdiff_t>(threads));
    {
        std::vector<std::jthread> workers;
        for (std::size_t t = 0; t < threads; ++t)
            workers.emplace_back([&] {
                all_alive.arrive_and_wait();  // every thread holds a slot (or none) at once
                for (int i = 0; i < 1'000; ++i) (void)algorithm->choose_from_nodes(ab, {});
            });
    }
    BOOST_TEST(count(balancer, "a")->value() + count(balancer, "b")->value() ==
               static_cast<std::int64_t>(threads * 1'000));
    for (std::size_t i = 0; i < threads * 1'000; ++i) {
        algorithm->release_node("a");
        algorithm->release_node("b");
    }
    BOOST_TEST(count(balancer, "a")->value() == 0);
    BOOST_TEST(count(balancer, "b")->value() == 0);
}

BOOST_AUTO_TEST_CASE(release_finds_nodes_among_many_handed_out) {
    // Releases search the newest member list, then the balancer's counters: with hundreds
    // of nodes over several member lists, each release still finds its own node.
    const auto balancer = this_balancer();
    auto algorithm = load("power_of_two", balancer, R"({"seed": 5})");
    std::vector<std::string> picked;
    for (std::uint64_t list = 0; list < 4; ++list) {
        rpclb::MemberSnapshot members;
        for (int i = 0; i < 100; ++i) members.nodes.push_back("n" + std::to_string(list * 100 + i));
        std::sort(members.nodes.begin(), members.nodes.end());
        members.version = 1000 + list;
        for (int i = 0; i < 500; ++i) picked.push_back(pick(*algorithm, members));
    }
    std::int64_t total = 0;
    for (int i = 0; i < 400; ++i) total += count(balancer, "n" + std::to_string(i))->value();
    BOOST_TEST(total == 2000);
    for (const auto& node : picked) algorithm->release_node(node);
    for (int i = 0; i < 400; ++i) BOOST_TEST(count(balancer, "n" + std::to_string(i))->value() == 0);
}

BOOST_AUTO_TEST_SUITE_END()

// Fault 4 of the issue: state kept per node name must go when the name has left, or a
// client whose balancers see members come and go grows without bound.
BOOST_AUTO_TEST_SUITE(churned_names)

// Malloc'd bytes in use now (glibc).
std::size_t heap_in_use() { return mallinfo2().uordblks; }

// Members join and leave as a group's snapshots show them: seven that stay, plus one new
// name per step that takes calls and then leaves. Returns the heap bytes kept per churned
// name over the second half of the steps (the first half warms up whatever is bounded).
double bytes_kept_per_churned_name(rpclb::SelectionAlgorithm& algorithm, const std::string& prefix,
                                   int steps) {
    std::vector<std::string> stay;
    for (int i = 0; i < 7; ++i) stay.push_back(prefix + "-stays-" + std::to_string(i) + "@host");
    std::size_t halfway = 0;
    for (int step = 0; step < steps; ++step) {
        if (step == steps / 2) halfway = heap_in_use();
        const std::vector<std::string> joined{prefix + "-churned-" + std::to_string(step) + "@host"};
        {
            rpclb::MemberSnapshot members{stay, 1 + static_cast<std::uint64_t>(step)};
            members.nodes.push_back(joined.front());
            std::sort(members.nodes.begin(), members.nodes.end());
            algorithm.on_node_change(rpclb::NodeChange::joined, joined);
            std::vector<std::string> picked;
            for (int i = 0; i < 16; ++i) picked.push_back(pick(algorithm, members));
            for (const auto& node : picked) algorithm.release_node(node);
        }
        algorithm.on_node_change(rpclb::NodeChange::left, joined);
    }
    const double kept = static_cast<double>(heap_in_use()) - static_cast<double>(halfway);
    return kept / (steps - steps / 2);
}

BOOST_AUTO_TEST_CASE(churned_names_leave_no_state_behind) {
    constexpr int steps = 4000;
    for (const std::string name : {"least_connections", "power_of_two", "round_robin", "random",
                                   "weighted_round_robin", "least_cpu"}) {
        BOOST_TEST_CONTEXT(name) {
            const auto balancer = this_balancer(name);
            auto algorithm = load(name, balancer);
            auto& state = rpclb::AlgorithmState::instance();
            const std::size_t entries_before = state.in_flight_entries();
            const std::size_t readings_before = state.reading_entries();
            const double per_name = bytes_kept_per_churned_name(*algorithm, name, steps);
            BOOST_TEST_MESSAGE(name << ": " << per_name << " heap bytes kept per churned name");
            // Only the seven that stay may still have counters.
            BOOST_TEST(state.in_flight_entries() <= entries_before + 7);
            // least_cpu's readings live with the snapshots that hold them, all gone now
            // (it used to keep a reading per name seen and a slot table per member list).
            BOOST_TEST(state.reading_entries() <= readings_before);
            // The counting algorithms used to keep a release index version per new name
            // (each holding every name seen), a member table per member list and a
            // counter column per name: kilobytes per name, growing. Allocator noise is all
            // that may stay.
            BOOST_TEST(per_name < 16.0, per_name << " bytes per churned name");
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
