// Call channels (ClusterOptions::call_channels): a blocking call goes on a connection of
// its own, driven by the calling thread, and keeps every promise of a call on the mesh
// link: its answer, its deadline, and failure at once when the node stops.
#define BOOST_TEST_MODULE call_channels
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

constexpr auto b_name = "b@127.0.0.1";

struct Pair {
    explicit Pair(bool channels = true, std::chrono::milliseconds b_stop_timeout = 15s, bool b_channels = true,
                  std::chrono::milliseconds idle_timeout = 3s) {
        auto bo = rpclb::test::in_process_node_options(b_name);
        bo.stop_timeout = b_stop_timeout;
        bo.call_channels = b_channels;
        bo.idle_timeout = idle_timeout;
        b = std::make_unique<rpclb::Cluster>(bo);
        b->register_function("t", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return args; },
                             {.run_inline = true});
        b->register_function("t", "sleep", [this](const boost::json::array& args) -> rpclb::CallResult {
            ++sleeps_begun;
            // Takes as long as the caller asks: the run time is the test's input.
            std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).to_number<int>()));
            ++sleeps_ended;
            return "slept";
        });
        // A worker-pool echo: its answers on a channel go through the connection's queue.
        b->register_function("t", "work", [](const boost::json::array& args) -> rpclb::CallResult { return args; });
        b->start();
        auto ao = rpclb::test::in_process_node_options(
            "a@127.0.0.1", {"127.0.0.1:" + std::to_string(b->listen_endpoint()->port())});
        ao.call_channels = channels;
        ao.idle_timeout = idle_timeout;
        a = std::make_unique<rpclb::Cluster>(ao);
        a->start();
        BOOST_REQUIRE(eventually([&] { return a->connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 5s));
    }
    rpclb::CallResult echo(int i) { return a->call(b_name, "t", "echo", boost::json::array{i, "abc"}); }

    // b's "sleep" handler runs: how many runs have begun and ended (so tests wait for a
    // request to be out, or an answer to be written, by polling rather than sleeping).
    std::atomic<int> sleeps_begun{0};
    std::atomic<int> sleeps_ended{0};
    std::unique_ptr<rpclb::Cluster> b;
    std::unique_ptr<rpclb::Cluster> a;
};

}  // namespace

BOOST_AUTO_TEST_CASE(blocking_calls_go_on_one_reused_channel) {
    Pair p;
    for (int i = 0; i < 20; ++i) {
        auto r = p.echo(i);
        BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
        BOOST_TEST((r.value() == boost::json::array{i, "abc"}));
    }
    BOOST_TEST(p.a->stats().channel_calls == 20u);
    // One thread called: one channel, dialled by a and accepted by b; the mesh is unchanged.
    BOOST_TEST(p.a->stats().channels_open == 1u);
    BOOST_TEST(eventually([&] { return p.b->stats().channels_open == 1u; }, 2s));
    BOOST_TEST(p.a->connected_nodes().size() == 1u);
    BOOST_TEST(p.b->connected_nodes().size() == 1u);
}

BOOST_AUTO_TEST_CASE(concurrent_callers_each_get_a_channel_and_their_own_answers) {
    Pair p;
    std::vector<std::future<int>> callers;
    for (int t = 0; t < 4; ++t)
        callers.push_back(std::async(std::launch::async, [&p, t] {
            int good = 0;
            for (int i = 0; i < 200; ++i) {
                auto r = p.echo(t * 1000 + i);
                if (r && r.value() == boost::json::array{t * 1000 + i, "abc"}) ++good;
            }
            return good;
        }));
    for (auto& c : callers) BOOST_TEST(c.get() == 200);
    BOOST_TEST(p.a->stats().channel_calls == 800u);
    BOOST_TEST(p.a->stats().channels_open >= 1u);
    BOOST_TEST(p.a->stats().channels_open <= 4u);
}

