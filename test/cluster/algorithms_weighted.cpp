#define BOOST_TEST_MODULE algorithms_weighted
#include <boost/test/unit_test.hpp>

#include <rpclb/node_load.hpp>
#include <rpclb/plugin_registry.hpp>

#include <boost/json/parse.hpp>

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string this_balancer() { return boost::unit_test::framework::current_test_case().p_name; }

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH), its cursor at the start
// of the period (option `start` 0) unless the options say otherwise.
std::shared_ptr<rpclb::SelectionAlgorithm> load(std::string_view options_json = "{}",
                                                const std::string& balancer = this_balancer()) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("weighted_round_robin");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    auto options = boost::json::parse(options_json).as_object();
    if (!options.contains("start")) options["start"] = 0;
    (*algorithm)->init({balancer, "me@host", nullptr}, options);
    return *algorithm;
}

std::string pick(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members) {
    auto index = algorithm.choose_from_nodes(members, {});
    BOOST_TEST_REQUIRE(index.has_value(), (index ? "" : index.error().message));
    BOOST_TEST_REQUIRE(*index < members.nodes.size());
    return members.nodes[*index];
}

std::vector<std::string> picks(rpclb::SelectionAlgorithm& algorithm,
                               const rpclb::MemberSnapshot& members, int count) {
    std::vector<std::string> picked;
    for (int i = 0; i < count; ++i) picked.push_back(pick(algorithm, members));
    return picked;
}

std::map<std::string, int> tally(const std::vector<std::string>& picked) {
    std::map<std::string, int> counts;
    for (const auto& node : picked) ++counts[node];
    return counts;
}

// Snapshots of different member lists carry different versions, as the groups give them.
const rpclb::MemberSnapshot ab{{"a", "b"}, 1};
const rpclb::MemberSnapshot abc{{"a", "b", "c"}, 2};
const rpclb::MemberSnapshot a_only{{"a"}, 3};

