#include <rpclb/detail/log.hpp>
#include <rpclb/supervisor.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace rpclb {

namespace {

using Clock = std::chrono::steady_clock;

// The message of the exception being handled.
std::string current_exception_text() {
    try {
        throw;
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "unknown exception";
    }
}

// One stop() running on a helper thread; shared with it, so an abandoned stop can still
// say when it returns.
struct StopCall {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;

    void finish() {
        {
            std::lock_guard lock(mutex);
            done = true;
        }
        done_cv.notify_all();
    }
    bool wait_for(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex);
        return done_cv.wait_for(lock, timeout, [&] { return done; });
    }
    bool finished() {
        std::lock_guard lock(mutex);
        return done;
    }
};

// A report of a child, or a restart to try again after a child failed to start.
struct Report {
    std::string child;
    std::uint64_t generation = 0;
    ServiceExit exit;
    bool retry = false;  // the child failed to start during a restart
};

// Where children's reports wait for the control thread. Shared with the receivers
// installed in the children, which may outlive the supervisor.
struct Mailbox {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Report> reports;
    bool open = false;

    void post(Report report) {
        {
            std::lock_guard lock(mutex);
            if (!open) return;
            reports.push_back(std::move(report));
        }
        wake.notify_one();
    }
    // The next report; nullopt once closed.
    std::optional<Report> take() {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return !open || !reports.empty(); });
        if (!open) return std::nullopt;
        Report r = std::move(reports.front());
        reports.pop_front();
        return r;
    }
    void set_open(bool value) {
        {
            std::lock_guard lock(mutex);
            open = value;
            reports.clear();
        }
        wake.notify_all();
    }
};

std::string describe(const ServiceExit& exit) { return exit.failed ? exit.reason : "normal exit"; }

}  // namespace

const char* to_string(RestartStrategy strategy) noexcept {
    switch (strategy) {
        case RestartStrategy::one_for_one: return "one_for_one";
        case RestartStrategy::one_for_all: return "one_for_all";
        case RestartStrategy::rest_for_one: return "rest_for_one";
    }
    return "unknown";
}

const char* to_string(RestartType type) noexcept {
    switch (type) {
        case RestartType::permanent: return "permanent";
        case RestartType::transient: return "transient";
        case RestartType::temporary: return "temporary";
    }
    return "unknown";
}

const char* to_string(SupervisorState state) noexcept {
    switch (state) {
        case SupervisorState::stopped: return "stopped";
        case SupervisorState::starting: return "starting";
        case SupervisorState::running: return "running";
        case SupervisorState::stopping: return "stopping";
        case SupervisorState::failed: return "failed";
    }
    return "unknown";
}

const char* to_string(SupervisorEvent::Kind kind) noexcept {
    switch (kind) {
        case SupervisorEvent::Kind::restart: return "restart";
        case SupervisorEvent::Kind::escalation: return "escalation";
    }
    return "unknown";
}

struct Supervisor::Impl {
    struct Child {
        explicit Child(ChildSpec s) : spec(std::move(s)) {}

        ChildSpec spec;
        bool started = false;
        std::uint64_t generation = 0;          // bumped before each start()
        std::shared_ptr<StopCall> overrunning;  // a stop() abandoned after its shutdown
    };

    Impl(Supervisor& o, SupervisorOptions opts) : owner(o), options(std::move(opts)) {
        if (!options.clock) options.clock = [] { return Clock::now(); };
    }

    // ---- children (all under ops) --------------------------------------------------

    std::optional<std::size_t> index_of(std::string_view id) const {
        for (std::size_t i = 0; i < children.size(); ++i)
            if (children[i].spec.id == id) return i;
        return std::nullopt;
    }