BOOST_AUTO_TEST_CASE(with_call_channels_off_calls_use_the_mesh_link) {
    Pair p(false);
    BOOST_TEST_REQUIRE(p.echo(1).has_value());
    BOOST_TEST(p.a->stats().channel_calls == 0u);
    BOOST_TEST(p.a->stats().channels_open == 0u);
    BOOST_TEST(p.b->stats().channels_open == 0u);
}

BOOST_AUTO_TEST_CASE(a_node_with_call_channels_off_accepts_none) {
    Pair p(true, 15s, false);
    for (int i = 0; i < 5; ++i) BOOST_TEST_REQUIRE(p.echo(i).has_value());
    BOOST_TEST(p.a->stats().channel_calls == 0u);
    BOOST_TEST(p.b->stats().channels_open == 0u);
}

// A call that times out closes its channel (so its late answer can never be taken for the
// next call's); the calls after it are served on a new one.
BOOST_AUTO_TEST_CASE(a_call_on_a_channel_keeps_its_deadline_and_calls_after_it_are_served) {
    Pair p;
    // The channel is dialled first, by a call with the default timeout: the short call's
    // dial may take only a quarter of its 200 ms, too little under TSan on a loaded machine.
    BOOST_TEST_REQUIRE(p.echo(0).has_value());
    rpclb::CallOptions o;
    o.timeout = 200ms;
    const auto began = std::chrono::steady_clock::now();
    auto r = p.a->call(b_name, "t", "sleep", boost::json::array{1500}, o);
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST((std::chrono::steady_clock::now() - began < 1200ms));
    BOOST_TEST(p.a->stats().channel_calls == 2u);
    for (int i = 0; i < 3; ++i) {
        auto next = p.echo(i);
        BOOST_TEST_REQUIRE(next.has_value(), next.error().message);
        BOOST_TEST((next.value() == boost::json::array{i, "abc"}));
    }
    BOOST_TEST(p.a->stats().channel_calls == 5u);
    BOOST_TEST(p.a->stats().channels_open == 1u);
    BOOST_TEST(eventually([&] { return p.b->stats().channels_open == 1u; }, 2s));
}

BOOST_AUTO_TEST_CASE(stopping_the_caller_fails_a_call_waiting_on_a_channel_at_once) {
    Pair p;
    rpclb::CallOptions o;
    o.timeout = 20s;
    auto waiting = std::async(std::launch::async, [&] { return p.a->call(b_name, "t", "sleep", boost::json::array{2500}, o); });
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->stats().channel_calls == 1u && p.sleeps_begun == 1; }, 2s));
    const auto began = std::chrono::steady_clock::now();
    p.a->stop();
    BOOST_TEST_REQUIRE((waiting.wait_for(3s) == std::future_status::ready));
    auto r = waiting.get();
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable, r.error().message);
    BOOST_TEST((std::chrono::steady_clock::now() - began < 2s));
}

BOOST_AUTO_TEST_CASE(a_peer_that_stops_fails_a_call_waiting_on_its_channel) {
    // b stops with a call still running (its stop_timeout is short): the channel closes
    // with b's connections, and the waiting call fails then, not when the handler ends.
    Pair p(true, 200ms);
    rpclb::CallOptions o;
    o.timeout = 20s;
    auto waiting = std::async(std::launch::async, [&] { return p.a->call(b_name, "t", "sleep", boost::json::array{2500}, o); });
    BOOST_TEST_REQUIRE(eventually(
        [&] { return p.b->stats().channels_open == 1u && p.a->stats().channel_calls == 1u && p.sleeps_begun == 1; },
        2s));
    auto stopping = std::async(std::launch::async, [&] { p.b->stop(); });
    BOOST_TEST_REQUIRE((waiting.wait_for(3500ms) == std::future_status::ready));
    auto r = waiting.get();
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable, r.error().message);
    stopping.get();
}

