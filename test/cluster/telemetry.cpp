// rpclb::TelemetryBus: connect/disconnect, scoped connections, failing listeners,
// concurrency, and the cost of emitting with nobody listening (doc/reference/telemetry.md).
#define BOOST_TEST_MODULE telemetry
#include <rpclb/telemetry.hpp>

#include <boost/test/unit_test.hpp>

#include "support/wait.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// ---- allocation counting -----------------------------------------------------------------
// Replacing the global allocation functions counts every allocation of the program,
// librpclb's included, per thread.

namespace {
thread_local std::size_t thread_allocations = 0;

void* counted_alloc(std::size_t size, std::size_t alignment = 0) {
    ++thread_allocations;
    if (size == 0) size = 1;
    void* p = alignment ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                        : std::malloc(size);
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void* operator new(std::size_t size, std::align_val_t a) {
    return counted_alloc(size, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t size, std::align_val_t a) {
    return counted_alloc(size, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

// ---- tests -------------------------------------------------------------------------------

using namespace std::chrono_literals;
using rpclb::Event;
using rpclb::EventName;
using rpclb::TelemetryBus;
using rpclb::test::eventually;

namespace {

Event rpc_stop_event() {
    return Event{.name = EventName::rpc_stop,
                 .duration = 1500us,
                 .type = "call",
                 .node = "a@host",
                 .module = "billing",
                 .function = "charge",
                 .load_balancer = "workers",
                 .status = "ok"};
}

// Emits as an instrumented call site does: test active() first, build the Event after.
void emit_guarded(const TelemetryBus& bus, const std::string& node) {
    if (bus.active())
        bus.emit({.name = EventName::membership_join, .node = node, .group = "workers"});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(telemetry)

BOOST_AUTO_TEST_CASE(event_names_are_dotted_as_the_predecessors) {
    const std::vector<std::pair<EventName, std::string_view>> expected{
        {EventName::rpc_start, "rpc.start"},
        {EventName::rpc_stop, "rpc.stop"},
        {EventName::rpc_exception, "rpc.exception"},
        {EventName::node_selected, "node_selected"},
        {EventName::node_selected_empty, "node_selected.empty"},
        {EventName::least_cpu_poll_start, "least_cpu.poll.start"},
        {EventName::least_cpu_poll_stop, "least_cpu.poll.stop"},
        {EventName::least_cpu_poll_exception, "least_cpu.poll.exception"},
        {EventName::least_cpu_poll_remote_error, "least_cpu.poll.remote_error"},
        {EventName::membership_join, "membership.join"},
        {EventName::membership_leave, "membership.leave"},
        {EventName::drain_begin, "drain.begin"},
        {EventName::drain_end, "drain.end"},
        {EventName::supervisor_restart, "supervisor.restart"},
        {EventName::plugin_loaded, "plugin.loaded"},
        {EventName::plugin_rejected, "plugin.rejected"},
        {EventName::member_ejected, "member.ejected"},
        {EventName::member_returned, "member.returned"},
        {EventName::rpc_attempt, "rpc.attempt"},
        {EventName::rpc_span, "rpc.span"},
    };
    BOOST_TEST(expected.size() == rpclb::event_name_count);
    for (const auto& [name, text] : expected) BOOST_TEST(rpclb::to_string(name) == text);
    BOOST_TEST(rpclb::to_string(static_cast<EventName>(200)) == "unknown");
}

BOOST_AUTO_TEST_CASE(connected_listener_receives_the_event_fields) {
    TelemetryBus bus;
    BOOST_TEST(!bus.active());
    std::vector<std::string> seen;
    auto c = bus.connect([&](const Event& e) {
        seen.push_back(std::string(rpclb::to_string(e.name)) + " " + std::string(e.node) + " " +
                       std::string(e.status) + " " + std::to_string(e.duration.count()));
    });
    BOOST_TEST(c.connected());
    BOOST_TEST(bus.active());
    BOOST_TEST(bus.listener_count() == 1u);
    bus.emit(rpc_stop_event());
    BOOST_TEST_REQUIRE(seen.size() == 1u);
    BOOST_TEST(seen[0] == "rpc.stop a@host ok 1500000");
}

BOOST_AUTO_TEST_CASE(disconnect_stops_delivery_and_clears_active) {
    TelemetryBus bus;
    int calls = 0;
    auto c = bus.connect([&](const Event&) { ++calls; });
    bus.emit(rpc_stop_event());
    c.disconnect();
    BOOST_TEST(!c.connected());
    BOOST_TEST(!bus.active());
    BOOST_TEST(bus.listener_count() == 0u);
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls == 1);
    c.disconnect();  // again: nothing
    BOOST_TEST(bus.listener_count() == 0u);
}

BOOST_AUTO_TEST_CASE(copies_of_a_connection_disconnect_it_once) {
    TelemetryBus bus;
    int first = 0, second = 0;
    auto a = bus.connect([&](const Event&) { ++first; });
    auto b = bus.connect([&](const Event&) { ++second; });
    auto copy = a;
    copy.disconnect();
    BOOST_TEST(!a.connected());  // the original sees it
    a.disconnect();              // must not count the listener down a second time
    BOOST_TEST(bus.listener_count() == 1u);
    BOOST_TEST(bus.active());
    bus.emit(rpc_stop_event());
    BOOST_TEST(first == 0);
    BOOST_TEST(second == 1);
    BOOST_TEST(b.connected());
}

BOOST_AUTO_TEST_CASE(default_connection_is_not_connected) {
    TelemetryBus::Connection c;
    BOOST_TEST(!c.connected());
    c.disconnect();
    TelemetryBus::ScopedConnection s;
    BOOST_TEST(!s.connected());
}

BOOST_AUTO_TEST_CASE(scoped_connection_disconnects_at_scope_exit) {
    TelemetryBus bus;
    int calls = 0;
    {
        TelemetryBus::ScopedConnection c = bus.connect([&](const Event&) { ++calls; });
        BOOST_TEST(bus.active());
        bus.emit(rpc_stop_event());
    }
    BOOST_TEST(!bus.active());
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls == 1);
}

BOOST_AUTO_TEST_CASE(moved_scoped_connection_disconnects_with_its_new_owner) {
    TelemetryBus bus;
    int calls = 0;
    TelemetryBus::ScopedConnection outer;
    {
        TelemetryBus::ScopedConnection inner = bus.connect([&](const Event&) { ++calls; });
        outer = std::move(inner);
    }  // the moved-from inner must not disconnect
    BOOST_TEST(outer.connected());
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls == 1);

    // Assigning over a scoped connection disconnects what it held.
    outer = bus.connect([](const Event&) {});
    BOOST_TEST(bus.listener_count() == 1u);
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls == 1);
    outer.disconnect();
    BOOST_TEST(!bus.active());
}

BOOST_AUTO_TEST_CASE(released_scoped_connection_stays_connected) {
    TelemetryBus bus;
    TelemetryBus::Connection kept;
    {
        TelemetryBus::ScopedConnection c = bus.connect([](const Event&) {});
        kept = c.release();
        BOOST_TEST(!c.connected());
    }
    BOOST_TEST(kept.connected());
    BOOST_TEST(bus.active());
    kept.disconnect();
    BOOST_TEST(!bus.active());
}

BOOST_AUTO_TEST_CASE(many_listeners_are_called_in_connection_order) {
    TelemetryBus bus;
    std::vector<int> order;
    std::vector<TelemetryBus::ScopedConnection> connections;
    for (int i = 0; i < 100; ++i)
        connections.emplace_back(bus.connect([&order, i](const Event&) { order.push_back(i); }));
    BOOST_TEST(bus.listener_count() == 100u);
    bus.emit(rpc_stop_event());
    BOOST_TEST_REQUIRE(order.size() == 100u);
    for (int i = 0; i < 100; ++i) BOOST_TEST(order[i] == i);
    // Drop every other listener: the rest still hear, in order.
    for (int i = 0; i < 100; i += 2) connections[i].disconnect();
    order.clear();
    bus.emit(rpc_stop_event());
    BOOST_TEST_REQUIRE(order.size() == 50u);
    for (int i = 0; i < 50; ++i) BOOST_TEST(order[i] == 2 * i + 1);
}

BOOST_AUTO_TEST_CASE(throwing_listener_reaches_neither_the_emitter_nor_stops_the_others) {
    TelemetryBus bus;
    int before = 0, after = 0;
    TelemetryBus::ScopedConnection a = bus.connect([&](const Event&) { ++before; });
    TelemetryBus::ScopedConnection b =
        bus.connect([](const Event&) { throw std::runtime_error("listener failed"); });
    TelemetryBus::ScopedConnection c = bus.connect([](const Event&) { throw 42; });
    TelemetryBus::ScopedConnection d = bus.connect([&](const Event&) { ++after; });
    BOOST_CHECK_NO_THROW(bus.emit(rpc_stop_event()));
    BOOST_CHECK_NO_THROW(bus.emit(rpc_stop_event()));
    BOOST_TEST(before == 2);
    BOOST_TEST(after == 2);
}

BOOST_AUTO_TEST_CASE(empty_listener_is_rejected) {
    TelemetryBus bus;
    BOOST_CHECK_THROW(bus.connect(rpclb::Listener{}), std::invalid_argument);
    BOOST_TEST(!bus.active());
}

BOOST_AUTO_TEST_CASE(listener_may_disconnect_itself_while_called) {
    TelemetryBus bus;
    int calls = 0;
    TelemetryBus::Connection self;
    self = bus.connect([&](const Event&) {
        ++calls;
        self.disconnect();
    });
    bus.emit(rpc_stop_event());
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls == 1);
    BOOST_TEST(!bus.active());
}

BOOST_AUTO_TEST_CASE(disconnect_returns_while_the_listener_runs_on_another_thread) {
    TelemetryBus bus;
    std::atomic<bool> inside{false}, release{false};
    std::atomic<int> calls{0};
    auto c = bus.connect([&](const Event&) {
        ++calls;
        inside = true;
        eventually([&] { return release.load(); }, 10s, 1ms);
        inside = false;
    });
    std::thread emitter([&] { bus.emit(rpc_stop_event()); });
    BOOST_TEST_REQUIRE(eventually([&] { return inside.load(); }, 10s, 1ms));
    c.disconnect();  // documented: doesn't wait for the running listener
    BOOST_TEST(inside.load());
    BOOST_TEST(!c.connected());
    BOOST_TEST(!bus.active());
    release = true;
    emitter.join();
    bus.emit(rpc_stop_event());
    BOOST_TEST(calls.load() == 1);
}

BOOST_AUTO_TEST_CASE(concurrent_connect_disconnect_and_emit_keep_the_count_right) {
    TelemetryBus bus;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> heard{0};
    std::vector<std::thread> emitters;
    for (int t = 0; t < 2; ++t)
        emitters.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed)) bus.emit(rpc_stop_event());
        });
    // Two threads churn listeners; some disconnect through a copy on another thread.
    std::vector<std::thread> churners;
    for (int t = 0; t < 2; ++t)
        churners.emplace_back([&] {
            for (int i = 0; i < 2000; ++i) {
                auto c = bus.connect([&](const Event&) { heard.fetch_add(1); });
                if (i % 2) {
                    std::thread([copy = c] { auto c2 = copy; c2.disconnect(); }).join();
                    c.disconnect();
                } else {
                    TelemetryBus::ScopedConnection scoped = c;
                }
            }
        });
    for (auto& t : churners) t.join();
    stop = true;
    for (auto& t : emitters) t.join();
    BOOST_TEST(bus.listener_count() == 0u);
    BOOST_TEST(!bus.active());
    const auto total = heard.load();
    bus.emit(rpc_stop_event());
    BOOST_TEST(heard.load() == total);
}

