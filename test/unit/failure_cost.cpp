// The failure rule and the decaying failure load of the load-aware plugins
// (plugins/failure_cost.hpp; doc/reference/algorithms.md, "Failures"), on explicit times.
#define BOOST_TEST_MODULE failure_cost
#include <boost/test/unit_test.hpp>

#include "../../plugins/failure_cost.hpp"

#include <boost/json/parse.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

using rpclb::ErrorCode;
using rpclb::ErrorOrigin;

rpclb::CallOutcome outcome(std::optional<ErrorCode> code, ErrorOrigin origin) {
    rpclb::CallOutcome o;
    o.error = code;
    o.origin = origin;
    return o;
}

constexpr double penalty_ns = 1e9;  // failure_penalty 1,000 ms
constexpr std::int64_t t0 = 5'000'000'000;

}  // namespace

BOOST_AUTO_TEST_SUITE(failure_cost)

BOOST_AUTO_TEST_CASE(counted_failure_is_a_member_that_could_not_serve) {
    using rpclb::plugins::counted_failure;
    BOOST_TEST(counted_failure(outcome(ErrorCode::internal_server_error, ErrorOrigin::remote)));
    BOOST_TEST(counted_failure(outcome(ErrorCode::service_unavailable, ErrorOrigin::remote)));
    BOOST_TEST(counted_failure(outcome(ErrorCode::service_unavailable, ErrorOrigin::local)));
    BOOST_TEST(counted_failure(outcome(ErrorCode::request_timeout, ErrorOrigin::local)));

    BOOST_TEST(!counted_failure(outcome(std::nullopt, ErrorOrigin::none)));
    BOOST_TEST(!counted_failure(outcome(ErrorCode::service_unavailable, ErrorOrigin::none)));  // draining
    BOOST_TEST(!counted_failure(outcome(ErrorCode::bad_request, ErrorOrigin::remote)));
    BOOST_TEST(!counted_failure(outcome(ErrorCode::not_found, ErrorOrigin::remote)));
    BOOST_TEST(!counted_failure(outcome(ErrorCode::bad_request, ErrorOrigin::local)));
    BOOST_TEST(!counted_failure(outcome(ErrorCode::not_found, ErrorOrigin::local)));
    // A member's own request_timeout answer is the handler's error, passed through.
    BOOST_TEST(!counted_failure(outcome(ErrorCode::request_timeout, ErrorOrigin::remote)));
}

BOOST_AUTO_TEST_CASE(failure_load_rises_by_one_and_decays_exponentially) {
    rpclb::plugins::FailureLoad member;
    BOOST_TEST(member.value(t0, penalty_ns) == 0.0);
    member.add(t0, penalty_ns);
    BOOST_TEST(member.value(t0, penalty_ns) == 1.0);
    BOOST_TEST(member.value(t0 + 1'000'000'000, penalty_ns) == std::exp(-1.0), boost::test_tools::tolerance(1e-12));
    BOOST_TEST(member.value(t0 + 3'000'000'000, penalty_ns) == std::exp(-3.0), boost::test_tools::tolerance(1e-12));
    // A second failure a penalty later: the first, decayed, plus one.
    member.add(t0 + 1'000'000'000, penalty_ns);
    BOOST_TEST(member.value(t0 + 1'000'000'000, penalty_ns) == 1 + std::exp(-1.0),
               boost::test_tools::tolerance(1e-12));
    BOOST_TEST(member.value(t0 + 2'000'000'000, penalty_ns) == (1 + std::exp(-1.0)) * std::exp(-1.0),
               boost::test_tools::tolerance(1e-12));
    // Ten failures at once weigh ten calls in flight.
    rpclb::plugins::FailureLoad burst;
    for (int i = 0; i < 10; ++i) burst.add(t0, penalty_ns);
    BOOST_TEST(burst.value(t0, penalty_ns) == 10.0);
    // A clock read before the last failure (another thread's, a little behind) sees no decay.
    BOOST_TEST(burst.value(t0 - 1'000, penalty_ns) == 10.0);
}

BOOST_AUTO_TEST_CASE(failure_loads_read_failure_penalty_and_refuse_bad_values_naming_it) {
    rpclb::plugins::FailureLoads loads;
    loads.init(boost::json::object{}, "x");
    BOOST_TEST(loads.on());
    loads.init(boost::json::parse(R"({"failure_penalty": 0})").as_object(), "x");
    BOOST_TEST(!loads.on());
    for (const std::string bad : {R"({"failure_penalty": -1})", R"({"failure_penalty": 2.5})",
                                  R"({"failure_penalty": "1000"})", R"({"test_now_ms": 0})"}) {
        BOOST_TEST_CONTEXT(bad) {
            try {
                loads.init(boost::json::parse(bad).as_object(), "x");
                BOOST_ERROR("accepted");
            } catch (const std::invalid_argument& e) {
                const std::string key = boost::json::parse(bad).as_object().begin()->key();
                BOOST_TEST(std::string(e.what()).starts_with("x: option " + key + " "), e.what());
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(failure_loads_decay_on_their_clock_and_go_quiet_after_40_penalties) {
    // The clock is frozen by `test_now_ms`; init again moves it (the table stays).
    rpclb::plugins::FailureLoads loads;
    const auto at = [&](std::int64_t ms) {
        loads.init(boost::json::object{{"failure_penalty", 1'000}, {"test_now_ms", ms}}, "x");
    };
    rpclb::MemberSnapshot members({"a", "b"}, 1);
    const std::uint64_t owner = rpclb::new_snapshot_owner();
    at(10'000);
    std::int64_t now = 0;
    BOOST_TEST(!loads.recent(now));  // no failure yet: no clock read either
    BOOST_TEST(now == 0);
    loads.record(members, owner, 0, outcome(ErrorCode::bad_request, ErrorOrigin::remote));
    BOOST_TEST(!loads.recent(now));
    loads.record(members, owner, 0, outcome(ErrorCode::internal_server_error, ErrorOrigin::remote));
    BOOST_TEST(loads.recent(now));
    BOOST_TEST(loads.load_of("a") == 1.0);
    BOOST_TEST(loads.load_of("b") == 0.0);
    at(12'000);
    BOOST_TEST(loads.load_of("a") == std::exp(-2.0), boost::test_tools::tolerance(1e-12));
    BOOST_TEST(loads.load(*loads.row(members, owner)[0], 12'000'000'000) == std::exp(-2.0),
               boost::test_tools::tolerance(1e-12));
    at(10'000 + 39'999);
    BOOST_TEST(loads.recent(now));
    at(10'000 + 40'000);
    BOOST_TEST(!loads.recent(now));
    // failure_penalty 0: nothing is recorded.
    loads.init(boost::json::object{{"failure_penalty", 0}, {"test_now_ms", 60'000}}, "x");
    loads.record(members, owner, 1, outcome(ErrorCode::internal_server_error, ErrorOrigin::remote));
    BOOST_TEST(loads.load_of("b") == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