// A stopping node still takes and answers the channels its peers open: closing one right
// after its handshake would lose a request the caller had written on it as "noconnection"
// during a rolling restart. b is stopping: it has left group w and waits
// for the call it serves; a call from a on a second channel is answered there.
BOOST_AUTO_TEST_CASE(a_stopping_peer_answers_on_a_channel_opened_while_it_drains) {
    Pair p;
    p.b->start_balancer(rpclb::test::balancer_options("w", "round_robin"));
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->get_members("w").has_value(); }, 5s));
    rpclb::CallOptions o;
    o.timeout = 20s;
    auto serving = std::async(std::launch::async, [&] { return p.a->call(b_name, "t", "sleep", boost::json::array{1500}, o); });
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->stats().channel_calls == 1u && p.sleeps_begun == 1; }, 2s));
    auto stopping = std::async(std::launch::async, [&] { p.b->stop(); });
    // b has begun to stop: it left w, and now waits for its sleep call to end.
    BOOST_TEST_REQUIRE(eventually([&] { return !p.a->get_members("w").has_value(); }, 2s));
    auto r = p.echo(7);  // the first channel is busy: a dials a second one
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message << " " << boost::json::serialize(r.error().details));
    BOOST_TEST((r.value() == boost::json::array{7, "abc"}));
    BOOST_TEST(p.a->stats().channel_calls == 2u);  // on the new channel, not on the link
    BOOST_TEST(serving.get().has_value());
    stopping.get();
    // a closed both channels once b's link closed after its bye: b's stop did not have to.
    BOOST_TEST(eventually([&] { return p.a->stats().channels_open == 0u; }, 2s));
}

// b's stop must not wait for b to be idle before its bye: under a steady stream of
// overlapping direct calls it never is, and the stop would take its whole stop_timeout and
// then drop what was queued. b waits only for the calls it was serving when its stop
// began, then says bye: the callers' next calls fail at once,
// unsent, and every call b ran is answered. On channels and on the mesh link alike.
// `nested`: b's handler calls a back, as a handler that calls another node; a answers b's
// bye with a reply bye, which leaves b free to call it until b closes (before, a's bye
// stopped b's calls to a, and calls b served during its stop failed after they ran).
void stop_under_a_steady_stream_of_direct_calls(bool channels, bool nested = false) {
    Pair p(channels, 10s);
    p.a->register_function("t", "inner", [](const boost::json::array& args) -> rpclb::CallResult { return args; },
                           {.run_inline = true});
    p.b->register_function("t", "nested", [&p](const boost::json::array& args) -> rpclb::CallResult {
        ++p.sleeps_begun;
        // Takes as long as the caller asks: the run time is the test's input.
        std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).to_number<int>()));
        auto r = p.b->call("a@127.0.0.1", "t", "inner", args);
        ++p.sleeps_ended;
        return r;
    });
    const char* function = nested ? "nested" : "sleep";
    constexpr int callers = 3;
    std::atomic<int> answered{0};
    std::atomic<bool> stopped{false};
    std::vector<rpclb::CallResult> failures(callers, rpclb::CallResult(0));
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t)
        threads.emplace_back([&, t] {
            std::this_thread::sleep_for(std::chrono::milliseconds(10 * t));  // overlapping, not in step
            rpclb::CallOptions o;
            o.timeout = 5s;
            while (!stopped) {
                auto r = p.a->call(b_name, "t", function, boost::json::array{30}, o);
                if (!r) {
                    failures[t] = std::move(r);
                    return;
                }
                ++answered;
            }
        });
    BOOST_TEST_REQUIRE(eventually([&] { return p.sleeps_ended >= 3 * callers; }, 5s));
    const auto began = std::chrono::steady_clock::now();
    p.b->stop();
    const auto took = std::chrono::steady_clock::now() - began;
    stopped = true;
    for (auto& t : threads) t.join();
    BOOST_TEST((took < 3s), "b's stop took "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                << " ms (stop_timeout 10 s)");
    for (auto& r : failures) {
        if (r) continue;  // its caller saw `stopped` first
        BOOST_TEST(r.error().code == rpclb::ErrorCode::service_unavailable, r.error().message);
    }
    BOOST_TEST(p.sleeps_begun == p.sleeps_ended);
    // Every call b ran was answered. When not, say how the callers' calls ended.
    std::string ended;
    for (auto& r : failures) ended += r ? std::string(" ok") : " " + boost::json::serialize(r.error().to_json());
    BOOST_TEST(answered == p.sleeps_ended, "answered " << answered << ", ran " << p.sleeps_ended
                                                        << "; the callers' last calls:" << ended);
}

