// The gray bench's injected behaviour (behaviour.hpp) and client loops (load.hpp): what its
// figures rest on. Real threads and real time: a Member's waits are sleeps by design, so the
// checks are lower bounds on elapsed time (a loaded machine only makes them later) and
// upper bounds an order of magnitude away from what they tell apart.
#define BOOST_TEST_MODULE gray_behaviour
#include <boost/test/unit_test.hpp>

#include "behaviour.hpp"
#include "load.hpp"

#include <atomic>
#include <future>
#include <thread>

using namespace std::chrono_literals;
using gray::Behaviour;
using gray::Clock;
using gray::Member;

namespace {

Behaviour fixed(double ms, int capacity = 0) {
    Behaviour b;
    b.service_ms = ms;
    b.capacity = capacity;
    return b;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

const auto far = Clock::now() + 1h;

}  // namespace

BOOST_AUTO_TEST_SUITE(gray_behaviour)

BOOST_AUTO_TEST_CASE(text_round_trip) {
    Behaviour b;
    b.service_ms = 7.5;
    b.exponential = true;
    b.pause_every_s = 3;
    b.pause_ms = 300;
    b.fail_rate = 0.25;
    b.capacity = 4;
    b.cold_s = 2;
    b.cold_factor = 10;
    b.stall_rate = 0.01;
    b.stall_ms = 20;
    b.extra_ms = 1.5;
    const auto c = Behaviour::from_text(b.to_text());
    BOOST_TEST(c.to_text() == b.to_text());
    BOOST_TEST(c.capacity == 4);
    BOOST_TEST(c.exponential);
    BOOST_CHECK_THROW(Behaviour::from_text("nosuch=1"), std::runtime_error);
    BOOST_CHECK_THROW(Behaviour::from_text("service_ms=x"), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(capacity_queues_the_second_call) {
    Member m(fixed(100, 1), 1);
    const auto t0 = Clock::now();
    auto first = std::async(std::launch::async, [&] { return m.serve(far); });
    auto second = std::async(std::launch::async, [&] { return m.serve(far); });
    BOOST_TEST(first.get().ok);
    BOOST_TEST(second.get().ok);
    // One slot: the two 100 ms services ran one after the other.
    BOOST_TEST(ms_since(t0) >= 200);
}

BOOST_AUTO_TEST_CASE(a_call_queued_past_its_deadline_leaves_unserved) {
    Member m(fixed(1000, 1), 1);
    // Whichever call gets the slot first, the other one waits for it and, with a 100 ms
    // deadline, expires unserved long before the 1 s service ends.
    const auto deadline = Clock::now() + 100ms;
    auto holder = std::async(std::launch::async, [&] { return m.serve(deadline); });
    auto other = std::async(std::launch::async, [&] { return m.serve(deadline); });
    const auto a = holder.get(), b = other.get();
    BOOST_TEST(a.expired + b.expired == 1);
    const auto& expired = a.expired ? a : b;
    BOOST_TEST(!expired.ok);
    BOOST_TEST(expired.service_us == 0);
}

BOOST_AUTO_TEST_CASE(a_call_past_its_deadline_on_arrival_is_dropped) {
    Member m(fixed(500), 1);
    const auto t0 = Clock::now();
    const auto s = m.serve(Clock::now() - 1ms);
    BOOST_TEST(s.expired);
    BOOST_TEST(ms_since(t0) < 250);
}

BOOST_AUTO_TEST_CASE(failure_answers_at_once) {
    auto b = fixed(1000);
    b.fail_rate = 1;
    Member m(b, 1);
    const auto t0 = Clock::now();
    const auto s = m.serve(far);
    BOOST_TEST(!s.ok);
    BOOST_TEST(!s.expired);
    BOOST_TEST(ms_since(t0) < 500);
}

BOOST_AUTO_TEST_CASE(a_call_during_a_pause_waits_for_its_end) {
    // Paused during the last 200 ms of every 400 ms, from the member's start.
    auto b = fixed(1);
    b.pause_every_s = 0.4;
    b.pause_ms = 200;
    const auto t0 = Clock::now();
    Member m(b, 1);
    std::this_thread::sleep_until(t0 + 250ms);  // into the first pause
    BOOST_TEST(m.serve(far).ok);
    BOOST_TEST(ms_since(t0) >= 400);
}

BOOST_AUTO_TEST_CASE(a_cold_member_is_slower_for_its_first_seconds) {
    auto b = fixed(10);
    b.cold_s = 0.3;
    b.cold_factor = 10;
    const auto t0 = Clock::now();
    Member m(b, 1);
    BOOST_TEST(m.serve(far).service_us >= 100000);
    std::this_thread::sleep_until(t0 + 350ms);
    BOOST_TEST(m.serve(far).service_us < 100000);
}

BOOST_AUTO_TEST_CASE(stats_are_nearest_rank) {
    std::vector<gray::Sample> samples;
    for (int i = 1000; i >= 1; --i) samples.push_back({0, i, {}});
    samples[0].reply.ok = true;
    const auto s = gray::stats_of(samples);
    BOOST_TEST(s.calls == 1000u);
    BOOST_TEST(s.errors == 999u);
    BOOST_TEST(s.p50 == 500);
    BOOST_TEST(s.p99 == 990);
    BOOST_TEST(s.p999 == 999);
    BOOST_TEST(s.max == 1000);
}

namespace {
/// Completes every call after `delay` on a thread of its own; the first call() itself
/// blocks for `first_block` (a client that stalls).
class DelayTarget final : public gray::Target {
public:
    DelayTarget(std::chrono::milliseconds delay, std::chrono::milliseconds first_block)
        : delay_(delay), first_block_(first_block) {}
    void call(std::chrono::milliseconds, std::function<void(gray::Reply)> done) override {
        if (!blocked_.exchange(true)) std::this_thread::sleep_for(first_block_);
        std::thread([d = delay_, done = std::move(done)] {
            std::this_thread::sleep_for(d);
            done({true, 0, 0});
        }).detach();
    }

private:
    std::chrono::milliseconds delay_, first_block_;
    std::atomic<bool> blocked_{false};
};
}  // namespace

BOOST_AUTO_TEST_CASE(open_loop_counts_from_the_intended_send_time) {
    // 100 calls/s for 300 ms; the first call() stalls the client for 100 ms, so the calls
    // meant for 10, 20, ... 90 ms go out late, and that lateness is in their latency.
    DelayTarget target(5ms, 100ms);
    const auto samples = gray::open_loop(target, 100, 300ms, 1000ms);
    BOOST_TEST(samples.size() == 30u);
    for (const auto& s : samples) {
        BOOST_TEST(s.latency_us >= 5000);
        if (s.at_s > 0.005 && s.at_s < 0.05) BOOST_TEST(s.latency_us >= 50000);
    }
}

BOOST_AUTO_TEST_CASE(closed_loop_keeps_its_calls_in_flight) {
    DelayTarget target(10ms, 0ms);
    const auto samples = gray::closed_loop(target, 4, 200ms, 1000ms);
    // 4 chains of 10 ms calls for 200 ms: about 80 calls, never more than 4 x 21.
    BOOST_TEST(samples.size() >= 8u);
    BOOST_TEST(samples.size() <= 84u);
    for (const auto& s : samples) BOOST_TEST(s.latency_us >= 10000);
}

BOOST_AUTO_TEST_SUITE_END()
