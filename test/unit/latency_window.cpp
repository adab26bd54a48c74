// The streaming quantile behind hedging's default delay (routing/latency_window.hpp).
#define BOOST_TEST_MODULE latency_window
#include <boost/test/unit_test.hpp>

#include "routing/latency_window.hpp"

#include <chrono>

using namespace std::chrono_literals;
using rpclb::detail::LatencyWindow;

BOOST_AUTO_TEST_CASE(a_quantile_is_its_buckets_bound_within_one_bucket) {
    LatencyWindow w;
    BOOST_TEST(!w.quantile(0.95));
    // 95 calls of 1 ms and 5 of 50 ms: the p95 is 1 ms, the p99 50 ms.
    for (int i = 0; i < 95; ++i) w.add(1000us);
    for (int i = 0; i < 5; ++i) w.add(50ms);
    const auto p95 = w.quantile(0.95).value();
    BOOST_TEST(p95.count() >= 1000);
    BOOST_TEST(p95.count() <= 1190);
    const auto p99 = w.quantile(0.99).value();
    BOOST_TEST(p99.count() >= 50'000);
    BOOST_TEST(p99.count() <= 59'500);
    // Fewer than 20 counted: no answer.
    LatencyWindow few;
    for (int i = 0; i < 19; ++i) few.add(1ms);
    BOOST_TEST(!few.quantile(0.5));
    few.add(1ms);
    BOOST_TEST(few.quantile(0.5).has_value());
}

BOOST_AUTO_TEST_CASE(recent_latencies_outweigh_old_ones) {
    LatencyWindow w;
    for (int i = 0; i < 999; ++i) w.add(100ms);
    BOOST_TEST(w.quantile(0.5).value().count() >= 100'000);
    // Every 1,000th halves the counts: after 6,000 fast calls (six halvings) the 999 old
    // ones count 7 against 984.
    for (int i = 0; i < 6001; ++i) w.add(2ms);
    const auto p95 = w.quantile(0.95).value();
    BOOST_TEST(p95.count() < 3000, p95.count());
}

BOOST_AUTO_TEST_CASE(the_buckets_span_microseconds_to_hours) {
    BOOST_TEST(LatencyWindow::bucket_of(0us) == 0u);
    BOOST_TEST(LatencyWindow::bucket_of(std::chrono::hours(5)) == LatencyWindow::buckets - 1);
    for (std::chrono::microseconds t : {3us, 700us, 45'000us, 2'000'000us}) {
        const auto b = LatencyWindow::bucket_of(t);
        BOOST_TEST(LatencyWindow::upper_bound(b) >= t);
        BOOST_TEST(LatencyWindow::upper_bound(b).count() <= t.count() * 1.19 + 1);
    }
}