BOOST_AUTO_TEST_CASE(a_peer_stops_promptly_under_a_steady_stream_of_calls_on_channels) {
    stop_under_a_steady_stream_of_direct_calls(true);
}

BOOST_AUTO_TEST_CASE(a_peer_stops_promptly_under_a_steady_stream_of_calls_on_the_link) {
    stop_under_a_steady_stream_of_direct_calls(false);
}

BOOST_AUTO_TEST_CASE(a_stopping_peers_handlers_still_call_the_nodes_it_said_bye_to) {
    stop_under_a_steady_stream_of_direct_calls(true, true);
    stop_under_a_steady_stream_of_direct_calls(false, true);
}

// A node that is not stopping accepts a new call channel from a peer that has said bye: a
// handler the stopping peer runs after its bye may call back on a channel it has yet to
// open, and refusing it would fail that call after the handler ran (the case above can
// hit this in its nested form). Here b's
// first blocking call to a is made after the byes: `late` arrives while b's stop waits for
// `first`, and calls a once the byes are done.
BOOST_AUTO_TEST_CASE(a_stopping_peer_opens_a_new_channel_to_a_node_it_said_bye_to) {
    Pair p(true, 10s);
    p.a->register_function("t", "inner", [](const boost::json::array& args) -> rpclb::CallResult { return args; },
                           {.run_inline = true});
    std::atomic<bool> late_began{false};
    p.b->register_function("t", "late", [&p, &late_began](const boost::json::array& args) -> rpclb::CallResult {
        late_began = true;
        // Past `first` (300 ms) and the byes after it. Kept as a sleep: a handler that is
        // still running when its node's byes go out is the case under test, and nothing
        // this handler can see marks the end of the byes.
        std::this_thread::sleep_for(600ms);
        return p.b->call("a@127.0.0.1", "t", "inner", args);
    });
    // b's group w shows when its stop has begun (b leaves it before it waits for `first`).
    p.b->start_balancer(rpclb::test::balancer_options("w", "round_robin"));
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->get_members("w").has_value(); }, 5s));
    rpclb::CallOptions o;
    o.timeout = 5s;
    auto first = p.a->async_call(b_name, "t", "sleep", {300}, o, boost::asio::use_future);
    BOOST_REQUIRE(eventually([&] { return p.sleeps_begun == 1; }, 5s));
    std::thread stopper([&] { p.b->stop(); });
    // b's stop has begun: it left w, and now waits for `first`.
    BOOST_TEST(eventually([&] { return !p.a->get_members("w").has_value(); }, 2s));
    auto late = p.a->async_call(b_name, "t", "late", {7}, o, boost::asio::use_future);
    BOOST_TEST(eventually([&] { return late_began.load(); }, 5s));
    stopper.join();
    BOOST_TEST(first.get().has_value());
    auto r = late.get();
    BOOST_TEST(r.has_value(), (r ? std::string() : boost::json::serialize(r.error().to_json())));
    if (r) BOOST_TEST(*r == (boost::json::array{7}));
}

// Calls that find no channel go on the mesh link with the time left; rounding the time
// spent up to the next millisecond would leave a 1 ms call none, and it would always fail
// unsent. A 1 ms round trip to an idle inline echo fits most times.
BOOST_AUTO_TEST_CASE(a_one_millisecond_call_on_the_link_is_sent) {
    Pair p(false);
    rpclb::CallOptions o;
    o.timeout = 1ms;
    int answered = 0;
    for (int i = 0; i < 50 && answered == 0; ++i)
        if (p.a->call(b_name, "t", "echo", boost::json::array{i}, o)) ++answered;
    BOOST_TEST(answered > 0);
}

