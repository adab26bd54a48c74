#define BOOST_TEST_MODULE algorithms_call_direct
#include <boost/test/unit_test.hpp>

#include <rpclb/plugin_registry.hpp>

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH), on node "b@h".
std::shared_ptr<rpclb::SelectionAlgorithm> load() {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("call_direct");
    if (!algorithm) throw std::runtime_error(algorithm.error().message);
    (*algorithm)->init({"workers", "b@h", nullptr}, {});
    return *algorithm;
}

rpclb::PickOptions with_key(std::string_view key) {
    rpclb::PickOptions options;
    options.key = key;
    return options;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(algorithms_call_direct)

// predecessor-compatibility §7 case 76, first half.
BOOST_AUTO_TEST_CASE(local_is_true) {
    auto algorithm = load();
    BOOST_TEST(algorithm->local());
}

// predecessor-compatibility §7 case 76, second half, for a list where the local node is a member.
BOOST_AUTO_TEST_CASE(pick_returns_local_node_with_or_without_key) {
    auto algorithm = load();
    const rpclb::MemberSnapshot abc{{"a@h", "b@h", "c@h"}, 1};
    for (int i = 0; i < 10; ++i) {
        BOOST_TEST(algorithm->choose_from_nodes(abc, {}).value() == 1u);
        BOOST_TEST(algorithm->choose_from_nodes(abc, with_key("user:" + std::to_string(i))).value() == 1u);
    }
}

// The index follows the local node when the list changes around it.
BOOST_AUTO_TEST_CASE(pick_follows_local_node_across_lists) {
    auto algorithm = load();
    const std::vector<rpclb::MemberSnapshot> lists{{{"b@h"}, 1},
                                                   {{"a@h", "b@h"}, 2},
                                                   {{"a@h", "aa@h", "ab@h", "b@h", "c@h"}, 3},
                                                   {{"b@h", "c@h"}, 4},
                                                   {{"a@h", "b@h"}, 5}};
    const std::vector<std::size_t> expected{0, 1, 3, 0, 1};
    for (int round = 0; round < 3; ++round)
        for (std::size_t i = 0; i < lists.size(); ++i)
            BOOST_TEST(algorithm->choose_from_nodes(lists[i], {}).value() == expected[i]);
}

// The predecessor returns the local node even when it isn't listed; an index can't, so rpclb
// says why instead.
BOOST_AUTO_TEST_CASE(pick_without_local_node_in_list_returns_service_unavailable) {
    auto algorithm = load();
    const rpclb::MemberSnapshot other{{"other@h"}, 1};
    for (const auto& options : {rpclb::PickOptions{}, with_key("user:1")}) {
        auto index = algorithm->choose_from_nodes(other, options);
        BOOST_TEST_REQUIRE(!index.has_value());
        BOOST_TEST((index.error().code == rpclb::ErrorCode::service_unavailable));
        BOOST_TEST(index.error().message == "call_direct: the local node b@h is not a member");
        BOOST_TEST(index.error().details.at("load_balancer").as_string() == "workers");
        BOOST_TEST(index.error().details.at("node").as_string() == "b@h");
    }
}

// predecessor-compatibility §10.6: an empty list is an error naming the balancer.
BOOST_AUTO_TEST_CASE(empty_member_list_returns_service_unavailable) {
    auto algorithm = load();
    auto index = algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
    BOOST_TEST_REQUIRE(!index.has_value());
    BOOST_TEST((index.error() == rpclb::empty_members_error("workers")));
}

// Concurrent picks over lists that put the local node at different places always find it.
BOOST_AUTO_TEST_CASE(concurrent_picks_over_different_lists_find_local_node) {
    auto algorithm = load();
    const rpclb::MemberSnapshot first{{"a@h", "b@h", "c@h"}, 1};
    const rpclb::MemberSnapshot last{{"a@h", "aa@h", "ab@h", "b@h"}, 2};
    std::atomic<int> wrong{0};
    {
        std::vector<std::jthread> workers;
        for (int t = 0; t < 4; ++t)
            workers.emplace_back([&, t] {
                const auto& members = t % 2 ? last : first;
                const std::size_t expected = t % 2 ? 3 : 1;
                for (int i = 0; i < 20'000; ++i) {
                    auto index = algorithm->choose_from_nodes(members, {});
                    if (!index || *index != expected) ++wrong;
                }
            });
    }
    BOOST_TEST(wrong.load() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