    void validate(const ChildSpec& spec) const {
        if (spec.id.empty()) throw std::invalid_argument("supervisor " + options.name + ": child id must not be empty");
        if (!spec.service)
            throw std::invalid_argument("supervisor " + options.name + ": child " + spec.id + " has no service");
        if (spec.shutdown.count() < 0)
            throw std::invalid_argument("supervisor " + options.name + ": child " + spec.id +
                                        " has a negative shutdown timeout");
        if (index_of(spec.id))
            throw std::invalid_argument("supervisor " + options.name + ": child " + spec.id + " already exists");
    }

    // Starts one child with a fresh generation; throws what its start() throws.
    void start_one(Child& c) {
        if (c.overrunning) {
            if (!c.overrunning->finished())
                throw std::runtime_error("its previous stop() has not returned (it overran its shutdown of " +
                                         std::to_string(c.spec.shutdown.count()) + " ms)");
            c.overrunning.reset();
        }
        const auto generation = ++c.generation;
        c.spec.service->set_exit_receiver(
            [box = std::weak_ptr<Mailbox>(mailbox), id = c.spec.id, generation](ServiceExit exit) {
                if (auto m = box.lock()) m->post(Report{id, generation, std::move(exit), false});
            });
        c.spec.service->start();
        c.started = true;
    }

    // Stops one child if started, waiting at most its shutdown.
    void stop_one(Child& c) noexcept {
        if (!c.started) return;
        c.started = false;
        auto service = c.spec.service;
        if (c.spec.shutdown == infinite_shutdown) {
            service->stop();
            return;
        }
        auto call = std::make_shared<StopCall>();
        std::thread helper;
        try {
            helper = std::thread([service, call] {
                service->stop();
                call->finish();
            });
        } catch (...) {
            service->stop();  // no thread to spare: stop inline, unbounded
            return;
        }
        if (call->wait_for(c.spec.shutdown)) {
            helper.join();
            return;
        }
        helper.detach();
        c.overrunning = std::move(call);
        RPCLB_LOG("supervisor", error) << "supervisor " << options.name << ": child " << c.spec.id
                                       << " did not stop within " << c.spec.shutdown.count()
                                       << " ms; abandoned (its stop() goes on in the background)";
    }

    void stop_all() noexcept {
        for (auto it = children.rbegin(); it != children.rend(); ++it) stop_one(*it);
    }

    // ---- restarts (control thread, under ops) ------------------------------------------

    // Records a restart now; false when that makes more than max_restarts in the window.
    bool count_restart() {
        const auto now = options.clock();
        restarts.push_back(now);
        while (!restarts.empty() && now - restarts.front() >= options.max_seconds) restarts.pop_front();
        return restarts.size() <= options.max_restarts;
    }

    // Removes the child at `at`; a late report from it goes nowhere.
    void erase_child(std::size_t at) {
        children[at].spec.service->set_exit_receiver({});
        children.erase(children.begin() + static_cast<std::ptrdiff_t>(at));
    }

    // Applies the strategy to the child at `failed`: stops the children concerned in
    // reverse order, removes the temporary ones among them (OTP never restarts those),
    // and starts the others again in order.
    void restart(std::size_t failed) {
        std::size_t first = failed, last = failed + 1;
        if (options.strategy == RestartStrategy::one_for_all) first = 0;
        if (options.strategy != RestartStrategy::one_for_one) last = children.size();
        for (std::size_t k = last; k-- > first;) stop_one(children[k]);
        std::vector<std::string> ids;
        for (std::size_t k = last; k-- > first;) {
            if (k != failed && children[k].spec.restart == RestartType::temporary)
                erase_child(k);
            else
                ids.insert(ids.begin(), children[k].spec.id);
        }
        for (const auto& id : ids) {
            if (stop_requested.load()) return;
            auto& c = children[*index_of(id)];
            try {
                start_one(c);
            } catch (...) {
                const auto why = current_exception_text();
                RPCLB_LOG("supervisor", error) << "supervisor " << options.name << ": child " << id
                                               << " failed to restart: " << why;
                mailbox->post(Report{id, c.generation, ServiceExit{true, "failed to restart: " + why}, true});
                return;
            }
        }
    }

