// W3C trace context travels with calls: a handler reads its context (current_trace()),
// a call made from a handler continues the trace as a child span, hedged attempts are
// child spans of their call, a cast carries the trace to its handler, the span sink
// (rpc.span) receives every span of a sampled trace, and a malformed traceparent starts a
// new trace and is counted, never refused.
#define BOOST_TEST_MODULE trace_context
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/log.hpp>
#include <rpclb/telemetry.hpp>
#include <rpclb/trace.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/core/null_deleter.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/sync_frontend.hpp>
#include <boost/log/sinks/text_ostream_backend.hpp>
#include <boost/log/trivial.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rpclb::test::eventually;
namespace wire = rpclb::detail::wire;

namespace {

const std::string sampled_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// One rpc.span event, copied.
struct SpanRecord {
    std::string kind, node, module, function, status, trace_id, span_id, parent_span_id;
    std::int64_t start_ns = 0;
    std::chrono::nanoseconds duration{0};
};

// The span sink of one node: every rpc.span it emits.
class SpanRecorder {
public:
    explicit SpanRecorder(rpclb::Cluster& node)
        : connection_(node.telemetry().connect([this](const rpclb::Event& e) {
              if (e.name != rpclb::EventName::rpc_span) return;
              std::lock_guard lock(mutex_);
              spans_.push_back(SpanRecord{std::string(e.kind), std::string(e.node), std::string(e.module),
                                          std::string(e.function), std::string(e.status), std::string(e.trace_id),
                                          std::string(e.span_id), std::string(e.parent_span_id), e.system_time_ns,
                                          e.duration});
          })) {}
    std::vector<SpanRecord> spans() const {
        std::lock_guard lock(mutex_);
        return spans_;
    }
    std::optional<SpanRecord> find(const std::string& span_id) const {
        for (auto& s : spans())
            if (s.span_id == span_id) return s;
        return std::nullopt;
    }

private:
    mutable std::mutex mutex_;
    std::vector<SpanRecord> spans_;
    rpclb::TelemetryBus::ScopedConnection connection_;
};

// The trace context a handler saw.
struct Seen {
    std::string trace_id, span_id, parent_span_id;
    bool sampled = false;
};

Seen seen_here() {
    const auto t = rpclb::current_trace();
    if (!t) return {};
    return Seen{rpclb::to_hex(t->trace_id), rpclb::to_hex(t->span_id),
                t->parent_span_id == rpclb::SpanId{} ? std::string() : rpclb::to_hex(t->parent_span_id), t->sampled()};
}

// Nodes a and b, connected. b's t.seen records what its handler sees; a's t.outer
// records what it sees and calls b's t.seen.
struct Duo {
    Duo() {
        a = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("a@127.0.0.1"));
        a->start();
        b = std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options("b@127.0.0.1", {address(*a)}));
        for (auto* node : {a.get(), b.get()})
            node->register_function("t", "seen", [this](const boost::json::array&) -> rpclb::CallResult {
                std::lock_guard lock(mutex);
                inner.push_back(seen_here());
                return "seen";
            });
        a->register_function("t", "outer", [this](const boost::json::array&) -> rpclb::CallResult {
            {
                std::lock_guard lock(mutex);
                outer.push_back(seen_here());
            }
            return a->call("b@127.0.0.1", "t", "seen", {});
        });
        b->start();
        BOOST_REQUIRE(eventually([&] { return a->connected_nodes().size() == 1 && b->connected_nodes().size() == 1; }, 10s));
    }
    ~Duo() {
        b->stop();
        a->stop();
    }
    std::unique_ptr<rpclb::Cluster> a, b;
    std::mutex mutex;
    std::vector<Seen> outer, inner;
};

}  // namespace

