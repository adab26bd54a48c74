// The calls and writes of one link, driven without sockets: canned answers and frames, a
// virtual clock (time points chosen by the test; nothing here reads a clock).
#define BOOST_TEST_MODULE link_core
#include "../../src/transport/link_core.hpp"
#include "../../src/transport/stream_loan.hpp"

#include <boost/json/value_to.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::ErrorCode;
using rpclb::detail::LinkClose;
using rpclb::detail::LinkCore;
using rpclb::detail::LinkError;
using rpclb::detail::RequestOutcome;
namespace wire = rpclb::detail::wire;

namespace {

const LinkCore::Clock::time_point t0{};  // the virtual clock's origin

// A core with batches of at most 4 frames and 100 bytes, a 1,000-byte queue.
LinkCore make_core() { return LinkCore(4, 100, 1000); }

// Starts call `id` with deadline `deadline`; its outcome lands in `out`.
std::optional<LinkCore::Clock::time_point> start(LinkCore& core, std::uint64_t id,
                                                 LinkCore::Clock::time_point deadline,
                                                 std::optional<RequestOutcome>& out) {
    return core.start_call(id, {[&out](RequestOutcome r) { out = std::move(r); }, deadline, "m", "f"});
}

wire::Response answer(std::uint64_t id, int value) { return {id, rpclb::CallResult(boost::json::value(value))}; }

}  // namespace

BOOST_AUTO_TEST_CASE(an_answer_completes_its_call_and_a_late_one_is_dropped) {
    auto core = make_core();
    std::optional<RequestOutcome> one, two;
    start(core, 1, t0 + 10ms, one);
    start(core, 2, t0 + 20ms, two);
    BOOST_TEST(core.pending() == 2u);
    auto done = core.on_response(answer(2, 42));
    BOOST_REQUIRE(done);
    done->run();
    BOOST_REQUIRE(two);
    BOOST_TEST(two->result.value().as_int64() == 42);
    BOOST_TEST(!one);
    BOOST_TEST(!core.on_response(answer(2, 43)));  // answered already
    BOOST_TEST(!core.on_response(answer(7, 1)));   // never sent
    BOOST_TEST(core.pending() == 1u);
}

BOOST_AUTO_TEST_CASE(the_timer_is_armed_for_the_earliest_deadline_only) {
    auto core = make_core();
    std::optional<RequestOutcome> a, b, c;
    BOOST_TEST((start(core, 1, t0 + 30ms, a) == t0 + 30ms));  // first call: arm
    BOOST_TEST(!start(core, 2, t0 + 50ms, b));                 // later: the armed timer covers it
    BOOST_TEST((start(core, 3, t0 + 10ms, c) == t0 + 10ms));  // earlier: re-arm
}

BOOST_AUTO_TEST_CASE(the_timer_fails_the_calls_whose_deadline_passed_and_rearms_for_the_rest) {
    auto core = make_core();
    std::optional<RequestOutcome> a, b, c;
    start(core, 1, t0 + 10ms, a);
    start(core, 2, t0 + 20ms, b);
    start(core, 3, t0 + 30ms, c);
    auto due = core.on_timer(t0 + 20ms, "peer");
    BOOST_TEST(due.size() == 2u);
    for (auto& d : due) d.run();
    BOOST_REQUIRE(a);
    BOOST_REQUIRE(b);
    BOOST_TEST((a->result.error().code == ErrorCode::request_timeout));
    BOOST_TEST((b->result.error().code == ErrorCode::request_timeout));
    BOOST_TEST(a->result.error().details.at("node").as_string() == "peer");
    BOOST_TEST(!c);
    BOOST_TEST((core.next_deadline() == t0 + 30ms));
    BOOST_TEST(!core.next_deadline());  // armed already
    // The timer waking for a call answered meanwhile finds nothing due and nothing left.
    core.on_response(answer(3, 1))->run();
    BOOST_TEST(core.on_timer(t0 + 30ms, "peer").empty());
    BOOST_TEST(!core.next_deadline());
}

BOOST_AUTO_TEST_CASE(a_call_started_by_a_completion_gets_the_timer_again) {
    auto core = make_core();
    std::optional<RequestOutcome> a, b;
    start(core, 1, t0 + 10ms, a);
    auto due = core.on_timer(t0 + 10ms, "peer");
    BOOST_REQUIRE(due.size() == 1u);
    due[0].run();
    // As a completion handler that calls again would: the timer is no longer armed.
    BOOST_TEST((start(core, 2, t0 + 40ms, b) == t0 + 40ms));
    BOOST_TEST(!core.next_deadline());
}

BOOST_AUTO_TEST_CASE(a_malformed_answer_fails_its_call) {
    auto core = make_core();
    std::optional<RequestOutcome> a;
    start(core, 1, t0 + 10ms, a);
    core.on_malformed_response(1, "missing \"ok\"", "peer")->run();
    BOOST_TEST((a->result.error().code == ErrorCode::internal_server_error));
    BOOST_TEST(a->result.error().message == "malformed response: missing \"ok\"");
    BOOST_TEST(!core.on_malformed_response(1, "again", "peer"));
}

BOOST_AUTO_TEST_CASE(a_close_fails_every_pending_call_with_its_reason) {
    auto core = make_core();
    std::optional<RequestOutcome> a, b;
    start(core, 1, t0 + 10ms, a);
    start(core, 2, t0 + 20ms, b);
    auto failed = core.on_closed(LinkClose{LinkError::reset}, "peer");
    BOOST_TEST(failed.size() == 2u);
    for (auto& f : failed) f.run();
    for (auto* out : {&a, &b}) {
        BOOST_REQUIRE(*out);
        BOOST_TEST(((*out)->link == LinkError::reset));
        BOOST_TEST(!(*out)->never_sent());
        BOOST_TEST((*out)->result.error().details.at("reason").as_string() == "connection lost");
    }
    BOOST_TEST(core.pending() == 0u);
    BOOST_TEST(core.on_timer(t0 + 1s, "peer").empty());
}

