// rpclb::Supervisor: OTP strategies, restart types, intensity, ordered start and stop,
// bounded shutdown, and reports from many threads.
#define BOOST_TEST_MODULE supervisor
#include <boost/test/unit_test.hpp>

#include "support/wait.hpp"

#include <rpclb/supervisor.hpp>

#include <atomic>
#include <condition_variable>
#include <latch>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rpclb {

// Lets BOOST_TEST print the enums by name.
inline std::ostream& boost_test_print_type(std::ostream& out, SupervisorState s) { return out << to_string(s); }
inline std::ostream& boost_test_print_type(std::ostream& out, SupervisorEvent::Kind k) { return out << to_string(k); }
inline std::ostream& boost_test_print_type(std::ostream& out, RestartStrategy s) { return out << to_string(s); }

}  // namespace rpclb

using namespace std::chrono_literals;
using rpclb::ChildSpec;
using rpclb::RestartStrategy;
using rpclb::RestartType;
using rpclb::Supervisor;
using rpclb::SupervisorEvent;
using rpclb::SupervisorOptions;
using rpclb::SupervisorState;
using rpclb::test::consistently;
using rpclb::test::eventually;
using Strings = std::vector<std::string>;

namespace {

// What the test services did, in order, from any thread.
class Journal {
public:
    void add(std::string entry) {
        std::lock_guard lock(mutex_);
        entries_.push_back(std::move(entry));
    }
    Strings entries() const {
        std::lock_guard lock(mutex_);
        return entries_;
    }
    void clear() {
        std::lock_guard lock(mutex_);
        entries_.clear();
    }

private:
    mutable std::mutex mutex_;
    Strings entries_;
};

// A door a service waits at until the test opens it.
class Gate {
public:
    void wait() {
        std::unique_lock lock(mutex_);
        waiting_ = true;
        cv_.wait(lock, [&] { return open_; });
    }
    void open() {
        {
            std::lock_guard lock(mutex_);
            open_ = true;
        }
        cv_.notify_all();
    }
    bool waiting() {
        std::lock_guard lock(mutex_);
        return waiting_;
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool open_ = false;
    bool waiting_ = false;
};

// A service that journals "start <name>", "stop <name>" and "destroy <name>", and fails
// on command: by report from any thread, or by throwing from start().
class Probe final : public rpclb::Service {
public:
    Probe(std::string name, std::shared_ptr<Journal> journal) : name_(std::move(name)), journal_(std::move(journal)) {}
    ~Probe() override { journal_->add("destroy " + name_); }

    std::string name() const override { return name_; }

    void start() override {
        journal_->add("start " + name_);
        if (start_gate) start_gate->wait();
        if (refuse_starts > 0) {
            --refuse_starts;
            throw std::runtime_error(name_ + " refuses to start");
        }
        ++starts;
        if (fail_inside_start.exchange(false)) report_failure("failed inside start");
    }

    void stop() noexcept override {
        journal_->add("stop " + name_);
        if (stop_gate) stop_gate->wait();
        ++stops;
    }

    void fail(std::string reason) { report_failure(std::move(reason)); }
    void finish() { report_exit(); }

