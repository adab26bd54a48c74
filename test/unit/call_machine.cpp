// The rules of one call (routing/call_machine.hpp), one test per rule, fed canned events
// on a virtual clock.
#define BOOST_TEST_MODULE call_machine
#include <boost/test/unit_test.hpp>

#include "routing/call_machine.hpp"

#include <chrono>
#include <map>
#include <random>
#include <set>

using namespace std::chrono_literals;
using rpclb::ErrorCode;
using rpclb::ErrorOrigin;
using rpclb::Failure;
using rpclb::detail::CallMachine;
using rpclb::detail::RequestOutcome;

namespace {
using Clock = CallMachine::Clock;
using Actions = CallMachine::Actions;
const Clock::time_point t0 = Clock::time_point{} + 1000s;

CallMachine::Config balanced() {
    CallMachine::Config c;
    c.self = "a@h";
    c.module = "m";
    c.function = "f";
    c.timeout = 1000ms;
    c.load_balancer = "lb";
    c.balanced = true;
    c.retry = rpclb::RetryPolicy{true, 5, 100ms};
    return c;
}

CallMachine::Config hedged(std::chrono::milliseconds delay = 20ms, int attempts = 2) {
    auto c = balanced();
    c.idempotent = true;
    c.hedging = rpclb::Hedging{delay, attempts};
    return c;
}

CallMachine::Picked member(std::string name, std::size_t members = 3) {
    return {.member = std::move(name), .repickable = true, .members = members};
}

template <class T>
const T& at(const Actions& actions, std::size_t i) {
    BOOST_REQUIRE_MESSAGE(i < actions.size(), "no action " << i << " of " << actions.size());
    BOOST_REQUIRE_MESSAGE(std::holds_alternative<T>(actions[i]), "action " << i << " is of another kind");
    return std::get<T>(actions[i]);
}

RequestOutcome ok(int v) { return RequestOutcome(rpclb::CallResult(boost::json::value(v))); }
RequestOutcome failed(ErrorCode code, std::string message = "no") {
    return RequestOutcome(rpclb::ErrorMessage{code, std::move(message), {}});
}
RequestOutcome draining(const std::string& node) {
    return RequestOutcome(rpclb::draining_error(node, "m", "f", "lb"));
}

// Starts `m` at t0 and feeds the first pick `name`: the actions of that pick.
Actions start_and_pick(CallMachine& m, const std::string& name, std::size_t members = 3) {
    const auto started = m.start(t0);
    BOOST_REQUIRE(at<CallMachine::Pick>(started, 0).slot == 0);
    return m.on_picked(0, member(name, members), t0);
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_call_picks_sends_releases_and_completes_once) {
    CallMachine m(balanced());
    const auto sent = start_and_pick(m, "b@h");
    BOOST_TEST(sent.size() == 1u);
    const auto& send = at<CallMachine::Send>(sent, 0);
    BOOST_TEST(send.slot == 0);
    BOOST_TEST(send.attempt == 0);
    BOOST_TEST((send.deadline == t0 + 1000ms));
    BOOST_TEST(!send.hedged);
    BOOST_TEST(!send.last);  // an algorithm picked it: it may go again
    const auto done = m.on_answer(0, ok(42), t0 + 5ms);
    BOOST_TEST(done.size() == 2u);
    BOOST_TEST(at<CallMachine::Release>(done, 0).outcome.ok());
    BOOST_TEST(at<CallMachine::Complete>(done, 1).result.value() == boost::json::value(42));
    BOOST_TEST(m.completed());
    BOOST_TEST(m.cancel().empty());
}

BOOST_AUTO_TEST_CASE(the_deadline_is_the_earlier_of_the_timeout_and_the_handlers_calls) {
    auto c = balanced();
    c.inherited = t0 + 300ms;
    CallMachine m(c);
    BOOST_TEST((at<CallMachine::Send>(start_and_pick(m, "b@h"), 0).deadline == t0 + 300ms));

    c.inherited = t0 + 5000ms;  // later than the timeout: the timeout holds
    CallMachine later(c);
    BOOST_TEST((at<CallMachine::Send>(start_and_pick(later, "b@h"), 0).deadline == t0 + 1000ms));

    c.inherited = t0;  // passed: nothing is picked or sent
    CallMachine passed(c);
    const auto out = passed.start(t0);
    BOOST_TEST(out.size() == 1u);
    const auto& error = at<CallMachine::Complete>(out, 0).result.error();
    BOOST_TEST(error.is(Failure::timeout));
    BOOST_TEST(error.message == "not sent: the deadline of the call whose handler made it had passed");
}

BOOST_AUTO_TEST_CASE(bad_options_complete_the_call_before_any_pick) {
    const auto refused = [](CallMachine::Config c) {
        CallMachine m(std::move(c));
        const auto out = m.start(t0);
        BOOST_REQUIRE(out.size() == 1u);
        const auto& error = at<CallMachine::Complete>(out, 0).result.error();
        BOOST_TEST((error.code == ErrorCode::bad_request));
        return error.message;
    };
    auto c = balanced();
    c.timeout = 0ms;
    BOOST_TEST(refused(c) == "timeout must be 1 to 4294967295 ms; got 0 ms");
    c = hedged();
    c.idempotent = false;
    BOOST_TEST(refused(c).starts_with("hedging: the call is not marked idempotent"));
    c = hedged(20ms, 6);
    BOOST_TEST(refused(c) == "hedging.max_attempts must be 2 to 5; got 6");
    c = hedged(2000ms);
    BOOST_TEST(refused(c).starts_with("hedging.delay must be 0"));
    c = hedged();
    c.balanced = false;
    BOOST_TEST(refused(c) == "hedging: applies only to a call through a balancer (CallOptions::load_balancer)");
    c = hedged();
    c.call = false;
    BOOST_TEST(refused(c) == "hedging: a cast is never hedged (it has no answer to wait for)");
}

BOOST_AUTO_TEST_CASE(a_call_never_run_there_goes_to_another_member_up_to_sixteen_times) {
    CallMachine m(balanced());
    start_and_pick(m, "b@h");
    auto out = m.on_answer(0, draining("b@h"), t0 + 1ms);
    BOOST_TEST(out.size() == 2u);
    // A `draining` refusal is not the member's failure.
    BOOST_TEST((at<CallMachine::Release>(out, 0).outcome.origin == ErrorOrigin::none));
    int slot = at<CallMachine::Pick>(out, 1).slot;
    BOOST_TEST(slot == 1);
    at<CallMachine::Send>(m.on_picked(slot, member("c@h"), t0 + 1ms), 0);
    // Never sent (the member had just said bye): picked again too.
    out = m.on_answer(slot, rpclb::detail::unsent("c@h", "m", "f"), t0 + 2ms);
    slot = at<CallMachine::Pick>(out, 1).slot;
    for (int i = 2; i < CallMachine::max_reselections; ++i) {
        m.on_picked(slot, member("d@h"), t0 + 2ms);
        slot = at<CallMachine::Pick>(m.on_answer(slot, draining("d@h"), t0 + 2ms), 1).slot;
    }
    m.on_picked(slot, member("d@h"), t0 + 2ms);
    out = m.on_answer(slot, draining("d@h"), t0 + 3ms);  // the 17th refusal ends the call
    BOOST_TEST(out.size() == 2u);
    BOOST_TEST(rpclb::is_draining(at<CallMachine::Complete>(out, 1).result.error()));
}

BOOST_AUTO_TEST_CASE(a_call_that_ran_there_or_was_not_picked_is_never_sent_again) {
    CallMachine m(balanced());
    start_and_pick(m, "b@h");
    auto out = m.on_answer(0, failed(ErrorCode::internal_server_error), t0 + 1ms);
    BOOST_TEST(out.size() == 2u);
    BOOST_TEST((at<CallMachine::Release>(out, 0).outcome.origin == ErrorOrigin::remote));
    BOOST_TEST((at<CallMachine::Complete>(out, 1).result.error().code == ErrorCode::internal_server_error));

    auto c = balanced();
    c.balanced = false;
    c.load_balancer = {};
    c.node = "b@h";
    CallMachine direct(c);
    direct.start(t0);
    const auto sent = direct.on_picked(0, {.member = "b@h"}, t0);
    BOOST_TEST(at<CallMachine::Send>(sent, 0).last);  // its arguments may be moved
    out = direct.on_answer(0, draining("b@h"), t0 + 1ms);
    BOOST_TEST(rpclb::is_draining(at<CallMachine::Complete>(out, 1).result.error()));
}

BOOST_AUTO_TEST_CASE(a_peers_timeout_after_the_deadline_is_the_calls_own_before_it_an_answer) {
    CallMachine m(balanced());
    start_and_pick(m, "b@h");
    auto out = m.on_answer(0, failed(ErrorCode::request_timeout, "not run"), t0 + 1000ms);
    const auto& error = at<CallMachine::Complete>(out, 1).result.error();
    BOOST_TEST(error.is(Failure::timeout));
    BOOST_TEST(error.message != "not run");

    CallMachine early(balanced());
    start_and_pick(early, "b@h");
    out = early.on_answer(0, failed(ErrorCode::request_timeout, "not run"), t0 + 999ms);
    BOOST_TEST(at<CallMachine::Complete>(out, 1).result.error().message == "not run");
}

BOOST_AUTO_TEST_CASE(no_member_waits_retry_sleep_within_the_deadline_then_gives_up) {
    auto c = balanced();
    c.retry = rpclb::RetryPolicy{true, 2, 400ms};
    CallMachine m(c);
    m.start(t0);
    const rpclb::ErrorMessage none{ErrorCode::service_unavailable, "no members registered", {{"balancer", "lb"}}};
    auto out = m.on_pick_failed(0, none, true, t0);
    BOOST_TEST((at<CallMachine::Wait>(out, 0).timer == CallMachine::Timer::route));
    BOOST_TEST((at<CallMachine::Wait>(out, 0).delay == 400ms));
    out = m.on_timer(CallMachine::Timer::route, true, t0 + 400ms);
    int slot = at<CallMachine::Pick>(out, 0).slot;
    out = m.on_pick_failed(slot, none, true, t0 + 700ms);
    BOOST_TEST((at<CallMachine::Wait>(out, 0).delay == 300ms));  // what is left of the timeout
    slot = at<CallMachine::Pick>(m.on_timer(CallMachine::Timer::route, true, t0 + 1000ms), 0).slot;
    out = m.on_pick_failed(slot, none, true, t0 + 1000ms);  // retries used up: the balancer's error
    BOOST_TEST(at<CallMachine::Complete>(out, 0).result.error().message == "no members registered");

    c.retry = rpclb::RetryPolicy{true, 5, 400ms};
    CallMachine late(c);
    late.start(t0);
    late.on_pick_failed(0, none, true, t0);
    slot = at<CallMachine::Pick>(late.on_timer(CallMachine::Timer::route, true, t0 + 1000ms), 0).slot;
    const auto& error = at<CallMachine::Complete>(late.on_pick_failed(slot, none, true, t0 + 1000ms), 0).result.error();
    BOOST_TEST(error.is(Failure::timeout));
    BOOST_TEST(error.message.ends_with(" while waiting for a member: no members registered"));
    BOOST_TEST(error.details.at("balancer") == "lb");

    CallMachine stopped(c);
    stopped.start(t0);
    stopped.on_pick_failed(0, none, true, t0);
    out = stopped.on_timer(CallMachine::Timer::route, false, t0 + 1ms);  // the node stops
    BOOST_TEST(at<CallMachine::Complete>(out, 0).result.error().is(Failure::node_stopping));

    CallMachine other(c);
    other.start(t0);
    out = other.on_pick_failed(0, rpclb::ErrorMessage{ErrorCode::bad_request, "no such balancer", {}}, false, t0);
    BOOST_TEST(at<CallMachine::Complete>(out, 0).result.error().message == "no such balancer");
}

BOOST_AUTO_TEST_CASE(a_pick_after_the_deadline_is_released_and_the_call_times_out_unsent) {
    CallMachine m(balanced());
    m.start(t0);
    const auto out = m.on_picked(0, member("b@h"), t0 + 1000ms);
    BOOST_TEST(out.size() == 2u);
    BOOST_TEST(at<CallMachine::Release>(out, 0).slot == 0);
    const auto& error = at<CallMachine::Complete>(out, 1).result.error();
    BOOST_TEST(error.is(Failure::timeout));
    BOOST_TEST(error.details.at("node") == "b@h");
}

BOOST_AUTO_TEST_CASE(a_hedge_goes_after_the_delay_to_another_member_and_the_first_success_wins) {
    CallMachine m(hedged(20ms, 2));
    auto out = start_and_pick(m, "b@h");
    BOOST_TEST(at<CallMachine::Send>(out, 0).hedged);
    BOOST_TEST((at<CallMachine::Wait>(out, 1).timer == CallMachine::Timer::hedge));
    BOOST_TEST((at<CallMachine::Wait>(out, 1).delay == 20ms));
    out = m.on_timer(CallMachine::Timer::hedge, true, t0 + 20ms);
    const auto& hedge = at<CallMachine::Pick>(out, 0);
    BOOST_TEST(hedge.hedge);
    BOOST_TEST(hedge.budgeted);  // the first pick of an extra attempt takes a token
    // The algorithm picked the member tried already: released unused, picked again
    // without another token.
    out = m.on_picked(hedge.slot, member("b@h"), t0 + 20ms);
    BOOST_TEST((at<CallMachine::Release>(out, 0).outcome.origin == ErrorOrigin::none));
    const auto again = at<CallMachine::Pick>(out, 1);
    BOOST_TEST(!again.budgeted);
    out = m.on_picked(again.slot, member("c@h"), t0 + 20ms);
    BOOST_TEST(out.size() == 1u);  // max_attempts reached: no further hedge
    BOOST_TEST(at<CallMachine::Send>(out, 0).attempt == 1);
    out = m.on_answer(again.slot, ok(2), t0 + 25ms);
    BOOST_TEST(at<CallMachine::Release>(out, 0).hedge_won);
    BOOST_TEST(at<CallMachine::Complete>(out, 1).result.value() == boost::json::value(2));
    BOOST_TEST(at<CallMachine::Cancel>(out, 2).slot == 0);  // the member still at it is told
    // The first attempt's answer comes late: released as cancelled, counted as late.
    out = m.on_answer(0, failed(ErrorCode::internal_server_error), t0 + 40ms);
    BOOST_TEST(out.size() == 1u);
    BOOST_TEST(at<CallMachine::Release>(out, 0).late);
    BOOST_TEST((at<CallMachine::Release>(out, 0).outcome.origin == ErrorOrigin::none));
}

BOOST_AUTO_TEST_CASE(the_hedge_delay_defaults_to_the_balancers_recent_p95) {
    CallMachine m(hedged(0ms));
    m.start(t0);
    auto picked = member("b@h");
    picked.recent_p95 = std::chrono::microseconds(7300);
    BOOST_TEST((at<CallMachine::Wait>(m.on_picked(0, picked, t0), 1).delay == 8ms));  // rounded up
    CallMachine unknown(hedged(0ms));
    BOOST_TEST((at<CallMachine::Wait>(start_and_pick(unknown, "b@h"), 1).delay == 10ms));
}

BOOST_AUTO_TEST_CASE(a_hedged_call_ends_with_its_last_failure_and_not_before) {
    CallMachine m(hedged(20ms, 3));
    start_and_pick(m, "b@h");
    auto slot = at<CallMachine::Pick>(m.on_timer(CallMachine::Timer::hedge, true, t0 + 20ms), 0).slot;
    auto out = m.on_picked(slot, member("c@h"), t0 + 20ms);
    BOOST_TEST(out.size() == 2u);  // sent, and a third attempt may follow
    out = m.on_answer(0, failed(ErrorCode::internal_server_error), t0 + 30ms);
    BOOST_TEST(out.size() == 1u);  // released; the other attempt may still answer
    // No budget for the third: nothing is sent.
    slot = at<CallMachine::Pick>(m.on_timer(CallMachine::Timer::hedge, true, t0 + 40ms), 0).slot;
    BOOST_TEST(m.on_pick_failed(slot, rpclb::ErrorMessage{}, false, t0 + 40ms).empty());
    out = m.on_answer(1, failed(ErrorCode::internal_server_error, "second"), t0 + 50ms);
    BOOST_TEST(at<CallMachine::Complete>(out, 1).result.error().message == "second");
}

BOOST_AUTO_TEST_CASE(a_balancer_with_fewer_members_than_attempts_gets_one_attempt_each) {
    CallMachine m(hedged(20ms, 3));
    auto out = start_and_pick(m, "b@h", 2);  // two members: at most two attempts
    BOOST_TEST(at<CallMachine::Send>(out, 0).hedged);
    const auto slot = at<CallMachine::Pick>(m.on_timer(CallMachine::Timer::hedge, true, t0 + 20ms), 0).slot;
    out = m.on_picked(slot, member("c@h", 2), t0 + 20ms);
    BOOST_TEST(out.size() == 1u);  // sent, and no third attempt is planned
    BOOST_TEST(at<CallMachine::Send>(out, 0).attempt == 1);

    CallMachine alone(hedged(20ms, 2));  // one member left: the call goes, unhedged
    out = start_and_pick(alone, "b@h", 1);
    BOOST_TEST(out.size() == 1u);
    BOOST_TEST(at<CallMachine::Complete>(alone.on_answer(0, ok(1), t0 + 30ms), 1).result.has_value());
}

BOOST_AUTO_TEST_CASE(the_balancers_hedging_applies_to_an_idempotent_call_that_sets_none) {
    auto picked = member("b@h");
    picked.hedging = rpclb::Hedging{30ms, 2};
    auto idempotent = balanced();
    idempotent.idempotent = true;
    CallMachine m(idempotent);
    m.start(t0);
    auto out = m.on_picked(0, picked, t0);
    BOOST_TEST(at<CallMachine::Send>(out, 0).hedged);
    BOOST_TEST((at<CallMachine::Wait>(out, 1).delay == 30ms));
    // Not idempotent: the balancer's hedging does not apply.
    CallMachine plain(balanced());
    plain.start(t0);
    out = plain.on_picked(0, picked, t0);
    BOOST_TEST(out.size() == 1u);
    BOOST_TEST(!at<CallMachine::Send>(out, 0).hedged);
    // The call's own hedging wins over the balancer's.
    CallMachine own(hedged(20ms, 2));
    own.start(t0);
    out = own.on_picked(0, picked, t0);
    BOOST_TEST((at<CallMachine::Wait>(out, 1).delay == 20ms));
}

// A function the balancer marks idempotent (Picked::idempotent at the first pick) is
// treated as a call marked so: hedged as the balancer says, retried after a lost link.
BOOST_AUTO_TEST_CASE(a_function_the_balancer_marks_idempotent_is_hedged_and_retried_as_one) {
    auto picked = member("b@h");
    picked.hedging = rpclb::Hedging{30ms, 2};
    picked.idempotent = true;
    CallMachine m(balanced());
    BOOST_TEST(!m.idempotent());
    m.start(t0);
    auto out = m.on_picked(0, picked, t0);
    BOOST_TEST(m.idempotent());
    BOOST_TEST(at<CallMachine::Send>(out, 0).hedged);
    BOOST_TEST((at<CallMachine::Wait>(out, 1).delay == 30ms));

    CallMachine retried(balanced());
    retried.start(t0);
    auto marked = member("b@h");
    marked.idempotent = true;
    retried.on_picked(0, marked, t0);
    out = retried.on_answer(0,
                            RequestOutcome(rpclb::detail::link_failure(rpclb::detail::LinkError::reset, "b@h", "m", "f"),
                                           rpclb::detail::LinkError::reset),
                            t0 + 1ms);
    BOOST_TEST(at<CallMachine::Pick>(out, 1).budgeted);  // sent again, with a token
}

BOOST_AUTO_TEST_CASE(a_cancelled_call_completes_once_and_still_releases_what_it_picked) {
    CallMachine m(balanced());
    start_and_pick(m, "b@h");
    auto out = m.cancel();
    BOOST_TEST(at<CallMachine::Complete>(out, 0).result.error().is(Failure::cancelled));
    BOOST_TEST(at<CallMachine::Cancel>(out, 1).slot == 0);  // the member is told
    out = m.on_answer(0, ok(1), t0 + 1ms);  // the answer that comes anyway
    BOOST_TEST(out.size() == 1u);
    BOOST_TEST(at<CallMachine::Release>(out, 0).outcome.ok());  // its latency is real

    CallMachine told(balanced());  // the member's refusal after the cancel is not its failure
    start_and_pick(told, "b@h");
    told.cancel();
    out = told.on_answer(0, failed(ErrorCode::request_timeout, "not run: the caller cancelled it"), t0 + 1ms);
    BOOST_TEST((at<CallMachine::Release>(out, 0).outcome.origin == ErrorOrigin::none));

    CallMachine picking(balanced());
    picking.start(t0);
    picking.cancel();
    out = picking.on_picked(0, member("b@h"), t0);  // cancelled while it picked: not sent
    BOOST_TEST(out.size() == 1u);
    BOOST_TEST(at<CallMachine::Release>(out, 0).slot == 0);
}

BOOST_AUTO_TEST_CASE(a_cast_has_no_deadline_goes_once_and_gives_its_arguments_away) {
    auto c = balanced();
    c.call = false;
    CallMachine m(c);
    const auto sent = start_and_pick(m, "b@h");
    BOOST_TEST(at<CallMachine::Send>(sent, 0).last);
    BOOST_TEST((at<CallMachine::Send>(sent, 0).deadline == Clock::time_point::max()));
    const auto out = m.on_answer(0, draining("b@h"), t0 + 1ms);  // not picked again
    BOOST_TEST(at<CallMachine::Complete>(out, 1).result.has_error());
}

BOOST_AUTO_TEST_CASE(an_idempotent_call_whose_link_was_lost_goes_again_within_the_budget) {
    const auto lost = [] {
        return RequestOutcome(rpclb::detail::link_failure(rpclb::detail::LinkError::reset, "b@h", "m", "f"),
                              rpclb::detail::LinkError::reset);
    };
    CallMachine plain(balanced());  // not idempotent: it may have run there, so it ends
    start_and_pick(plain, "b@h");
    auto out = plain.on_answer(0, lost(), t0 + 1ms);
    BOOST_TEST(at<CallMachine::Complete>(out, 1).result.error().is(Failure::no_connection));

    auto c = balanced();
    c.idempotent = true;
    CallMachine m(c);
    start_and_pick(m, "b@h");
    out = m.on_answer(0, lost(), t0 + 1ms);
    const auto retry = at<CallMachine::Pick>(out, 1);
    BOOST_TEST(retry.budgeted);  // a retry takes a token
    BOOST_TEST(!retry.hedge);
    out = m.on_picked(retry.slot, member("c@h"), t0 + 1ms);
    BOOST_TEST(at<CallMachine::Send>(out, 0).attempt == 1);
    BOOST_TEST(at<CallMachine::Complete>(m.on_answer(retry.slot, ok(3), t0 + 2ms), 1).result.value() ==
               boost::json::value(3));

    CallMachine spent(c);  // no token: the lost link's error stands
    start_and_pick(spent, "b@h");
    const auto slot = at<CallMachine::Pick>(spent.on_answer(0, lost(), t0 + 1ms), 1).slot;
    out = spent.on_pick_failed(slot, rpclb::ErrorMessage{}, false, t0 + 1ms);
    BOOST_TEST(at<CallMachine::Complete>(out, 0).result.error().is(Failure::no_connection));
}

// Any order of events: every pick is released exactly once after it was picked, nothing
// is sent after the completion, and the call completes exactly once.
BOOST_AUTO_TEST_CASE(every_pick_is_released_once_and_every_call_completes_once_in_any_order) {
    for (unsigned seed = 1; seed <= 2000; ++seed) {
        std::mt19937 rng(seed);
        const auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
        auto config = chance(50) ? hedged(chance(50) ? 0ms : 5ms, 2 + static_cast<int>(rng() % 4)) : balanced();
        config.idempotent = config.idempotent || chance(50);
        CallMachine m(config);
        auto now = t0;
        std::vector<CallMachine::Action> pending;  // actions whose event has not come yet
        std::set<int> picked, released, in_flight;  // in_flight: sent, not answered
        int completions = 0;
        const auto take = [&](Actions out) {
            for (auto& a : out) {
                if (const auto* r = std::get_if<CallMachine::Release>(&a)) {
                    BOOST_REQUIRE_MESSAGE(picked.count(r->slot) && released.insert(r->slot).second,
                                          "seed " << seed << ": slot " << r->slot << " released twice or unpicked");
                    in_flight.erase(r->slot);
                } else if (std::holds_alternative<CallMachine::Complete>(a)) {
                    ++completions;
                } else if (const auto* c = std::get_if<CallMachine::Cancel>(&a)) {
                    BOOST_REQUIRE_MESSAGE(completions == 1 && in_flight.count(c->slot),
                                          "seed " << seed << ": cancel of slot " << c->slot << " not in flight");
                } else {
                    if (const auto* s = std::get_if<CallMachine::Send>(&a)) {
                        BOOST_REQUIRE_MESSAGE(completions == 0, "seed " << seed << ": sent after completion");
                        in_flight.insert(s->slot);
                    }
                    pending.push_back(std::move(a));
                }
            }
        };
        take(m.start(now));
        for (int step = 0; step < 200 && !pending.empty(); ++step) {
            now += std::chrono::milliseconds(rng() % 30);
            if (chance(3)) take(m.cancel());
            const auto i = rng() % pending.size();
            auto action = std::move(pending[i]);
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
            if (const auto* p = std::get_if<CallMachine::Pick>(&action)) {
                if (chance(15)) {
                    take(m.on_pick_failed(p->slot, rpclb::ErrorMessage{ErrorCode::service_unavailable, "none", {}},
                                          chance(70), now));
                } else {
                    picked.insert(p->slot);
                    take(m.on_picked(p->slot, member(std::string(1, static_cast<char>('a' + rng() % 5))), now));
                }
            } else if (const auto* s = std::get_if<CallMachine::Send>(&action)) {
                const auto roll = rng() % 5;
                take(m.on_answer(s->slot,
                                 roll == 0   ? ok(1)
                                 : roll == 1 ? draining("x")
                                 : roll == 2 ? rpclb::detail::unsent("x", "m", "f")
                                 : roll == 3 ? RequestOutcome(rpclb::detail::link_failure(
                                                                  rpclb::detail::LinkError::reset, "x", "m", "f"),
                                                              rpclb::detail::LinkError::reset)
                                             : failed(ErrorCode::internal_server_error),
                                 now));
            } else if (const auto* w = std::get_if<CallMachine::Wait>(&action)) {
                take(m.on_timer(w->timer, !chance(5), now));
            }
        }
        BOOST_REQUIRE_MESSAGE(pending.empty(), "seed " << seed << ": still waiting after 200 events");
        BOOST_REQUIRE_MESSAGE(completions == 1, "seed " << seed << ": completed " << completions << " times");
        BOOST_REQUIRE_MESSAGE(released == picked, "seed " << seed << ": a pick was never released");
    }
}