// An overloaded node must not run queued requests whose callers have long timed out: a
// request carries its caller's timeout ("to"), and a worker does not start one that
// waited longer than that. b has 2 workers; 2 calls run,
// the 6 queued behind them wait past their callers' 150 ms and are not run.
BOOST_AUTO_TEST_CASE(a_request_that_waited_past_its_callers_timeout_is_not_run) {
    Pair p;
    const auto workers = p.b->options().worker_threads;
    const int queued = 6;
    rpclb::CallOptions o;
    o.timeout = 150ms;
    std::atomic<int> timed_out{0}, other{0};
    for (std::size_t i = 0; i < workers + queued; ++i)
        p.a->async_call(b_name, "t", "sleep", boost::json::array{400}, o, [&](rpclb::CallResult r) {
            (!r && r.error().is(rpclb::Failure::timeout) ? timed_out : other)++;
        });
    BOOST_TEST_REQUIRE(eventually([&] { return timed_out + other == static_cast<int>(workers) + queued; }, 5s));
    BOOST_TEST(other == 0);
    BOOST_TEST_REQUIRE(eventually([&] { return p.b->stats().expired_requests == static_cast<std::uint64_t>(queued); }, 5s));
    BOOST_TEST(p.sleeps_begun == static_cast<int>(workers));
    // A call within its timeout still runs.
    o.timeout = 5s;
    auto r = p.a->call(b_name, "t", "sleep", boost::json::array{1}, o);
    BOOST_TEST(r.has_value(), r.error().message);
}

BOOST_AUTO_TEST_CASE(a_restarted_peer_gets_new_channels) {
    Pair p;
    BOOST_TEST_REQUIRE(p.echo(1).has_value());
    const auto port = p.b->listen_endpoint()->port();
    p.b.reset();  // stops b: its end of the channel closes with it
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->connected_nodes().empty(); }, 5s));
    auto bo = rpclb::test::in_process_node_options(b_name);
    bo.listen = "127.0.0.1:" + std::to_string(port);
    p.b = std::make_unique<rpclb::Cluster>(bo);
    p.b->register_function("t", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return args; });
    p.b->start();
    BOOST_TEST_REQUIRE(eventually([&] { return p.a->connected_nodes().size() == 1; }, 5s));
    for (int i = 0; i < 3; ++i) {
        auto r = p.echo(i);
        BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
    }
    BOOST_TEST(p.a->stats().channel_calls == 4u);
    BOOST_TEST(p.a->stats().channels_open == 1u);
}

// A call times out, and its handler's late answer is written after it. The channel it
// was sent on closed with the timeout, so the answer reaches nobody: the next calls,
// on a new channel, get their own answers.
BOOST_AUTO_TEST_CASE(a_late_answer_is_never_taken_for_a_later_calls) {
    Pair p;
    BOOST_TEST_REQUIRE(p.echo(0).has_value());  // the channel, dialled with time to spare
    rpclb::CallOptions quick;
    quick.timeout = 50ms;
    auto first = p.a->call(b_name, "t", "sleep", boost::json::array{300}, quick);
    BOOST_TEST_REQUIRE(!first.has_value());
    BOOST_TEST(first.error().code == rpclb::ErrorCode::request_timeout);
    BOOST_TEST(p.a->stats().channels_open == 0u);  // closed with the timeout
    auto second = p.a->call(b_name, "t", "sleep", boost::json::array{0});
    BOOST_TEST_REQUIRE(second.has_value(), second.error().message);
    BOOST_TEST_REQUIRE(eventually([&] { return p.sleeps_ended == 2; }, 2s));
    for (int i = 0; i < 3; ++i) {
        auto next = p.echo(i);
        BOOST_TEST_REQUIRE(next.has_value(), next.error().message);
        BOOST_TEST((next.value() == boost::json::array{i, "abc"}));
    }
    BOOST_TEST(p.a->stats().channels_open == 1u);
    BOOST_TEST(eventually([&] { return p.b->stats().channels_open == 1u; }, 2s));
}