BOOST_AUTO_TEST_CASE(connection_outliving_its_bus_reports_disconnected) {
    TelemetryBus::Connection c;
    auto owned = std::make_shared<int>(0);
    std::weak_ptr<int> watch = owned;
    {
        TelemetryBus bus;
        c = bus.connect([owned](const Event&) { ++*owned; });
        owned.reset();
        BOOST_TEST(c.connected());
    }
    BOOST_TEST(!c.connected());
    BOOST_TEST(watch.expired());  // the bus released its listener
    c.disconnect();               // safe, does nothing
}

BOOST_AUTO_TEST_CASE(emit_without_listener_allocates_nothing) {
    // The counter counts (else this test could never fail).
    const std::size_t start = thread_allocations;
    auto probe = std::make_unique<int>(1);
    BOOST_TEST_REQUIRE(thread_allocations == start + 1);

    TelemetryBus bus;
    const std::string node = "node-with-a-name-longer-than-any-small-string-buffer@host";
    const std::size_t before = thread_allocations;
    for (int i = 0; i < 1000; ++i) {
        bus.emit(rpc_stop_event());
        emit_guarded(bus, node);
    }
    BOOST_TEST(thread_allocations == before);

    // The same once a listener came and went.
    {
        TelemetryBus::ScopedConnection c = bus.connect([](const Event&) {});
        bus.emit(rpc_stop_event());
    }
    const std::size_t again = thread_allocations;
    for (int i = 0; i < 1000; ++i) {
        bus.emit(rpc_stop_event());
        emit_guarded(bus, node);
    }
    BOOST_TEST(thread_allocations == again);
}

BOOST_AUTO_TEST_SUITE_END()
