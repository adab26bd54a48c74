// The token budget of a balancer's hedges (routing/hedge_budget.hpp), on explicit times.
#define BOOST_TEST_MODULE hedge_budget
#include <boost/test/unit_test.hpp>

#include "routing/hedge_budget.hpp"

#include <chrono>

using namespace std::chrono_literals;
using rpclb::detail::HedgeBudget;

namespace {
const HedgeBudget::time_point t0 = HedgeBudget::time_point{} + 1000s;

// Extra attempts granted when each of `calls` calls at `at` asks for one.
int granted(HedgeBudget& budget, int calls, HedgeBudget::time_point at) {
    int n = 0;
    for (int i = 0; i < calls; ++i) {
        budget.deposit(at);
        n += budget.take(at) ? 1 : 0;
    }
    return n;
}
}  // namespace

BOOST_AUTO_TEST_CASE(starts_full_then_holds_extra_attempts_to_five_percent_of_calls) {
    HedgeBudget budget;
    // The first calls spend what the bucket holds (10), and what they deposit (0.05 each).
    BOOST_TEST(granted(budget, 10, t0) == 10);
    BOOST_TEST(granted(budget, 10, t0) == 0);
    // At one instant no time adds tokens: 1,000 calls deposit 50 (49 when the sum of
    // 0.05s rounds just under a whole token).
    const int n = granted(budget, 1000, t0);
    BOOST_TEST((n == 49 || n == 50), n);
}

BOOST_AUTO_TEST_CASE(time_adds_the_floor_up_to_the_capacity) {
    HedgeBudget budget;
    BOOST_TEST(granted(budget, 20, t0) == 10);  // 10 held; 0.95 deposited (one lost to the cap)
    // The next 3 s top the calls' 1.0 token up to 3: 2 more (with the 0.95 left, 2 takes).
    BOOST_TEST(budget.take(t0 + 3s));
    BOOST_TEST(budget.take(t0 + 3s));
    BOOST_TEST(!budget.take(t0 + 3s));
    // With no calls, 3 s add 3 tokens.
    BOOST_TEST(budget.take(t0 + 6s));
    BOOST_TEST(budget.take(t0 + 6s));
    BOOST_TEST(budget.take(t0 + 6s));
    BOOST_TEST(!budget.take(t0 + 6s));
    // An hour adds no more than the capacity.
    int n = 0;
    while (budget.take(t0 + 3600s)) ++n;
    BOOST_TEST(n == 10);
    // A time earlier than the last one adds nothing.
    BOOST_TEST(!budget.take(t0));
}

BOOST_AUTO_TEST_CASE(the_floor_is_a_minimum_not_added_to_the_percentage) {
    // 100 calls a second for 10 s deposit 5 tokens a second: the floor of 1 a second adds
    // nothing, so about 50 extra attempts go out, not 60.
    HedgeBudget budget;
    BOOST_TEST(granted(budget, 10, t0) == 10);  // empties the bucket
    int n = 0;
    for (int i = 1; i <= 1000; ++i) n += granted(budget, 1, t0 + i * 10ms);
    BOOST_TEST((n >= 49 && n <= 51), n);
}

BOOST_AUTO_TEST_CASE(few_calls_get_the_floor_and_configure_sets_both_rates) {
    HedgeBudget budget;
    budget.configure(20.0, 0.5);
    BOOST_TEST(granted(budget, 10, t0) == 10);
    // One call every 4 s: each interval tops up to 2 tokens (0.5 a second), more than the
    // call's 0.2, so every call may send an extra attempt.
    int n = 0;
    for (int i = 1; i <= 10; ++i) n += granted(budget, 1, t0 + i * 4s);
    BOOST_TEST(n == 10);
}

BOOST_AUTO_TEST_CASE(a_budget_of_nothing_grants_nothing_though_the_bucket_starts_full) {
    HedgeBudget none;
    none.configure(0.0, 0.0);
    BOOST_TEST(granted(none, 10, t0) == 0);
    BOOST_TEST(granted(none, 100, t0 + 1h) == 0);
    // Set to nothing after it held tokens: none of them is spent.
    HedgeBudget later;
    later.configure(0.0, 0.0);
    later.configure(5.0, 1.0);
    BOOST_TEST(granted(later, 1, t0) == 1);
    later.configure(0.0, 0.0);
    BOOST_TEST(granted(later, 10, t0) == 0);
}
