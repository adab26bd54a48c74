// PauseWatch (membership/pause_watch.hpp): a node tells its own pause from its peers'
// silence by its timer's lateness, and says so once per pause. Virtual times.
#define BOOST_TEST_MODULE pause_watch
#include <boost/test/unit_test.hpp>

#include "membership/pause_watch.hpp"

using namespace std::chrono_literals;
using rpclb::detail::PauseWatch;
using Clock = PauseWatch::Clock;

namespace {
const Clock::time_point t0 = Clock::time_point{} + 1000s;
}

BOOST_AUTO_TEST_CASE(a_timer_on_time_is_no_pause) {
    PauseWatch w(1s, 3s);
    BOOST_TEST(!w.paused(t0).has_value());  // never armed
    w.armed(t0 + 1s);
    BOOST_TEST(!w.paused(t0 + 1500ms).has_value());  // late by less than the threshold
    w.woke(t0 + 1100ms);
    w.armed(t0 + 2s);
    BOOST_TEST(!w.paused(t0 + 2100ms).has_value());
    w.armed({});  // not armed (no member to probe): no lateness at all
    BOOST_TEST(!w.paused(t0 + 60s).has_value());
    w.armed(Clock::time_point::min());  // due at once: no instant to be late for
    w.woke(t0 + 61s);
    BOOST_TEST(!w.paused(t0 + 61s).has_value());
}

BOOST_AUTO_TEST_CASE(an_overdue_timer_is_a_pause_as_long_as_it_is_overdue) {
    PauseWatch w(1s, 3s);
    w.armed(t0 + 1s);
    // A link times out before the late timer has run: the timer's lateness is the pause.
    const auto p = w.paused(t0 + 9s);
    BOOST_REQUIRE(p.has_value());
    BOOST_TEST((*p == 8s));
}

BOOST_AUTO_TEST_CASE(a_late_wake_up_is_a_pause_for_the_window_after_it) {
    PauseWatch w(1s, 3s);
    w.armed(t0 + 1s);
    w.woke(t0 + 9s);  // the timer ran first
    w.armed(t0 + 10s);
    auto p = w.paused(t0 + 9s + 10ms);
    BOOST_REQUIRE(p.has_value());
    BOOST_TEST((*p == 8s));
    BOOST_TEST(w.paused(t0 + 9s + 2900ms).has_value());
    w.woke(t0 + 10s);  // on time again
    w.armed(t0 + 12s);
    BOOST_TEST(!w.paused(t0 + 12s + 100ms).has_value());  // the window is over
}

BOOST_AUTO_TEST_CASE(each_pause_is_reported_once) {
    PauseWatch w(1s, 3s);
    BOOST_TEST(w.first_report(t0));
    BOOST_TEST(!w.first_report(t0 + 1ms));  // the second link of the same pause
    BOOST_TEST(!w.first_report(t0 + 2s));
    BOOST_TEST(w.first_report(t0 + 10s));  // a later pause
}