    // Handles one report on the control thread. Events and an escalation are returned
    // through the arguments, to be published once ops is released.
    void handle(Report report, std::vector<SupervisorEvent>& events, std::optional<std::string>& escalation) {
        std::lock_guard lock(ops);
        if (stop_requested.load() || state.load() != SupervisorState::running) return;
        const auto at = index_of(report.child);
        if (!at) return;
        Child& c = children[*at];
        // Stale: from an earlier run of the child, or it was stopped since. A retry is for
        // a child that failed to start, so it is the one report about a stopped child.
        const bool stale = report.retry ? c.started : !c.started;
        if (c.generation != report.generation || stale) return;
        const bool failed = report.exit.failed;
        const auto reason = describe(report.exit);
        if (c.spec.restart == RestartType::temporary || (c.spec.restart == RestartType::transient && !failed)) {
            RPCLB_LOG("supervisor", info) << "supervisor " << options.name << ": " << to_string(c.spec.restart)
                                          << " child " << c.spec.id << " ended (" << reason
                                          << "); not restarted";
            stop_one(c);
            if (c.spec.restart == RestartType::temporary) erase_child(*at);
            return;
        }
        const SupervisorEvent event{SupervisorEvent::Kind::restart, options.name, c.spec.id, reason,
                                    options.strategy};
        if (!count_restart()) {
            RPCLB_LOG("supervisor", error) << "supervisor " << options.name << ": child " << c.spec.id << " ended ("
                                           << reason << "), more than " << options.max_restarts
                                           << " restarts in " << options.max_seconds.count()
                                           << " s; stopping every child and giving up";
            stop_all();
            for (std::size_t k = children.size(); k-- > 0;)
                if (children[k].spec.restart == RestartType::temporary) erase_child(k);
            state = SupervisorState::failed;
            events.push_back(event);
            events.back().kind = SupervisorEvent::Kind::escalation;
            escalation = "supervisor " + options.name + " reached its restart intensity (child " + event.child +
                         ": " + reason + ")";
            return;
        }
        RPCLB_LOG("supervisor", warning) << "supervisor " << options.name << ": child " << c.spec.id << " ended ("
                                         << reason << "); restarting (" << to_string(options.strategy) << ")";
        restart(*at);
        events.push_back(event);
    }

    void publish(const std::vector<SupervisorEvent>& events) noexcept {
        if (!options.on_event) return;
        for (const auto& e : events) {
            try {
                options.on_event(e);
            } catch (...) {
                RPCLB_LOG("supervisor", error) << "supervisor " << options.name
                                               << ": on_event threw: " << current_exception_text();
            }
        }
    }

    void run() noexcept {
        while (auto report = mailbox->take()) {
            std::vector<SupervisorEvent> events;
            std::optional<std::string> escalation;
            try {
                handle(std::move(*report), events, escalation);
            } catch (...) {
                RPCLB_LOG("supervisor", error) << "supervisor " << options.name
                                               << ": handling a child's report failed: " << current_exception_text();
            }
            publish(events);
            if (escalation) owner.report_failure(std::move(*escalation));
        }
    }

    void start_control() {
        mailbox->set_open(true);
        control = std::thread([this] { run(); });
    }

    void stop_control() noexcept {
        mailbox->set_open(false);
        if (control.joinable()) control.join();
    }

    Supervisor& owner;
    SupervisorOptions options;
    std::mutex life;          // serialises start() and stop()
    mutable std::mutex ops;   // children and restarts; held while children start and stop
    std::vector<Child> children;
    std::deque<Clock::time_point> restarts;
    std::atomic<SupervisorState> state{SupervisorState::stopped};
    std::atomic<bool> stop_requested{false};
    std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
    std::thread control;
};

Supervisor::Supervisor(SupervisorOptions options) {
    if (options.name.empty()) throw std::invalid_argument("supervisor name must not be empty");
    if (options.max_seconds.count() <= 0)
        throw std::invalid_argument("supervisor " + options.name + ": max_seconds must be positive");
    impl_ = std::make_unique<Impl>(*this, std::move(options));
}