    std::atomic<int> starts{0};          // start() calls that returned
    std::atomic<int> stops{0};           // stop() calls that returned
    std::atomic<int> refuse_starts{0};   // the next this many start() calls throw
    std::atomic<bool> fail_inside_start{false};
    std::shared_ptr<Gate> start_gate;    // when set (before start), start() waits at it
    std::shared_ptr<Gate> stop_gate;     // when set (before stop), stop() waits at it

private:
    std::string name_;
    std::shared_ptr<Journal> journal_;
};

// A service with its own thread, which throws when told to (the exception escapes the
// thread's work and becomes a failure report).
class Worker final : public rpclb::Service {
public:
    std::string name() const override { return "worker"; }
    void start() override {
        throw_now_ = false;
        stopping_ = false;
        thread_ = std::thread([this] {
            run_reporting_failure([this] {
                std::unique_lock lock(mutex_);
                cv_.wait(lock, [&] { return stopping_ || throw_now_; });
                if (throw_now_) throw std::runtime_error("boom in the worker");
            });
        });
        ++starts;
    }
    void stop() noexcept override {
        if (!thread_.joinable()) return;
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    void throw_now() {
        {
            std::lock_guard lock(mutex_);
            throw_now_ = true;
        }
        cv_.notify_all();
    }
    std::atomic<int> starts{0};

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool throw_now_ = false;
    std::thread thread_;
};

// The events a supervisor published, from its control thread.
class Events {
public:
    std::function<void(const SupervisorEvent&)> sink() {
        return [this](const SupervisorEvent& e) {
            std::lock_guard lock(mutex_);
            events_.push_back(e);
        };
    }
    std::vector<SupervisorEvent> all() const {
        std::lock_guard lock(mutex_);
        return events_;
    }
    std::size_t size() const { return all().size(); }
    bool wait_for(std::size_t count) const {
        return eventually([&] { return size() >= count; }, 5s);
    }

private:
    mutable std::mutex mutex_;
    std::vector<SupervisorEvent> events_;
};

// A clock the test moves by hand.
class ManualClock {
public:
    std::function<std::chrono::steady_clock::time_point()> function() {
        return [this] { return std::chrono::steady_clock::time_point{} + std::chrono::seconds(seconds_.load()); };
    }
    void set(int seconds) { seconds_ = seconds; }

private:
    std::atomic<int> seconds_{1000};
};

// A supervisor with probes named `names`, all permanent, and its journal and events.
struct Tree {
    Tree(Strings names, SupervisorOptions options = {}) {
        if (options.name.empty()) options.name = "sup";
        options.on_event = events.sink();
        if (!options.clock) options.clock = clock.function();
        sup = std::make_unique<Supervisor>(std::move(options));
        for (const auto& n : names) add(n);
    }
    std::shared_ptr<Probe> add(const std::string& name, RestartType restart = RestartType::permanent,
                               std::chrono::milliseconds shutdown = 5s) {
        auto p = std::make_shared<Probe>(name, journal);
        probes.push_back(p);
        sup->add_child(ChildSpec{name, p, restart, shutdown});
        return p;
    }
    Probe& probe(const std::string& name) {
        for (auto& p : probes)
            if (p->name() == name) return *p;
        throw std::invalid_argument("no probe " + name);
    }
    // Reports a failure of `name` from a thread of its own, as a service's work would.
    void fail_from_thread(const std::string& name, std::string reason = "boom") {
        auto& p = probe(name);
        std::thread([&p, reason] { p.fail(reason); }).join();
    }
    // Waits until every report queued so far has been handled: fails the permanent child
    // `sentinel` and waits for the event of that restart (the control thread handles
    // reports in order).
    bool flush(const std::string& sentinel) {
        const auto reason = "flush " + std::to_string(++flushes);
        fail_from_thread(sentinel, reason);
        return eventually([&] {
            for (const auto& e : events.all())
                if (e.reason == reason) return true;
            return false;
        }, 5s);
    }
    Strings running() const {
        Strings out;
        for (const auto& c : sup->which_children())
            if (c.running) out.push_back(c.id);
        return out;
    }
    Strings ids() const {
        Strings out;
        for (const auto& c : sup->which_children()) out.push_back(c.id);
        return out;
    }