void require_init_rejected(std::string_view options_json, std::string_view mentions) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("weighted_round_robin").value();
    try {
        algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(options_json).as_object());
        BOOST_ERROR("init accepted " << options_json);
    } catch (const std::invalid_argument& e) {
        const std::string message = e.what();
        BOOST_TEST_CONTEXT(message) {
            BOOST_TEST(message.starts_with("weights"));
            BOOST_TEST(message.find(mentions) != std::string::npos);
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weighted_round_robin)

// predecessor-compatibility §7 case 64, with the interleaving of §10.5.
BOOST_AUTO_TEST_CASE(pick_three_to_one_gives_six_a_two_b_interleaved) {
    auto algorithm = load(R"({"weights": {"a": 3, "b": 1}})");
    const auto picked = picks(*algorithm, ab, 8);
    const auto counts = tally(picked);
    BOOST_TEST(counts.at("a") == 6);
    BOOST_TEST(counts.at("b") == 2);
    const std::vector<std::string> expected{"a", "a", "b", "a", "a", "a", "b", "a"};
    BOOST_TEST(picked == expected, boost::test_tools::per_element());
}

// predecessor-compatibility §7 case 66.
BOOST_AUTO_TEST_CASE(pick_empty_weights_is_plain_round_robin) {
    auto algorithm = load(R"({"weights": {}})");
    const std::vector<std::string> expected{"a", "b", "c", "a", "b", "c"};
    BOOST_TEST(picks(*algorithm, abc, 6) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pick_without_weights_option_is_plain_round_robin) {
    auto algorithm = load();
    const std::vector<std::string> expected{"a", "b", "c", "a", "b", "c"};
    BOOST_TEST(picks(*algorithm, abc, 6) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pick_many_gives_exact_proportions) {
    auto algorithm = load(R"({"weights": {"a": 5, "b": 2, "c": 1}})");
    const auto counts = tally(picks(*algorithm, abc, 8 * 1000));
    BOOST_TEST(counts.at("a") == 5000);
    BOOST_TEST(counts.at("b") == 2000);
    BOOST_TEST(counts.at("c") == 1000);
}

BOOST_AUTO_TEST_CASE(pick_spreads_each_member_evenly_over_the_period) {
    // Smoothness: after every pick t, each member's count stays within 1 of its exact share
    // t × weight / total (blocks a a a a a b b c would be 3.75 off for a after 5 picks).
    auto algorithm = load(R"({"weights": {"a": 5, "b": 2, "c": 1}})");
    const std::map<std::string, double> share{{"a", 5.0 / 8}, {"b", 2.0 / 8}, {"c", 1.0 / 8}};
    std::map<std::string, int> counts;
    for (int t = 1; t <= 64; ++t) {
        ++counts[pick(*algorithm, abc)];
        for (const auto& [node, fraction] : share)
            BOOST_TEST(std::abs(counts[node] - t * fraction) < 1.0, "t " << t << " node " << node);
    }
}

BOOST_AUTO_TEST_CASE(pick_common_factor_is_divided_out_of_the_period) {
    // 21:7 is 3:1, period 4 (undivided it would be 28).
    auto algorithm = load(R"({"weights": {"a": 21, "b": 7}})");
    BOOST_TEST(picks(*algorithm, ab, 8) == (std::vector<std::string>{"a", "a", "b", "a", "a", "a", "b", "a"}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pick_member_missing_from_weights_weighs_one) {
    auto algorithm = load(R"({"weights": {"a": 2, "other": 7}})");
    const auto counts = tally(picks(*algorithm, abc, 400));
    BOOST_TEST(counts.at("a") == 200);
    BOOST_TEST(counts.at("b") == 100);
    BOOST_TEST(counts.at("c") == 100);
}

BOOST_AUTO_TEST_CASE(pick_weight_zero_excludes_member) {
    auto algorithm = load(R"({"weights": {"a": 0, "c": 1}})");
    const std::vector<std::string> expected{"b", "c", "b", "c", "b", "c"};
    BOOST_TEST(picks(*algorithm, abc, 6) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pick_all_members_weight_zero_returns_service_unavailable) {
    auto algorithm = load(R"({"weights": {"a": 0, "b": 4}})");
    auto index = algorithm->choose_from_nodes(a_only, {});
    BOOST_TEST_REQUIRE(!index.has_value());
    BOOST_TEST((index.error().code == rpclb::ErrorCode::service_unavailable));
    BOOST_TEST(index.error().message == "no member has a positive weight");
    BOOST_TEST(index.error().details.at("load_balancer").as_string() == this_balancer());
    // Once a member with a positive weight joins, picks work again.
    BOOST_TEST(picks(*algorithm, ab, 3) == (std::vector<std::string>{"b", "b", "b"}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pick_membership_change_uses_new_members_weights) {
    auto algorithm = load(R"({"weights": {"a": 3, "b": 1, "c": 4}})");
    const auto before = tally(picks(*algorithm, ab, 4));
    BOOST_TEST(before.at("a") == 3);
    BOOST_TEST(before.at("b") == 1);
    const auto after = tally(picks(*algorithm, abc, 8 * 10));
    BOOST_TEST(after.at("a") == 30);
    BOOST_TEST(after.at("b") == 10);
    BOOST_TEST(after.at("c") == 40);
    // Back to the first member list: its period again.
    const auto again = tally(picks(*algorithm, rpclb::MemberSnapshot{{"a", "b"}, 4}, 40));
    BOOST_TEST(again.at("a") == 30);
    BOOST_TEST(again.at("b") == 10);
}

BOOST_AUTO_TEST_CASE(pick_new_instances_start_at_random_places_in_the_period) {
    // Without `start`, 30 one-call clients over [a, b, c] spread their first picks.
    std::map<std::string, int> first_picks;
    for (int client = 0; client < 30; ++client) {
        rpclb::PluginRegistry registry;
        auto algorithm = registry.create("weighted_round_robin").value();
        algorithm->init({this_balancer(), "me@host", nullptr}, {});
        ++first_picks[pick(*algorithm, abc)];
    }
    for (const auto& [node, count] : first_picks) BOOST_TEST(count <= 20, node);
}

BOOST_AUTO_TEST_CASE(pick_concurrent_threads_keep_exact_proportions) {
    auto algorithm = load(R"({"weights": {"a": 3, "b": 1}})");
    constexpr int threads = 2, picks_per_thread = 64 * 625;
    std::array<std::array<int, 2>, threads> counts{};
    {
        std::vector<std::jthread> workers;
        for (int t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                for (int i = 0; i < picks_per_thread; ++i) ++counts[t][algorithm->choose_from_nodes(ab, {}).value()];
            });
    }
    BOOST_TEST(counts[0][0] + counts[1][0] == 60'000);
    BOOST_TEST(counts[0][1] + counts[1][1] == 20'000);
}

BOOST_AUTO_TEST_CASE(pick_empty_member_list_returns_service_unavailable) {
    auto algorithm = load(R"({"weights": {"a": 3}})");
    auto index = algorithm->choose_from_nodes(rpclb::MemberSnapshot{}, {});
    BOOST_TEST_REQUIRE(!index.has_value());
    BOOST_TEST((index.error() == rpclb::empty_members_error(this_balancer())));
    auto sample = algorithm->choose_nodes(rpclb::MemberSnapshot{}, 2, {});
    BOOST_TEST_REQUIRE(!sample.has_value());
    BOOST_TEST((sample.error().code == rpclb::ErrorCode::service_unavailable));
}

BOOST_AUTO_TEST_CASE(init_negative_weight_throws_naming_weights) {
    require_init_rejected(R"({"weights": {"a": 2, "b": -1}})", "\"b\"");
}

BOOST_AUTO_TEST_CASE(init_non_integer_weight_throws_naming_weights) {
    require_init_rejected(R"({"weights": {"a": 1.5}})", "\"a\"");
    require_init_rejected(R"({"weights": {"a": "3"}})", "\"a\"");
    require_init_rejected(R"({"weights": {"a": true}})", "\"a\"");
    require_init_rejected(R"({"weights": {"a": null}})", "\"a\"");
}

BOOST_AUTO_TEST_CASE(init_all_zero_weights_throws_naming_weights) {
    require_init_rejected(R"({"weights": {"a": 0, "b": 0}})", "0");
}

BOOST_AUTO_TEST_CASE(init_weights_not_an_object_throws_naming_weights) {
    require_init_rejected(R"({"weights": [3, 1]})", "object");
    require_init_rejected(R"({"weights": 3})", "object");
}

BOOST_AUTO_TEST_CASE(init_weight_above_limit_throws_naming_weights) {
    require_init_rejected(R"({"weights": {"a": 1000001}})", "1000000");
}

BOOST_AUTO_TEST_CASE(pick_huge_coprime_weights_keeps_approximate_proportions) {
    // Period 1,000,000 + 999,999 is scaled down to about 65,536 picks.
    auto algorithm = load(R"({"weights": {"a": 1000000, "b": 999999}})");
    const auto counts = tally(picks(*algorithm, ab, 65'536));
    BOOST_TEST(std::abs(counts.at("a") - 32'768) <= 2);
    BOOST_TEST(std::abs(counts.at("b") - 32'768) <= 2);
}

BOOST_AUTO_TEST_CASE(choose_nodes_returns_distinct_members) {
    auto algorithm = load(R"({"weights": {"a": 3}})");
    auto sample = algorithm->choose_nodes(abc, 2, {});
    BOOST_TEST_REQUIRE(sample.has_value());
    BOOST_TEST_REQUIRE(sample->size() == 2u);
    BOOST_TEST((*sample)[0] != (*sample)[1]);
}

// ---- "weights": "reported" -----------------------------------------------------------------

// Stores a report for `node` as a connection that received it would (busy in thousandths).
std::shared_ptr<rpclb::NodeLoad> report(const std::string& node, std::uint32_t busy, std::uint32_t queue = 0,
                                        double application = 0.0) {
    auto record = rpclb::NodeLoads::instance().of(node);
    record->store(busy, queue, application, rpclb::load_clock_ms());
    return record;
}

BOOST_AUTO_TEST_CASE(pick_reported_weights_shift_share_away_from_a_loaded_member) {
    const rpclb::MemberSnapshot members{{"rep_a", "rep_b", "rep_c"}, 40};
    // Held for the test: a record lives while someone holds it.
    auto a = report("rep_a", 900), b = report("rep_b", 100), c = report("rep_c", 100);
    auto algorithm = load(R"({"weights": "reported"})");
    auto counts = tally(picks(*algorithm, members, 1900));
    // Weights 1/0.9 : 1/0.1 : 1/0.1 = 1 : 9 : 9 of 19.
    BOOST_TEST(std::abs(counts["rep_a"] - 100) <= 3, counts["rep_a"]);
    BOOST_TEST(std::abs(counts["rep_b"] - 900) <= 3);
    BOOST_TEST(std::abs(counts["rep_c"] - 900) <= 3);

    // A step change shows in the very next picks, on the same snapshot.
    a->store(100, 0, 0.0, rpclb::load_clock_ms());
    b->store(900, 0, 0.0, rpclb::load_clock_ms());
    counts = tally(picks(*algorithm, members, 1900));
    BOOST_TEST(std::abs(counts["rep_a"] - 900) <= 3);
    BOOST_TEST(std::abs(counts["rep_b"] - 100) <= 3, counts["rep_b"]);

    // The application's number wins over the busy share; a queue weighs as a busy pool.
    a->store(100, 0, 4.0, rpclb::load_clock_ms());  // utilization 4
    b->store(0, 3, 0.0, rpclb::load_clock_ms());    // utilization 0 + 3
    c->store(1000, 0, 0.0, rpclb::load_clock_ms()); // utilization 1
    counts = tally(picks(*algorithm, members, 1900));  // 1/4 : 1/3 : 1 = 3 : 4 : 12 of 19
    BOOST_TEST(std::abs(counts["rep_a"] - 300) <= 3);
    BOOST_TEST(std::abs(counts["rep_b"] - 400) <= 3);
    BOOST_TEST(std::abs(counts["rep_c"] - 1200) <= 3);
}

BOOST_AUTO_TEST_CASE(pick_reported_weights_interleave_evenly) {
    const rpclb::MemberSnapshot members{{"even_a", "even_b"}, 41};
    auto a = report("even_a", 500), b = report("even_b", 500);
    auto algorithm = load(R"({"weights": "reported"})");
    // Equal weights: never more than two picks of one member in a row.
    const auto picked = picks(*algorithm, members, 200);
    int run = 1;
    for (std::size_t i = 1; i < picked.size(); ++i) {
        run = picked[i] == picked[i - 1] ? run + 1 : 1;
        BOOST_TEST(run <= 2);
    }
}

BOOST_AUTO_TEST_CASE(pick_reported_unknown_members_weigh_the_mean) {
    const rpclb::MemberSnapshot members{{"unk_a", "unk_b", "unk_c"}, 42};
    auto a = report("unk_a", 250), b = report("unk_b", 500);  // weights 4 and 2
    auto c = rpclb::NodeLoads::instance().of("unk_c");       // no report: weighs 3
    auto algorithm = load(R"({"weights": "reported"})");
    auto counts = tally(picks(*algorithm, members, 900));
    BOOST_TEST(std::abs(counts["unk_a"] - 400) <= 3);
    BOOST_TEST(std::abs(counts["unk_b"] - 200) <= 3);
    BOOST_TEST(std::abs(counts["unk_c"] - 300) <= 3);

    // A report older than load_max_age_ms is unknown too; a malformed one (forget()).
    b->forget();
    c->store(500, 0, 0.0, rpclb::load_clock_ms() - 60'000);  // a minute old
    auto aged = load(R"({"weights": "reported", "load_max_age_ms": 1000})");
    counts = tally(picks(*aged, members, 900));  // only a is known: everyone weighs 4
    BOOST_TEST(std::abs(counts["unk_a"] - 300) <= 3);
    BOOST_TEST(std::abs(counts["unk_c"] - 300) <= 3);

    // No member known: plain rotation.
    a->forget();
    counts = tally(picks(*aged, members, 900));
    BOOST_TEST(std::abs(counts["unk_b"] - 300) <= 3);
}

BOOST_AUTO_TEST_CASE(pick_reported_weights_penalise_a_member_whose_calls_fail) {
    const rpclb::MemberSnapshot members{{"err_a", "err_b"}, 43};
    auto a = report("err_a", 500), b = report("err_b", 500);  // both weigh 2
    auto algorithm = load(R"({"weights": "reported"})");
    auto counts = tally(picks(*algorithm, members, 200));
    BOOST_TEST(std::abs(counts["err_a"] - 100) <= 3);

    // err_a fails fast (its report stays low); 30 failures take its error rate to about
    // 0.96: weight 1 / (0.5 + 0.96) ≈ 0.69 against 2.
    const rpclb::CallOutcome failed{rpclb::ErrorCode::internal_server_error, rpclb::ErrorOrigin::remote, {}};
    for (int i = 0; i < 30; ++i) algorithm->release(members, 0, failed);
    counts = tally(picks(*algorithm, members, 2690));
    BOOST_TEST(std::abs(counts["err_a"] - 690) <= 10, counts["err_a"]);
    // Successes bring it back.
    for (int i = 0; i < 100; ++i) algorithm->release(members, 0, rpclb::CallOutcome{});
    counts = tally(picks(*algorithm, members, 200));
    BOOST_TEST(std::abs(counts["err_a"] - 100) <= 3, counts["err_a"]);

    // error_penalty 0: failures do not count.
    auto lenient = load(R"({"weights": "reported", "error_penalty": 0})");
    for (int i = 0; i < 30; ++i) lenient->release(members, 0, failed);
    counts = tally(picks(*lenient, members, 200));
    BOOST_TEST(std::abs(counts["err_a"] - 100) <= 3, counts["err_a"]);
}

BOOST_AUTO_TEST_CASE(pick_reported_weights_multiply_by_each_members_share_of_the_successes) {
    const rpclb::MemberSnapshot members{{"rate_a", "rate_b"}, 44};
    auto a = report("rate_a", 250), b = report("rate_b", 500);
    auto algorithm = load(R"({"weights": "reported"})");
    // No window closed yet: weights 1/0.25 : 1/0.5 = 2 : 1.
    auto counts = tally(picks(*algorithm, members, 300));
    BOOST_TEST(std::abs(counts["rate_a"] - 200) <= 3, counts["rate_a"]);

    // One window of 100 × 2 successes, 150 from rate_a: shares 0.75 and 0.25, weights
    // 0.75/0.25 : 0.25/0.5 = 6 : 1. The same utilization at three times the rate means
    // three times the capacity.
    const auto succeed = [&](std::size_t index, int n) {
        for (int i = 0; i < n; ++i) algorithm->release(members, index, rpclb::CallOutcome{});
    };
    succeed(0, 150);
    succeed(1, 50);
    counts = tally(picks(*algorithm, members, 700));
    BOOST_TEST(std::abs(counts["rate_a"] - 600) <= 3, counts["rate_a"]);

    // The next window, half each, averages with the last: 0.625 and 0.375, weights
    // 2.5 : 0.75 = 10 : 3.
    succeed(0, 100);
    succeed(1, 100);
    counts = tally(picks(*algorithm, members, 1300));
    BOOST_TEST(std::abs(counts["rate_a"] - 1000) <= 3, counts["rate_a"]);
}

BOOST_AUTO_TEST_CASE(init_reported_options_throw_naming_the_option) {
    require_init_rejected(R"({"weights": "measured"})", "\"reported\"");
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("weighted_round_robin").value();
    for (const char* bad : {R"({"weights": "reported", "load_max_age_ms": 0})",
                            R"({"weights": "reported", "load_max_age_ms": "10"})",
                            R"({"weights": "reported", "load_max_age_ms": 3600001})",
                            R"({"load_max_age_ms": 100})"}) {
        try {
            algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(bad).as_object());
            BOOST_ERROR("init accepted " << bad);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).starts_with("load_max_age_ms"), e.what());
        }
    }
    for (const char* bad : {R"({"weights": "reported", "error_penalty": -1})",
                            R"({"weights": "reported", "error_penalty": 1001})",
                            R"({"weights": "reported", "error_penalty": "1"})",
                            R"({"error_penalty": 1})"}) {
        try {
            algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(bad).as_object());
            BOOST_ERROR("init accepted " << bad);
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(std::string(e.what()).starts_with("error_penalty"), e.what());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

// ---- power_of_two with "reported_load" ------------------------------------------------------

BOOST_AUTO_TEST_SUITE(power_of_two_reported)

using weighted_round_robin::report;

std::shared_ptr<rpclb::SelectionAlgorithm> load_p2c(std::string_view options_json) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("power_of_two");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({this_balancer(), "me@host", nullptr}, boost::json::parse(options_json).as_object());
    return *algorithm;
}

// Calls in flight from here are equal (none), so only the reports tell the members apart:
// the busier member is picked only when it is drawn against itself, never here with two
// members; without the option the pick is a coin toss.
BOOST_AUTO_TEST_CASE(pick_prefers_the_member_that_reports_less_load) {
    rpclb::MemberSnapshot members{{"p2c_a", "p2c_b"}, 60};
    members.count_calls();
    auto a = report("p2c_a", 900), b = report("p2c_b", 200);
    auto reported = load_p2c(R"({"reported_load": true, "seed": 7})");
    auto counts = tally(picks(*reported, members, 400));
    BOOST_TEST(counts["p2c_b"] == 400);
    // A step change shows at the next pick.
    a->store(100, 0, 0.0, rpclb::load_clock_ms());
    counts = tally(picks(*reported, members, 400));
    BOOST_TEST(counts["p2c_a"] == 400);
    // The application's number counts over the busy share.
    a->store(100, 0, 3.0, rpclb::load_clock_ms());
    counts = tally(picks(*reported, members, 400));
    BOOST_TEST(counts["p2c_b"] == 400);

    auto blind = load_p2c(R"({"seed": 7})");
    counts = tally(picks(*blind, members, 400));
    BOOST_TEST(counts["p2c_a"] > 100);
    BOOST_TEST(counts["p2c_b"] > 100);
}

// A member without a recent report is weighed by calls in flight, as without the option.
BOOST_AUTO_TEST_CASE(pick_without_a_report_falls_back_to_calls_in_flight) {
    rpclb::MemberSnapshot members{{"p2c_known", "p2c_silent"}, 61};
    members.count_calls();
    auto known = report("p2c_known", 900);
    members.calls[0]->acquire();  // one call in flight to p2c_known
    auto reported = load_p2c(R"({"reported_load": true, "seed": 3})");
    auto counts = tally(picks(*reported, members, 200));
    BOOST_TEST(counts["p2c_silent"] == 200);
}

BOOST_AUTO_TEST_CASE(init_rejects_bad_reported_load_options_naming_them) {
    for (const char* bad : {R"({"reported_load": 1})", R"({"reported_load": "yes"})",
                            R"({"reported_load": true, "load_max_age_ms": 0})",
                            R"({"load_max_age_ms": 1000})"}) {
        rpclb::PluginRegistry registry;
        auto algorithm = registry.create("power_of_two").value();
        try {
            algorithm->init({this_balancer(), "me@host", nullptr}, boost::json::parse(bad).as_object());
            BOOST_ERROR("init accepted " << bad);
        } catch (const std::invalid_argument& e) {
            const std::string message = e.what();
            BOOST_TEST_CONTEXT(message) {
                BOOST_TEST(message.starts_with("power_of_two: option"));
                BOOST_TEST((message.find("reported_load") != std::string::npos ||
                            message.find("load_max_age_ms") != std::string::npos));
            }
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