// The caller's network thread is stuck (an inline handler there runs past
// the idle timeout), so b drops the link and closes its end of the channel while a still
// thinks the link is up. A blocking call then must not use the closed channel (nor crash):
// it is retired, and the call gets an answer or an error.
BOOST_AUTO_TEST_CASE(a_channel_the_peer_closed_while_idle_is_retired) {
    Pair p(true, 15s, true, 1s);
    p.a->register_function("t", "block", [](const boost::json::array&) -> rpclb::CallResult {
        std::this_thread::sleep_for(2500ms);  // holds a's network thread past b's idle timeout
        return 1;
    }, {.run_inline = true});
    BOOST_TEST_REQUIRE(p.echo(1).has_value());
    BOOST_TEST_REQUIRE(eventually([&] { return p.b->stats().channels_open == 1u; }, 2s));
    BOOST_TEST_REQUIRE(p.b->cast("a@127.0.0.1", "t", "block", {}).has_value());
    // b's idle timeout (1 s) drops a and closes the channel; a's network thread still sleeps.
    BOOST_TEST_REQUIRE(eventually([&] { return p.b->stats().channels_open == 0u; }, 3s));
    rpclb::CallOptions o;
    o.timeout = 2s;
    auto r = p.a->call(b_name, "t", "echo", boost::json::array{2}, o);
    BOOST_TEST((r.has_value() || r.error().code == rpclb::ErrorCode::service_unavailable ||
                r.error().code == rpclb::ErrorCode::request_timeout));
    // Once a sees the link again, calls work on a new channel.
    BOOST_TEST(eventually([&] { return p.echo(3).has_value(); }, 10s));
}

// When the channel dial stalls (the peer's only network thread is busy),
// the call must still end at its own deadline: the dial takes at most a quarter of it and
// the mesh link gets what is left.
BOOST_AUTO_TEST_CASE(a_call_whose_channel_dial_stalls_keeps_its_deadline) {
    Pair p(true, 15s, true, 30s);
    std::atomic<bool> blocking{false};
    p.b->register_function("t", "block", [&blocking](const boost::json::array&) -> rpclb::CallResult {
        blocking = true;
        std::this_thread::sleep_for(3s);  // holds b's only network thread: the dial stalls
        return 1;
    }, {.run_inline = true});
    BOOST_TEST_REQUIRE(p.a->cast(b_name, "t", "block", {}).has_value());  // b's network thread sleeps 3 s
    BOOST_TEST_REQUIRE(eventually([&] { return blocking.load(); }, 2s));
    rpclb::CallOptions o;
    o.timeout = 1000ms;
    const auto began = std::chrono::steady_clock::now();
    auto r = p.a->call(b_name, "t", "echo", boost::json::array{1}, o);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout, r.error().message);
    BOOST_TEST(took.count() < 1400, "the call took " << took.count() << " ms with a 1000 ms timeout");
}

// Worker-pool handlers' answers on a channel go through the connection's queue, inline
// handlers' from the network thread: requests for both, from one caller and from several
// at once, get their own answers.
BOOST_AUTO_TEST_CASE(inline_and_worker_answers_on_channels_reach_their_callers) {
    Pair p;
    for (int i = 0; i < 200; ++i) {
        auto r = p.a->call(b_name, "t", i % 3 == 2 ? "echo" : "work", boost::json::array{i});
        BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
        BOOST_TEST((r.value() == boost::json::array{i}));
    }
    BOOST_TEST(p.a->stats().channel_calls == 200u);
    constexpr int callers = 4;
    std::vector<std::future<std::string>> outcomes;
    for (int t = 0; t < callers; ++t)
        outcomes.push_back(std::async(std::launch::async, [&, t]() -> std::string {
            for (int i = 0; i < 300; ++i) {
                auto r = p.a->call(b_name, "t", i % 2 ? "work" : "echo", boost::json::array{t, i});
                if (!r) return r.error().message;
                if (r.value() != boost::json::array{t, i}) return "a wrong answer: " + boost::json::serialize(r.value());
            }
            return {};
        }));
    for (auto& outcome : outcomes) {
        BOOST_TEST_REQUIRE((outcome.wait_for(30s) == std::future_status::ready));
        BOOST_TEST(outcome.get() == "");
    }
}