Supervisor::~Supervisor() {
    stop();
    std::lock_guard lock(impl_->ops);
    for (auto& c : impl_->children) {
        c.spec.service->set_exit_receiver({});
        c.spec.service.reset();
    }
}

std::string Supervisor::name() const { return impl_->options.name; }

SupervisorState Supervisor::state() const noexcept { return impl_->state.load(); }

void Supervisor::start() {
    std::lock_guard life(impl_->life);
    if (impl_->state.load() == SupervisorState::running) return;
    impl_->stop_control();  // the idle control thread of a failed run
    impl_->stop_requested = false;
    impl_->start_control();
    std::string failure;
    {
        std::lock_guard lock(impl_->ops);
        impl_->state = SupervisorState::starting;
        impl_->restarts.clear();
        auto& children = impl_->children;
        for (std::size_t i = 0; i < children.size(); ++i) {
            try {
                impl_->start_one(children[i]);
            } catch (...) {
                failure = "child " + children[i].spec.id + " of supervisor " + impl_->options.name +
                          " failed to start: " + current_exception_text();
                impl_->stop_all();
                break;
            }
        }
        impl_->state = failure.empty() ? SupervisorState::running : SupervisorState::stopped;
    }
    if (failure.empty()) return;
    impl_->stop_control();
    throw std::runtime_error(failure);
}

void Supervisor::stop() noexcept {
    std::lock_guard life(impl_->life);
    if (impl_->state.load() == SupervisorState::stopped) return;
    impl_->stop_requested = true;
    impl_->state = SupervisorState::stopping;
    {
        std::lock_guard lock(impl_->ops);
        impl_->stop_all();
        impl_->state = SupervisorState::stopped;
    }
    impl_->stop_control();
}

void Supervisor::add_child(ChildSpec spec) {
    std::lock_guard lock(impl_->ops);
    const auto s = impl_->state.load();
    if (s != SupervisorState::stopped && s != SupervisorState::failed)
        throw std::logic_error("supervisor " + impl_->options.name + " is running; use start_child for " + spec.id);
    impl_->validate(spec);
    impl_->children.push_back(Impl::Child(std::move(spec)));
}

void Supervisor::start_child(ChildSpec spec) {
    std::lock_guard lock(impl_->ops);
    if (impl_->state.load() != SupervisorState::running || impl_->stop_requested.load())
        throw std::logic_error("supervisor " + impl_->options.name + " is not running; cannot start child " +
                               spec.id);
    impl_->validate(spec);
    impl_->children.push_back(Impl::Child(std::move(spec)));
    try {
        impl_->start_one(impl_->children.back());
    } catch (...) {
        const auto failure = "child " + impl_->children.back().spec.id + " of supervisor " + impl_->options.name +
                             " failed to start: " + current_exception_text();
        impl_->children.back().spec.service->set_exit_receiver({});
        impl_->children.pop_back();
        throw std::runtime_error(failure);
    }
}

bool Supervisor::terminate_child(std::string_view id) {
    std::lock_guard lock(impl_->ops);
    const auto at = impl_->index_of(id);
    if (!at) return false;
    auto& c = impl_->children[*at];
    impl_->stop_one(c);
    if (c.spec.restart == RestartType::temporary) impl_->erase_child(*at);
    return true;
}

bool Supervisor::remove_child(std::string_view id) {
    std::lock_guard lock(impl_->ops);
    const auto at = impl_->index_of(id);
    if (!at) return false;
    impl_->stop_one(impl_->children[*at]);
    impl_->erase_child(*at);
    return true;
}

std::vector<ChildStatus> Supervisor::which_children() const {
    std::lock_guard lock(impl_->ops);
    std::vector<ChildStatus> out;
    for (const auto& c : impl_->children) out.push_back(ChildStatus{c.spec.id, c.spec.restart, c.started});
    return out;
}

}  // namespace rpclb