BOOST_AUTO_TEST_CASE(nested_call_continues_the_trace_as_a_child_span) {
    Duo d;
    SpanRecorder spans_a(*d.a);
    {
        const rpclb::TraceScope scope(sampled_parent);
        auto r = d.b->call("a@127.0.0.1", "t", "outer", {});
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message);
    }
    BOOST_REQUIRE_EQUAL(d.outer.size(), 1u);
    BOOST_REQUIRE_EQUAL(d.inner.size(), 1u);
    const auto& outer = d.outer[0];
    const auto& inner = d.inner[0];
    // Both handlers are in the caller's trace, sampled as it said.
    BOOST_TEST(outer.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(inner.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(outer.sampled);
    BOOST_TEST(inner.sampled);
    BOOST_TEST(inner.span_id != outer.span_id);
    BOOST_TEST(!inner.parent_span_id.empty());
    // b's handler's parent is a's attempt, whose parent is a's call, whose parent is a's
    // handler: the span sink of a has both.
    BOOST_REQUIRE(eventually([&] { return spans_a.find(inner.parent_span_id).has_value(); }, 5s));
    const auto attempt = *spans_a.find(inner.parent_span_id);
    BOOST_TEST(attempt.kind == "attempt");
    BOOST_TEST(attempt.node == "b@127.0.0.1");
    BOOST_TEST(attempt.status == "ok");
    BOOST_TEST(attempt.trace_id == outer.trace_id);
    BOOST_REQUIRE(eventually([&] { return spans_a.find(attempt.parent_span_id).has_value(); }, 5s));
    const auto call = *spans_a.find(attempt.parent_span_id);
    BOOST_TEST(call.kind == "call");
    BOOST_TEST(call.module == "t");
    BOOST_TEST(call.function == "seen");
    BOOST_TEST(call.parent_span_id == outer.span_id);
    BOOST_TEST(call.start_ns <= attempt.start_ns);
    BOOST_TEST(call.duration >= attempt.duration);
    // a's own handler span, a child of b's attempt (b's sink is not connected: no span of
    // b's is needed for a to record its server span).
    BOOST_REQUIRE(eventually([&] { return spans_a.find(outer.span_id).has_value(); }, 5s));
    const auto server = *spans_a.find(outer.span_id);
    BOOST_TEST(server.kind == "server");
    BOOST_TEST(server.node == "a@127.0.0.1");
    BOOST_TEST(server.parent_span_id == outer.parent_span_id);
}

BOOST_AUTO_TEST_CASE(call_without_context_starts_a_new_trace) {
    Duo d;
    for (int i = 0; i < 2; ++i) BOOST_REQUIRE(d.b->call("a@127.0.0.1", "t", "seen", {}).has_value());
    BOOST_REQUIRE_EQUAL(d.inner.size(), 2u);
    for (const auto& s : d.inner) {
        BOOST_TEST(s.trace_id.size() == 32u);
        BOOST_TEST(s.trace_id != std::string(32, '0'));
        BOOST_TEST(!s.parent_span_id.empty());  // the caller's attempt
        BOOST_TEST(!s.sampled);                 // nobody listens to b's telemetry
    }
    BOOST_TEST(d.inner[0].trace_id != d.inner[1].trace_id);
    // Outside any handler and scope, a thread has no context.
    BOOST_TEST(!rpclb::current_trace().has_value());
}

BOOST_AUTO_TEST_CASE(a_call_to_this_node_is_a_child_span_too) {
    Duo d;
    const rpclb::TraceScope scope(sampled_parent);
    BOOST_REQUIRE(d.a->call("a@127.0.0.1", "t", "seen", {}).has_value());
    BOOST_REQUIRE_EQUAL(d.inner.size(), 1u);
    BOOST_TEST(d.inner[0].trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(d.inner[0].parent_span_id != "00f067aa0ba902b7");  // the attempt's, not the scope's
    BOOST_TEST(!d.inner[0].parent_span_id.empty());
}

BOOST_AUTO_TEST_CASE(a_cast_carries_the_trace_to_its_handler_on_another_node_and_on_this_one) {
    Duo d;
    {
        const rpclb::TraceScope scope(sampled_parent);
        BOOST_REQUIRE(d.b->cast("a@127.0.0.1", "t", "seen").has_value());  // over the link
        BOOST_REQUIRE(d.a->cast("a@127.0.0.1", "t", "seen").has_value());  // to this node
    }
    BOOST_REQUIRE(d.b->cast("a@127.0.0.1", "t", "seen").has_value());  // no context: a new trace
    BOOST_REQUIRE(eventually([&] {
        std::lock_guard lock(d.mutex);
        return d.inner.size() == 3;
    }, 10s));
    std::lock_guard lock(d.mutex);
    int in_scope = 0;
    for (const auto& s : d.inner) {
        BOOST_TEST(s.trace_id.size() == 32u);
        BOOST_TEST(!s.parent_span_id.empty());  // the cast's attempt
        BOOST_TEST(s.parent_span_id != "00f067aa0ba902b7");
        if (s.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736") {
            ++in_scope;
            BOOST_TEST(s.sampled);
        }
    }
    BOOST_TEST(in_scope == 2);
}

BOOST_AUTO_TEST_CASE(telemetry_events_of_a_call_carry_its_ids) {
    Duo d;
    std::mutex mutex;
    std::vector<std::pair<std::string, std::string>> ids;  // rpc.start and rpc.stop's
    auto connection = d.b->telemetry().connect([&](const rpclb::Event& e) {
        if (e.name != rpclb::EventName::rpc_start && e.name != rpclb::EventName::rpc_stop) return;
        std::lock_guard lock(mutex);
        ids.emplace_back(std::string(e.trace_id), std::string(e.span_id));
    });
    {
        const rpclb::TraceScope scope(sampled_parent);
        BOOST_REQUIRE(d.b->call("a@127.0.0.1", "t", "seen", {}).has_value());
    }
    connection.disconnect();
    std::lock_guard lock(mutex);
    BOOST_REQUIRE_EQUAL(ids.size(), 2u);
    BOOST_TEST(ids[0].first == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(ids[0].second.size() == 16u);
    BOOST_TEST(ids[0].first == ids[1].first);
    BOOST_TEST(ids[0].second == ids[1].second);
}

BOOST_AUTO_TEST_CASE(hedged_attempts_are_child_spans_of_their_call) {
    // Members fast@ and slow@ of round-robin balancer h; slow@ answers only once its
    // caller gave up on it. A client with a span sink (so the traces it starts are sampled).
    std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
    for (const char* name : {"fast@127.0.0.1", "slow@127.0.0.1"}) {
        auto seeds = nodes.empty() ? std::vector<std::string>{} : std::vector<std::string>{address(*nodes.front())};
        nodes.push_back(std::make_unique<rpclb::Cluster>(rpclb::test::in_process_node_options(name, seeds)));
        const bool slow = std::string(name) == "slow@127.0.0.1";
        nodes.back()->register_function("t", "work", [slow](const boost::json::array&) -> rpclb::CallResult {
            const auto began = std::chrono::steady_clock::now();
            while (slow && !rpclb::call_cancelled() && std::chrono::steady_clock::now() - began < 5s)
                std::this_thread::sleep_for(1ms);
            return "done";
        });
        nodes.back()->start();
        nodes.back()->start_balancer(rpclb::test::balancer_options("h", "round_robin"));
    }
    auto o = rpclb::test::in_process_node_options("client@127.0.0.1", {address(*nodes.front())});
    o.client = true;
    rpclb::Cluster client(o);
    client.start();
    BOOST_REQUIRE(rpclb::test::wait_for_members(client, "h", {"fast@127.0.0.1", "slow@127.0.0.1"}, 10s));
    SpanRecorder spans(client);
    SpanRecorder fast_spans(*nodes.front());
    rpclb::CallOptions hedged;
    hedged.load_balancer = "h";
    hedged.idempotent = true;
    hedged.hedging = rpclb::Hedging{.delay = 20ms, .max_attempts = 2};
    // Round robin alternates: of four calls, at least one starts on slow@ and is hedged.
    for (int i = 0; i < 4; ++i) BOOST_REQUIRE(client.call("t", "work", {}, hedged).has_value());
    BOOST_REQUIRE(client.balancer("h").value()->hedge_stats().hedges >= 1);
    // Every attempt, the slow one's included (its answer comes once it saw the cancel).
    BOOST_REQUIRE(eventually([&] {
        std::size_t attempts = 0, calls = 0;
        for (const auto& s : spans.spans()) (s.kind == "attempt" ? attempts : calls) += 1;
        return calls == 4 && attempts == 4 + client.balancer("h").value()->hedge_stats().hedges;
    }, 10s));
    bool saw_hedged_call = false;
    for (const auto& call : spans.spans()) {
        if (call.kind != "call") continue;
        BOOST_TEST(call.parent_span_id.empty());  // a root: the client had no context
        std::vector<SpanRecord> attempts;
        for (const auto& s : spans.spans())
            if (s.kind == "attempt" && s.parent_span_id == call.span_id) attempts.push_back(s);
        BOOST_TEST(!attempts.empty());
        for (const auto& a : attempts) BOOST_TEST(a.trace_id == call.trace_id);
        if (attempts.size() < 2) continue;
        saw_hedged_call = true;
        BOOST_TEST(attempts[0].span_id != attempts[1].span_id);
        BOOST_TEST(attempts[0].node != attempts[1].node);
        // fast@'s handler ran as a child of the attempt sent to it.
        for (const auto& a : attempts)
            if (a.node == "fast@127.0.0.1")
                BOOST_TEST(eventually([&] {
                    for (const auto& s : fast_spans.spans())
                        if (s.kind == "server" && s.parent_span_id == a.span_id) return true;
                    return false;
                }, 5s));
    }
    BOOST_TEST(saw_hedged_call);
    client.stop();
    for (auto& n : nodes) n->stop();
}

BOOST_AUTO_TEST_CASE(malformed_traceparent_starts_a_new_trace_and_is_counted) {
    Duo d;
    rpclb::test::RawPeer raw(d.a->listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, rpclb::test::test_cookie));
    const std::vector<std::string> bad{
        R"("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")",  // version ff
        R"("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")",  // uppercase
        R"("00-00000000000000000000000000000000-00f067aa0ba902b7-01")",  // all-zero trace id
        R"("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7")",     // too short
        "42",                                                            // not a string
    };
    std::uint64_t id = 0;
    for (const auto& tp : bad) {
        ++id;
        BOOST_REQUIRE(raw.send(R"({"t":"req","id":)" + std::to_string(id) + R"(,"m":"t","f":"seen","a":[],"tp":)" + tp +
                               "}"));
        auto res = raw.read_response(id, 5s);
        BOOST_REQUIRE(res);
        BOOST_TEST(res->contains("ok"), tp);
    }
    BOOST_TEST(d.a->stats().bad_traceparents == bad.size());
    BOOST_REQUIRE_EQUAL(d.inner.size(), bad.size());
    for (const auto& s : d.inner) {
        BOOST_TEST(s.trace_id != "4bf92f3577b34da6a3ce929d0e0e4736");
        BOOST_TEST(s.trace_id.size() == 32u);
        BOOST_TEST(s.parent_span_id.empty());  // a new trace starts at this handler
        BOOST_TEST(!s.sampled);
    }
    // A valid one is continued and not counted; none at all (an older peer) is not counted.
    BOOST_REQUIRE(raw.send(R"({"t":"req","id":100,"m":"t","f":"seen","a":[],"tp":")" + sampled_parent + "\"}"));
    BOOST_REQUIRE(raw.read_response(100, 5s));
    BOOST_REQUIRE(raw.send(R"({"t":"req","id":101,"m":"t","f":"seen","a":[]})"));
    BOOST_REQUIRE(raw.read_response(101, 5s));
    BOOST_TEST(d.a->stats().bad_traceparents == bad.size());
    BOOST_REQUIRE_EQUAL(d.inner.size(), bad.size() + 2);
    BOOST_TEST(d.inner[bad.size()].trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
    BOOST_TEST(d.inner[bad.size()].parent_span_id == "00f067aa0ba902b7");
    BOOST_TEST(d.inner[bad.size()].sampled);
    BOOST_TEST(d.inner[bad.size() + 1].parent_span_id.empty());
}

BOOST_AUTO_TEST_CASE(log_records_in_a_handler_carry_its_ids) {
    namespace bl = boost::log;
    rpclb::log::use_application_sinks("info");  // adds the "Trace" attribute for this sink
    auto text = boost::make_shared<std::ostringstream>();
    auto backend = boost::make_shared<bl::sinks::text_ostream_backend>();
    backend->add_stream(text);
    auto sink = boost::make_shared<bl::sinks::synchronous_sink<bl::sinks::text_ostream_backend>>(backend);
    sink->set_formatter(bl::expressions::stream << bl::expressions::smessage
                                                << bl::expressions::attr<std::string>("Trace"));
    bl::core::get()->add_sink(sink);
    {
        Duo d;
        d.a->register_function("t", "logs", [](const boost::json::array&) -> rpclb::CallResult {
            BOOST_LOG_TRIVIAL(info) << "inside the handler";
            return "logged";
        });
        const rpclb::TraceScope scope(sampled_parent);
        BOOST_REQUIRE(d.b->call("a@127.0.0.1", "t", "logs", {}).has_value());
    }
    BOOST_LOG_TRIVIAL(info) << "outside";
    bl::core::get()->remove_sink(sink);
    rpclb::log::init("warning");  // rpclb's console sink again, for what follows
    const auto logged = text->str();
    BOOST_TEST(logged.find("inside the handler trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=") != std::string::npos,
               logged);
    BOOST_TEST(logged.find("outside\n") != std::string::npos, logged);
}