    std::shared_ptr<Journal> journal = std::make_shared<Journal>();
    Events events;
    ManualClock clock;
    int flushes = 0;
    std::vector<std::shared_ptr<Probe>> probes;
    std::unique_ptr<Supervisor> sup;
};

SupervisorOptions with(RestartStrategy strategy, std::size_t max_restarts = 3) {
    SupervisorOptions o;
    o.strategy = strategy;
    o.max_restarts = max_restarts;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(supervisor)

// ---- order ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(starts_children_in_order_and_stops_them_in_reverse) {
    Tree t({"a", "b", "c"});
    t.sup->start();
    BOOST_TEST(t.sup->state() == SupervisorState::running);
    BOOST_TEST(t.journal->entries() == (Strings{"start a", "start b", "start c"}), boost::test_tools::per_element());
    BOOST_TEST(t.running() == (Strings{"a", "b", "c"}), boost::test_tools::per_element());
    t.journal->clear();
    t.sup->stop();
    BOOST_TEST(t.sup->state() == SupervisorState::stopped);
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop b", "stop a"}), boost::test_tools::per_element());
    BOOST_TEST(t.running().empty());
    // The children stay, and start again in order.
    t.journal->clear();
    t.sup->start();
    BOOST_TEST(t.journal->entries() == (Strings{"start a", "start b", "start c"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(start_failure_stops_started_children_in_reverse_and_names_the_child) {
    Tree t({"a", "b", "c", "d"});
    t.probe("c").refuse_starts = 1;
    std::string what;
    try {
        t.sup->start();
    } catch (const std::runtime_error& e) {
        what = e.what();
    }
    BOOST_TEST(what == "child c of supervisor sup failed to start: c refuses to start");
    BOOST_TEST(t.journal->entries() == (Strings{"start a", "start b", "start c", "stop b", "stop a"}),
               boost::test_tools::per_element());
    BOOST_TEST(t.sup->state() == SupervisorState::stopped);
    BOOST_TEST(t.running().empty());
    t.sup->start();  // c starts this time
    BOOST_TEST(t.running() == (Strings{"a", "b", "c", "d"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(destruction_releases_children_in_start_order) {
    auto journal = std::make_shared<Journal>();
    {
        Tree t({"a", "b", "c"});
        journal = t.journal;
        t.sup->start();
        t.probes.clear();
        t.journal->clear();
        t.sup.reset();
    }
    BOOST_TEST(journal->entries() == (Strings{"stop c", "stop b", "stop a", "destroy a", "destroy b", "destroy c"}),
               boost::test_tools::per_element());
}

// ---- strategies ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(one_for_one_restarts_only_the_failed_child) {
    Tree t({"a", "b", "c"}, with(RestartStrategy::one_for_one));
    t.sup->start();
    t.journal->clear();
    t.fail_from_thread("b", "b broke");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.journal->entries() == (Strings{"stop b", "start b"}), boost::test_tools::per_element());
    const auto e = t.events.all().front();
    BOOST_TEST(e.kind == SupervisorEvent::Kind::restart);
    BOOST_TEST(e.supervisor == "sup");
    BOOST_TEST(e.child == "b");
    BOOST_TEST(e.reason == "b broke");
    BOOST_TEST(e.strategy == RestartStrategy::one_for_one);
    BOOST_TEST(t.running() == (Strings{"a", "b", "c"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(one_for_all_restarts_every_child_stopping_in_reverse_starting_in_order) {
    Tree t({"a", "b", "c"}, with(RestartStrategy::one_for_all));
    t.sup->start();
    t.journal->clear();
    t.fail_from_thread("b");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop b", "stop a", "start a", "start b", "start c"}),
               boost::test_tools::per_element());
    BOOST_TEST(t.running() == (Strings{"a", "b", "c"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rest_for_one_restarts_the_failed_child_and_the_ones_after_it) {
    Tree t({"a", "b", "c"}, with(RestartStrategy::rest_for_one));
    t.sup->start();
    t.journal->clear();
    t.fail_from_thread("b");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop b", "start b", "start c"}),
               boost::test_tools::per_element());
    BOOST_TEST(t.probe("a").starts == 1);
}

// ---- restart types ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(permanent_child_restarts_after_a_normal_exit) {
    Tree t({"p"});
    t.sup->start();
    std::thread([&] { t.probe("p").finish(); }).join();
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.events.all().front().reason == "normal exit");
    BOOST_TEST(t.probe("p").starts == 2);
}

BOOST_AUTO_TEST_CASE(transient_child_restarts_after_a_failure_but_not_after_a_normal_exit) {
    Tree t({"sentinel"});
    t.add("tr", RestartType::transient);
    t.sup->start();
    t.fail_from_thread("tr");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.probe("tr").starts == 2);
    std::thread([&] { t.probe("tr").finish(); }).join();
    BOOST_TEST_REQUIRE(t.flush("sentinel"));
    BOOST_TEST(t.probe("tr").starts == 2);
    BOOST_TEST(t.probe("tr").stops == 2);
    BOOST_TEST(t.ids() == (Strings{"sentinel", "tr"}), boost::test_tools::per_element());  // kept, stopped
    BOOST_TEST(t.running() == Strings{"sentinel"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(temporary_child_is_removed_when_it_ends_however_it_ends) {
    Tree t({"sentinel"});
    t.add("t1", RestartType::temporary);
    t.add("t2", RestartType::temporary);
    t.sup->start();
    t.fail_from_thread("t1");
    std::thread([&] { t.probe("t2").finish(); }).join();
    BOOST_TEST_REQUIRE(t.flush("sentinel"));
    BOOST_TEST(t.ids() == Strings{"sentinel"}, boost::test_tools::per_element());
    BOOST_TEST(t.probe("t1").starts == 1);
    BOOST_TEST(t.probe("t1").stops == 1);
    BOOST_TEST(t.probe("t2").starts == 1);
    BOOST_TEST(t.probe("t2").stops == 1);
}

BOOST_AUTO_TEST_CASE(temporary_sibling_stopped_by_one_for_all_is_not_restarted) {
    Tree t({"a"}, with(RestartStrategy::one_for_all));
    t.add("tmp", RestartType::temporary);
    t.add("c");
    t.sup->start();
    t.journal->clear();
    t.fail_from_thread("a");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop tmp", "stop a", "start a", "start c"}),
               boost::test_tools::per_element());
    BOOST_TEST(t.ids() == (Strings{"a", "c"}), boost::test_tools::per_element());
}

// ---- intensity -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(restarts_older_than_max_seconds_do_not_count) {
    auto options = with(RestartStrategy::one_for_one, 2);
    options.max_seconds = 5s;
    Tree t({"a"}, options);
    t.sup->start();
    t.clock.set(0);
    t.fail_from_thread("a");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    t.clock.set(1);
    t.fail_from_thread("a");
    BOOST_TEST_REQUIRE(t.events.wait_for(2));
    // 5 s after the first restart, it has left the window: 1 and 5 are 2 restarts.
    t.clock.set(5);
    t.fail_from_thread("a");
    BOOST_TEST_REQUIRE(t.events.wait_for(3));
    BOOST_TEST(t.events.all()[2].kind == SupervisorEvent::Kind::restart);
    // A third within [1, 5] is one too many.
    t.fail_from_thread("a");
    BOOST_TEST_REQUIRE(t.events.wait_for(4));
    BOOST_TEST(t.events.all()[3].kind == SupervisorEvent::Kind::escalation);
    BOOST_TEST(t.sup->state() == SupervisorState::failed);
}

BOOST_AUTO_TEST_CASE(root_escalation_stops_every_child_in_reverse_and_publishes_it) {
    Tree t({"a", "b", "c"}, with(RestartStrategy::one_for_one, 0));
    t.sup->start();
    t.journal->clear();
    t.fail_from_thread("b", "b broke");
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    const auto e = t.events.all().front();
    BOOST_TEST(e.kind == SupervisorEvent::Kind::escalation);
    BOOST_TEST(e.child == "b");
    BOOST_TEST(e.reason == "b broke");
    BOOST_TEST(t.sup->state() == SupervisorState::failed);
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop b", "stop a"}), boost::test_tools::per_element());
    // A failed root stays down until its owner starts it again.
    BOOST_TEST(consistently([&] { return t.running().empty(); }, 50ms));
    t.sup->start();
    BOOST_TEST(t.running() == (Strings{"a", "b", "c"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(intensity_exceeded_escalates_to_the_parent_which_restarts_the_subtree) {
    Tree parent({"sibling"}, with(RestartStrategy::one_for_one));
    auto child_options = with(RestartStrategy::one_for_one, 1);
    child_options.name = "nested";
    Tree nested({"leaf"}, child_options);
    auto nested_sup = std::shared_ptr<Supervisor>(std::move(nested.sup));
    nested.sup.reset();
    parent.sup->add_child(ChildSpec{"nested", nested_sup, RestartType::permanent, rpclb::infinite_shutdown});
    parent.sup->start();
    auto& leaf = nested.probe("leaf");
    BOOST_TEST(leaf.starts == 1);

    nested.fail_from_thread("leaf");  // 1 restart: within the intensity
    BOOST_TEST_REQUIRE(nested.events.wait_for(1));
    nested.fail_from_thread("leaf");  // 2 > 1: nested gives up and tells its parent
    BOOST_TEST_REQUIRE(parent.events.wait_for(1));
    const auto nested_events = nested.events.all();
    BOOST_TEST_REQUIRE(nested_events.size() == 2u);
    BOOST_TEST(nested_events[1].kind == SupervisorEvent::Kind::escalation);
    const auto up = parent.events.all().front();
    BOOST_TEST(up.kind == SupervisorEvent::Kind::restart);
    BOOST_TEST(up.child == "nested");
    BOOST_TEST(up.reason.find("restart intensity") != std::string::npos, up.reason);
    // The parent restarted the subtree: leaf runs again, the sibling was left alone.
    BOOST_TEST(nested_sup->state() == SupervisorState::running);
    BOOST_TEST(leaf.starts == 3);
    BOOST_TEST(parent.probe("sibling").starts == 1);
    // The restarted subtree has a fresh intensity window.
    nested.fail_from_thread("leaf");
    BOOST_TEST_REQUIRE(nested.events.wait_for(3));
    BOOST_TEST(nested.events.all()[2].kind == SupervisorEvent::Kind::restart);
    BOOST_TEST(parent.events.size() == 1u);
    parent.sup->stop();  // before `nested`, whose clock and events the subtree uses, is gone
}

BOOST_AUTO_TEST_CASE(child_that_cannot_restart_is_retried_until_the_intensity_escalates) {
    Tree t({"a", "b"}, with(RestartStrategy::one_for_one, 2));
    t.sup->start();
    t.probe("b").refuse_starts = 1000;
    t.fail_from_thread("b");
    BOOST_TEST_REQUIRE(t.events.wait_for(3));
    const auto events = t.events.all();
    BOOST_TEST(events[0].kind == SupervisorEvent::Kind::restart);
    BOOST_TEST(events[1].kind == SupervisorEvent::Kind::restart);
    BOOST_TEST(events[1].reason == "failed to restart: b refuses to start");
    BOOST_TEST(events[2].kind == SupervisorEvent::Kind::escalation);
    BOOST_TEST(t.sup->state() == SupervisorState::failed);
    BOOST_TEST(t.running().empty());
    BOOST_TEST(t.probe("b").refuse_starts == 998);  // two restart attempts
}

// ---- reports -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(failure_reported_inside_start_is_handled_after_start_returns) {
    Tree t({"a", "b"});
    t.probe("a").fail_inside_start = true;
    t.sup->start();
    BOOST_TEST_REQUIRE(t.events.wait_for(1));
    BOOST_TEST(t.events.all().front().reason == "failed inside start");
    BOOST_TEST(t.probe("a").starts == 2);
    BOOST_TEST(t.probe("b").starts == 1);
}

BOOST_AUTO_TEST_CASE(exception_escaping_a_service_thread_is_a_failure_and_restarts_it) {
    Events events;
    SupervisorOptions options;
    options.name = "sup";
    options.on_event = events.sink();
    Supervisor sup(options);
    auto worker = std::make_shared<Worker>();
    sup.add_child(ChildSpec{"worker", worker});
    sup.start();
    worker->throw_now();
    BOOST_TEST_REQUIRE(events.wait_for(1));
    BOOST_TEST(events.all().front().reason == "exception escaped worker: boom in the worker");
    BOOST_TEST(worker->starts == 2);
    sup.stop();
}

BOOST_AUTO_TEST_CASE(many_reports_of_one_run_restart_the_child_once) {
    Tree t({"a", "sentinel"}, with(RestartStrategy::one_for_one, 100));
    t.sup->start();
    // Hold the control thread in the sentinel's restart, so that every report below is
    // about a's first run when it is handled.
    auto gate = std::make_shared<Gate>();
    t.probe("sentinel").start_gate = gate;
    t.fail_from_thread("sentinel", "hold");
    BOOST_TEST_REQUIRE(eventually([&] { return gate->waiting(); }, 5s));
    constexpr int reporters = 16;
    std::latch go(reporters);
    std::vector<std::thread> threads;
    for (int i = 0; i < reporters; ++i)
        threads.emplace_back([&] {
            go.arrive_and_wait();
            t.probe("a").fail("together");
        });
    for (auto& th : threads) th.join();
    gate->open();
    BOOST_TEST_REQUIRE(t.flush("sentinel"));
    BOOST_TEST(t.probe("a").starts == 2);
    BOOST_TEST(t.events.size() == 3u);  // the held restart, a's one restart, the flush
}

BOOST_AUTO_TEST_CASE(failures_of_many_children_at_once_restart_each_once) {
    constexpr int children = 16;
    Strings names;
    for (int i = 0; i < children; ++i) names.push_back("c" + std::to_string(i));
    Tree t(names, with(RestartStrategy::one_for_one, 100));
    t.sup->start();
    std::latch go(children);
    std::vector<std::thread> threads;
    for (const auto& n : names)
        threads.emplace_back([&, n] {
            go.arrive_and_wait();
            t.probe(n).fail("together");
        });
    for (auto& th : threads) th.join();
    BOOST_TEST_REQUIRE(t.events.wait_for(children));
    for (const auto& n : names) BOOST_TEST(t.probe(n).starts == 2, n);
    BOOST_TEST(t.running() == names, boost::test_tools::per_element());
    BOOST_TEST(consistently([&] { return t.events.size() == static_cast<std::size_t>(children); }, 50ms));
}

// ---- shutdown ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(child_hanging_in_stop_is_abandoned_after_its_shutdown_timeout) {
    Tree t({"a"});
    auto& hung = *t.add("hung", RestartType::permanent, 100ms);
    t.add("c");
    auto gate = std::make_shared<Gate>();
    hung.stop_gate = gate;
    t.sup->start();
    t.journal->clear();
    const auto began = std::chrono::steady_clock::now();
    t.sup->stop();
    const auto took = std::chrono::steady_clock::now() - began;
    BOOST_TEST(took >= 100ms);
    BOOST_TEST(took < 2s);
    BOOST_TEST(t.journal->entries() == (Strings{"stop c", "stop hung", "stop a"}), boost::test_tools::per_element());
    BOOST_TEST(t.sup->state() == SupervisorState::stopped);
    // Its stop() still runs: it can't start again until that returns.
    BOOST_TEST(gate->waiting());
    std::string what;
    try {
        t.sup->start();
    } catch (const std::runtime_error& e) {
        what = e.what();
    }
    BOOST_TEST(what.find("child hung of supervisor sup failed to start: its previous stop() has not returned") == 0u,
               what);
    gate->open();
    BOOST_TEST_REQUIRE(eventually([&] { return hung.stops == 1; }, 5s));
    t.sup->start();
    BOOST_TEST(t.running() == (Strings{"a", "hung", "c"}), boost::test_tools::per_element());
    hung.stop_gate.reset();
}

BOOST_AUTO_TEST_CASE(stop_during_a_restart_drops_pending_reports_and_starts_nothing_more) {
    Tree t({"a", "b", "c"}, with(RestartStrategy::one_for_one));
    t.sup->start();
    auto gate = std::make_shared<Gate>();
    t.probe("a").start_gate = gate;
    t.fail_from_thread("a");  // the restart waits in a's start()
    BOOST_TEST_REQUIRE(eventually([&] { return gate->waiting(); }, 5s));
    t.fail_from_thread("b");  // queued behind it: pending
    std::thread stopper([&] { t.sup->stop(); });
    BOOST_TEST_REQUIRE(eventually([&] { return t.sup->state() == SupervisorState::stopping; }, 5s));
    gate->open();
    stopper.join();
    BOOST_TEST(t.sup->state() == SupervisorState::stopped);
    BOOST_TEST(t.probe("a").starts == 2);  // the restart in progress finished...
    BOOST_TEST(t.probe("b").starts == 1);  // ...the pending one never ran
    for (const auto& n : Strings{"a", "b", "c"}) BOOST_TEST(t.probe(n).stops == t.probe(n).starts, n);
    BOOST_TEST(t.running().empty());
    BOOST_TEST(t.events.size() <= 1u);
}

// ---- dynamic children ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(children_added_while_running_start_at_once_and_can_be_terminated_or_removed) {
    Tree t({"a"});
    auto d = std::make_shared<Probe>("d", t.journal);
    BOOST_CHECK_THROW(t.sup->start_child(ChildSpec{"d", d}), std::logic_error);  // not running
    t.sup->start();
    BOOST_CHECK_THROW(t.sup->add_child(ChildSpec{"d", d}), std::logic_error);  // running
    t.sup->start_child(ChildSpec{"d", d});
    BOOST_TEST(d->starts == 1);
    BOOST_TEST(t.running() == (Strings{"a", "d"}), boost::test_tools::per_element());
    BOOST_CHECK_THROW(t.sup->start_child(ChildSpec{"d", d}), std::invalid_argument);
    BOOST_CHECK_THROW(t.sup->start_child(ChildSpec{"", d}), std::invalid_argument);
    BOOST_CHECK_THROW(t.sup->start_child(ChildSpec{"x", nullptr}), std::invalid_argument);

    auto refuses = std::make_shared<Probe>("r", t.journal);
    refuses->refuse_starts = 1;
    BOOST_CHECK_THROW(t.sup->start_child(ChildSpec{"r", refuses}), std::runtime_error);
    BOOST_TEST(t.ids() == (Strings{"a", "d"}), boost::test_tools::per_element());

    BOOST_TEST(t.sup->terminate_child("d"));
    BOOST_TEST(d->stops == 1);
    BOOST_TEST(t.ids() == (Strings{"a", "d"}), boost::test_tools::per_element());
    BOOST_TEST(t.running() == Strings{"a"}, boost::test_tools::per_element());
    // A report from a terminated child is stale.
    d->fail("late");
    BOOST_TEST(t.flush("a"));
    BOOST_TEST(d->starts == 1);

    BOOST_TEST(t.sup->remove_child("d"));
    BOOST_TEST(t.ids() == Strings{"a"}, boost::test_tools::per_element());
    BOOST_TEST(!t.sup->remove_child("d"));
    BOOST_TEST(!t.sup->terminate_child("nope"));
}

BOOST_AUTO_TEST_CASE(options_are_checked) {
    BOOST_CHECK_THROW(Supervisor(SupervisorOptions{}), std::invalid_argument);
    SupervisorOptions zero_window;
    zero_window.name = "s";
    zero_window.max_seconds = 0s;
    BOOST_CHECK_THROW(Supervisor{zero_window}, std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
