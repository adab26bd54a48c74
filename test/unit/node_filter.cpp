// NodeFilter matching (predecessor-compatibility §4.3, §7 cases 1–5), node_match_list
// (§3.3) and the retry helper (§4.1, §7 cases 11–13).
#define BOOST_TEST_MODULE node_filter
#include <rpclb/node_filter.hpp>
#include <rpclb/retry.hpp>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <optional>
#include <regex>
#include <string>

using rpclb::NodeFilter;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(matching)

// Case 1.
BOOST_AUTO_TEST_CASE(a_substring_matches_anywhere_in_the_full_name) {
    BOOST_TEST(NodeFilter::substring("options_feed").matches("options_feed@host"));
    BOOST_TEST(NodeFilter::substring("options_feed").matches("options_feed_1@host"));
    BOOST_TEST(NodeFilter::substring("web").matches("cfx_web_2@host"));
    BOOST_TEST(!NodeFilter::substring("options_feed").matches("cfx_web@host"));
}

// Case 2.
BOOST_AUTO_TEST_CASE(a_regex_is_matched_against_the_full_name) {
    const auto filter = NodeFilter::regex("^options_feed@");
    BOOST_TEST(filter.matches("options_feed@host"));
    BOOST_TEST(!filter.matches("gamma_feed@host"));
    BOOST_TEST(!filter.matches("options_feed_kurt@localhost"));  // case 8
}

// Case 3.
BOOST_AUTO_TEST_CASE(an_excluded_pattern_in_the_short_name_rejects_the_node) {
    const std::vector<std::string> excluded{"_qa"};
    BOOST_TEST(!NodeFilter::substring("options_feed").matches("options_feed_qa@host", excluded));
    BOOST_TEST(!NodeFilter::substring("options_feed").matches("options_feed_qa_1@host", excluded));
}

// Case 4.
BOOST_AUTO_TEST_CASE(a_filter_naming_the_excluded_pattern_keeps_the_node) {
    const std::vector<std::string> excluded{"_qa"};
    BOOST_TEST(NodeFilter::substring("options_feed_qa").matches("options_feed_qa@host", excluded));
    BOOST_TEST(NodeFilter::regex("^options_feed_qa@").matches("options_feed_qa@host", excluded));
}

// Case 5.
BOOST_AUTO_TEST_CASE(nodes_without_the_excluded_pattern_still_match) {
    const std::vector<std::string> excluded{"_qa"};
    BOOST_TEST(NodeFilter::substring("options_feed").matches("options_feed@host", excluded));
    BOOST_TEST(NodeFilter::substring("options_feed").matches("options_feed_1@host", excluded));
}

BOOST_AUTO_TEST_CASE(the_host_part_never_triggers_an_exclusion) {
    BOOST_TEST(NodeFilter::substring("feed").matches("feed@qa_host", {"qa"}));
}

BOOST_AUTO_TEST_CASE(an_empty_substring_matches_every_node) {
    BOOST_TEST(NodeFilter::substring("").matches("anything@anywhere"));
}

BOOST_AUTO_TEST_CASE(the_textual_form_reads_slashes_as_a_regex) {
    BOOST_TEST(NodeFilter::parse("/^a@/").is_regex());
    BOOST_TEST(NodeFilter::parse("/^a@/").matches("a@h"));
    BOOST_TEST(!NodeFilter::parse("/^a@/").matches("ba@h"));
    BOOST_TEST(!NodeFilter::parse("a@").is_regex());
    BOOST_CHECK_THROW(NodeFilter::parse("/(/"), std::regex_error);
}

// A count too long for a long is undefined behaviour inside libstdc++'s regex compiler.
BOOST_AUTO_TEST_CASE(a_repetition_count_above_1000_is_refused_before_std_regex_reads_it) {
    BOOST_CHECK_THROW(NodeFilter::regex("a{99999999999999999999}"), std::regex_error);
    BOOST_CHECK_THROW(NodeFilter::regex("a{2,99999999999999999999}"), std::regex_error);
    BOOST_CHECK_THROW(NodeFilter::regex("(ab){1001}"), std::regex_error);
    BOOST_CHECK_THROW(NodeFilter::regex(std::string(1001, '(')), std::regex_error);
    BOOST_CHECK_THROW(NodeFilter::regex("(a)\\99999999999999999999"), std::regex_error);
    BOOST_TEST(NodeFilter::regex("^(a)\\1@").matches("aa@h"));
    BOOST_TEST(NodeFilter::regex("^a{2,1000}@").matches("aa@h"));
    BOOST_TEST(NodeFilter::regex("[{]99999").matches("{99999@h"));
    BOOST_TEST(NodeFilter::regex("\\{99999").matches("{99999@h"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(match_list)

// predecessor-compatibility §3.3.
BOOST_AUTO_TEST_CASE(all_joins_everywhere_a_list_needs_one_match_and_an_empty_list_none) {
    BOOST_TEST(rpclb::NodeMatchList{}.matches("x@h"));
    rpclb::NodeMatchList list{false, {NodeFilter::substring("web"), NodeFilter::regex("^db")}};
    BOOST_TEST(list.matches("cfx_web@h"));
    BOOST_TEST(list.matches("db_1@h"));
    BOOST_TEST(!list.matches("cache@h"));
    BOOST_TEST(!rpclb::NodeMatchList::none().matches("x@h"));
    BOOST_TEST(!list.matches("web_qa@h", {"_qa"}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(retry)

// Case 11.
BOOST_AUTO_TEST_CASE(a_value_at_the_first_attempt_is_returned_after_one_call) {
    int calls = 0;
    auto r = rpclb::with_retry(rpclb::RetryPolicy{true, 3, 0ms}, [&]() -> std::optional<std::string> {
        ++calls;
        return "done";
    });
    BOOST_TEST(r.value() == "done");
    BOOST_TEST(calls == 1);
}

// Case 12.
BOOST_AUTO_TEST_CASE(retries_until_a_value_comes) {
    int calls = 0;
    auto r = rpclb::with_retry(rpclb::RetryPolicy{true, 5, 1ms}, [&]() -> std::optional<std::string> {
        return ++calls < 3 ? std::nullopt : std::optional<std::string>("done");
    });
    BOOST_TEST(r.value() == "done");
    BOOST_TEST(calls == 3);
}

// Case 13: total attempts = retry_count + 1.
BOOST_AUTO_TEST_CASE(gives_up_after_count_retries) {
    int calls = 0;
    auto r = rpclb::with_retry(rpclb::RetryPolicy{true, 2, 1ms}, [&]() -> std::optional<int> {
        ++calls;
        return std::nullopt;
    });
    BOOST_TEST(!r.has_value());
    BOOST_TEST(calls == 3);
}

BOOST_AUTO_TEST_CASE(retry_off_makes_exactly_one_attempt_even_when_unlimited) {
    int calls = 0;
    auto r = rpclb::with_retry(rpclb::RetryPolicy{false, rpclb::unlimited_retries, 1ms},
                               [&]() -> std::optional<int> {
                                   ++calls;
                                   return std::nullopt;
                               });
    BOOST_TEST(!r.has_value());
    BOOST_TEST(calls == 1);
}

BOOST_AUTO_TEST_CASE(unlimited_retries_never_run_out) {
    rpclb::RetryPolicy policy{true, rpclb::unlimited_retries, 0ms};
    for (int i = 0; i < 1000; ++i) BOOST_TEST_REQUIRE(policy.consume());
    BOOST_TEST(policy.count == rpclb::unlimited_retries);
}

BOOST_AUTO_TEST_SUITE_END()