// b has two workers: while one caller's loop of calls keeps them busy and a 3 s sleep
// holds one of them, a call on a third channel is still run within its 1 s timeout.
BOOST_AUTO_TEST_CASE(a_call_on_a_channel_is_not_held_up_by_another_callers_loop) {
    Pair p;
    std::atomic<bool> done{false};
    std::atomic<int> looped{0};
    auto looping = std::async(std::launch::async, [&]() -> std::string {
        for (int i = 0; !done; ++i) {
            auto r = p.a->call(b_name, "t", "work", boost::json::array{i});
            if (!r) return r.error().message;
            ++looped;
        }
        return {};
    });
    BOOST_TEST_REQUIRE(eventually([&] { return looped > 10; }, 10s));
    auto sleeper = std::async(std::launch::async, [&] { return p.a->call(b_name, "t", "sleep", boost::json::array{3000}); });
    BOOST_TEST_REQUIRE(eventually([&] { return p.sleeps_begun == 1; }, 5s));
    rpclb::CallOptions quick;
    quick.timeout = 1s;
    auto r = p.a->call(b_name, "t", "work", boost::json::array{"other"}, quick);
    BOOST_TEST(r.has_value(), (r ? "" : r.error().message));
    done = true;
    BOOST_TEST(looping.get() == "");
    BOOST_TEST(sleeper.get().has_value());
}

// A call that timed out closed its channel: the next call goes on another channel and
// does not wait behind the handler it never asked for.
BOOST_AUTO_TEST_CASE(a_call_after_one_that_timed_out_does_not_wait_behind_its_handler) {
    Pair p;
    BOOST_TEST_REQUIRE(p.echo(0).has_value());  // dials the channel the short call then takes
    rpclb::CallOptions quick;
    quick.timeout = 100ms;
    auto first = p.a->call(b_name, "t", "sleep", boost::json::array{2000}, quick);
    BOOST_TEST_REQUIRE(!first.has_value());
    BOOST_TEST(first.error().code == rpclb::ErrorCode::request_timeout);
    const auto began = std::chrono::steady_clock::now();
    auto next = p.a->call(b_name, "t", "work", boost::json::array{1});
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    BOOST_TEST_REQUIRE(next.has_value(), next.error().message);
    BOOST_TEST(took.count() < 1000, "the next call took " << took.count() << " ms; the handler before it sleeps 2000");
    BOOST_TEST(p.a->stats().channel_calls == 3u);
    BOOST_TEST(p.a->stats().channels_open == 1u);
}

// Several callers, each on its own channel, get their own answers from worker-pool
// handlers, while the peer stops under them: every call ends with its answer or, once the peer
// said bye, an error at once; none waits for its deadline.
BOOST_AUTO_TEST_CASE(worker_answers_on_channels_reach_their_callers_while_the_peer_stops) {
    Pair p;
    constexpr int callers = 4;
    std::atomic<int> answered{0};
    std::vector<std::future<std::string>> outcomes;
    rpclb::CallOptions o;
    o.timeout = 10s;
    for (int t = 0; t < callers; ++t)
        outcomes.push_back(std::async(std::launch::async, [&, t]() -> std::string {
            for (int i = 0;; ++i) {
                auto r = p.a->call(b_name, "t", "work", boost::json::array{t, i}, o);
                if (!r) return r.error().code == rpclb::ErrorCode::request_timeout ? "timed out: " + r.error().message
                                                                                    : std::string();
                if (r.value() != boost::json::array{t, i}) return "a wrong answer: " + boost::json::serialize(r.value());
                ++answered;
            }
        }));
    BOOST_TEST_REQUIRE(eventually([&] { return answered >= 400; }, 10s));
    const auto stopping = std::chrono::steady_clock::now();
    p.b->stop();
    for (auto& outcome : outcomes) {
        BOOST_TEST_REQUIRE((outcome.wait_for(5s) == std::future_status::ready));
        BOOST_TEST(outcome.get() == "");
    }
    BOOST_TEST((std::chrono::steady_clock::now() - stopping < 5s));
}