BOOST_AUTO_TEST_CASE(queued_frames_go_out_one_at_a_time_until_the_peer_reads_batches) {
    auto core = make_core();
    for (const char* f : {"a", "b", "c", "d", "e", "f"}) {
        BOOST_TEST(core.reserve(1, true));
        BOOST_TEST(core.push(f));
    }
    BOOST_TEST(core.begin_write() == 1u);
    BOOST_TEST(core.at(0) == "a");
    BOOST_TEST(core.begin_write() == 0u);  // one write at a time
    std::vector<std::string> spent;
    core.end_write([&](std::string&& s) { spent.push_back(s); });
    core.set_batching(true);
    BOOST_TEST(core.begin_write() == 4u);  // at most 4 frames a message
    core.end_write([&](std::string&& s) { spent.push_back(s); });
    BOOST_TEST(core.begin_write() == 1u);
    core.end_write([&](std::string&& s) { spent.push_back(s); });
    BOOST_TEST(core.write_idle());
    BOOST_TEST(spent == (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
}

BOOST_AUTO_TEST_CASE(a_batch_stops_at_its_byte_limit) {
    auto core = make_core();
    core.set_batching(true);
    for (int i = 0; i < 3; ++i) {
        core.reserve(40, true);
        core.push(std::string(40, 'x'));
    }
    // Two frames and their separator (81 bytes) fit in 100; a third does not.
    BOOST_TEST(core.begin_write() == 2u);
}

BOOST_AUTO_TEST_CASE(a_full_queue_refuses_what_may_be_refused_and_frees_bytes_as_frames_go) {
    auto core = make_core();
    BOOST_TEST(core.reserve(2000, true));   // an empty queue takes any frame
    BOOST_TEST(!core.reserve(1, true));     // now over the limit: refused
    BOOST_TEST(core.reserve(1, false));     // answers are never refused
    core.release(1);
    core.push(std::string(2000, 'x'));
    BOOST_TEST(core.begin_write() == 1u);
    core.end_write([](std::string&&) {});
    BOOST_TEST(core.reserve(900, true));    // the written frame's bytes were released
}

BOOST_AUTO_TEST_CASE(after_a_failure_nothing_queues_and_the_frames_being_written_stay) {
    auto core = make_core();
    core.reserve(5, true);
    core.push("first");
    core.reserve(6, true);
    core.push("second");
    BOOST_TEST(core.begin_write() == 1u);
    core.fail_writes();
    BOOST_TEST(core.at(0) == "first");  // the write's buffer outlives the failure
    core.reserve(5, true);
    BOOST_TEST(!core.push("third"));
    core.end_write([](std::string&&) {});
    BOOST_TEST(core.reserve(1000, true));  // every byte was released
}

BOOST_AUTO_TEST_CASE(what_cannot_be_sent_is_refused_with_an_error_that_says_why) {
    using rpclb::detail::not_json;
    using rpclb::detail::overloaded;
    using rpclb::detail::too_large;
    boost::json::array finite{1, 2.5, "x"};
    BOOST_TEST(!not_json("request", finite, "peer", "m", "f"));
    boost::json::array nan{1, boost::json::array{std::nan("")}};
    auto e = not_json("cast", nan, "peer", "m", "f");
    BOOST_REQUIRE(e);
    BOOST_TEST((e->code == ErrorCode::bad_request));
    BOOST_TEST(e->message.starts_with("the cast's arguments hold a number JSON cannot carry"));
    BOOST_TEST(!too_large("request", 100, 100, "peer", "m", "f"));
    e = too_large("request", 101, 100, "peer", "m", "f");
    BOOST_REQUIRE(e);
    BOOST_TEST(e->message == "request of 101 bytes exceeds the maximum message size of 100");
    BOOST_TEST((e->reason == rpclb::Failure::too_large));
    const auto full = overloaded(1000, "peer", "m", "f");
    BOOST_TEST((full.code == ErrorCode::service_unavailable));
    BOOST_TEST(boost::json::value_to<std::size_t>(full.details.at("max_send_queue_bytes")) == 1000u);
}

BOOST_AUTO_TEST_CASE(a_stream_is_lent_for_one_answer_and_taken_back_before_the_strand_uses_it) {
    rpclb::detail::StreamLoan loan;
    int writes = 0;
    auto write = [&] { ++writes; };
    loan.promise(true);
    BOOST_TEST(loan.owed());
    BOOST_TEST(!loan.write_if_lent(false, write));  // too large: the strand writes it
    BOOST_TEST(!loan.write_if_lent(true, write));   // the loan ended with the refusal
    BOOST_TEST(loan.delivered());
    BOOST_TEST(!loan.owed());

    loan.promise(true);
    BOOST_TEST(loan.write_if_lent(true, write));
    BOOST_TEST(writes == 1);
    BOOST_TEST(!loan.write_if_lent(true, write));  // one write per loan
    BOOST_TEST(loan.delivered());

    loan.promise(true);
    loan.take_back();  // the strand needs the stream first
    BOOST_TEST(!loan.write_if_lent(true, write));
    loan.promise(true);  // a second answer owed: never lent
    BOOST_TEST(!loan.write_if_lent(true, write));
    BOOST_TEST(!loan.delivered());
    BOOST_TEST(loan.delivered());

    loan.promise(false);  // a write in progress (or TLS): not lent
    BOOST_TEST(!loan.write_if_lent(true, write));
    BOOST_TEST(writes == 1);
}