// A caller whose calls keep timing out must not pile up channels on the peer: each
// timed-out call closes its channel, and the peer, which keeps reading it while the
// handler runs, closes its end within a round trip.
BOOST_AUTO_TEST_CASE(calls_that_keep_timing_out_hold_at_most_sixteen_channels) {
    Pair p;
    BOOST_TEST_REQUIRE(p.echo(0).has_value());
    rpclb::CallOptions quick;
    quick.timeout = 20ms;
    for (int i = 0; i < 40; ++i) {
        auto r = p.a->call(b_name, "t", "sleep", boost::json::array{100}, quick);
        BOOST_TEST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().code == rpclb::ErrorCode::request_timeout);
        BOOST_TEST(p.b->stats().channels_open <= 16u);
    }
    BOOST_TEST(p.a->stats().channels_open <= 16u);
    BOOST_TEST(p.b->stats().channels_open <= 16u);
}

// The acceptor's side of the limit: a peer (here a hand-driven one) that opens channels
// without end gets 32 (twice what a caller opens, CallChannels::max_per_node), and every
// further one is closed at once; those it has keep serving.
BOOST_AUTO_TEST_CASE(a_node_accepts_at_most_thirty_two_channels_from_one_peer) {
    Pair p(true, 15s, true, 30s);
    const auto port = p.b->listen_endpoint()->port();
    const rpclb::detail::wire::PeerInfo r{"r@127.0.0.1", "inc-r", "", true};
    rpclb::test::RawPeer link(port);
    BOOST_REQUIRE(!link.handshake(r, rpclb::test::test_cookie));
    BOOST_REQUIRE(eventually([&] { return p.b->connected_nodes().size() == 2; }, 5s));
    std::vector<std::unique_ptr<rpclb::test::RawPeer>> channels;
    for (int i = 0; i < 32; ++i) {
        channels.push_back(std::make_unique<rpclb::test::RawPeer>(port));
        BOOST_REQUIRE(!channels.back()->handshake(r, rpclb::test::test_cookie, 5s, true));
    }
    BOOST_TEST(eventually([&] { return p.b->stats().channels_open == 32u; }, 5s));
    for (int i = 0; i < 3; ++i) {
        rpclb::test::RawPeer extra(port);
        BOOST_REQUIRE(!extra.handshake(r, rpclb::test::test_cookie, 5s, true));
        BOOST_TEST(extra.wait_closed(5s), "channel " << 33 + i << " was kept open");
    }
    BOOST_TEST(p.b->stats().channels_open == 32u);
    for (auto* c : {channels.front().get(), channels.back().get()}) {
        BOOST_REQUIRE(c->send(rpclb::detail::wire::Request{7, "t", "echo", {1}, {}}));
        const auto answer = c->read_response(7, 5s);
        BOOST_REQUIRE(answer.has_value());
        BOOST_TEST((answer->at("ok") == boost::json::array{1}));
    }
    // The peer's own node keeps its link and serves the rest of the cluster.
    BOOST_TEST(p.echo(1).has_value());
    BOOST_TEST(p.b->connected_nodes().size() == 2u);
}

// Beast's blocking reads over the polled socket take an answer in as many receives as it
// needs: every size comes back whole, from inline and worker handlers alike.
BOOST_AUTO_TEST_CASE(answers_of_every_size_come_back_whole_on_a_channel) {
    Pair p;
    const auto before = p.a->stats().channel_calls;
    int calls = 0;
    for (std::size_t size : {0, 10, 4000, 4084, 4086, 4096, 5000, 60000, 65526, 65536, 70000, 300000}) {
        for (const char* function : {"echo", "work"}) {
            auto r = p.a->call(b_name, "t", function, boost::json::array{std::string(size, 'x'), size});
            BOOST_TEST_REQUIRE(r.has_value(), function << " " << size << ": " << r.error().message);
            BOOST_TEST(r.value().as_array().at(0).as_string().size() == size);
            BOOST_TEST(r.value().as_array().at(1).to_number<std::size_t>() == size);
            ++calls;
        }
    }
    BOOST_TEST(p.a->stats().channel_calls - before == static_cast<std::uint64_t>(calls));
}
