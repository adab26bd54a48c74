// OTP-style supervision of services: restart strategies, restart types, restart intensity,
// ordered start and reverse-order bounded shutdown.
#pragma once

#include <rpclb/service.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// Which children a supervisor restarts when one of them has to be restarted (OTP
/// `supervisor` strategies).
enum class RestartStrategy {
    one_for_one,   ///< only that child
    one_for_all,   ///< every child: all stop in reverse order, then all start in order
    rest_for_one,  ///< that child and the ones after it (started after it)
};

/// When a child is restarted after its work ended (OTP restart types).
enum class RestartType {
    permanent,  ///< always, whether it failed or exited normally
    transient,  ///< only after a failure; a normal exit leaves it stopped
    temporary,  ///< never: it is removed, even when a sibling's restart stopped it
};

/// "Wait for stop() however long it takes" (OTP's `infinity`); what nested supervisors
/// should use, since they bound their own children.
inline constexpr std::chrono::milliseconds infinite_shutdown = std::chrono::milliseconds::max();

/// One child of a supervisor.
struct ChildSpec {
    /// Unique among the supervisor's children; names the child in logs and events.
    /// Required, non-empty.
    std::string id;
    /// The service; required. The supervisor shares it: one supervisor per service.
    std::shared_ptr<Service> service;
    /// Default permanent.
    RestartType restart = RestartType::permanent;
    /// Longest wait for the child's stop(), 0 or more (0: don't wait at all), or
    /// `infinite_shutdown`. A stop() still running after it is logged and abandoned: it
    /// goes on, on a detached thread that keeps the service alive, and the supervisor
    /// carries on (a later start() of that child fails until that stop() returns). Code
    /// from a plugin may then run after its algorithm is gone, so size it generously.
    /// Default 5 s (OTP's worker default).
    std::chrono::milliseconds shutdown{5000};
};

/// A restart or an escalation, as published to SupervisorOptions::on_event (the Cluster
/// forwards them to the telemetry bus as `supervisor.restart`).
struct SupervisorEvent {
    enum class Kind {
        restart,     ///< `child` ended and the strategy restarted it (and its siblings)
        escalation,  ///< more than max_restarts in max_seconds: every child stopped and
                     ///< the supervisor failed (reported to its parent, if any)
    };
    Kind kind;
    std::string supervisor;    ///< the supervisor's name
    std::string child;         ///< id of the child whose end caused it
    std::string reason;        ///< the child's reason ("normal exit" for report_exit)
    RestartStrategy strategy;  ///< the supervisor's strategy
};

/// Options of a supervisor. Defaults are OTP's (and Elixir's `Supervisor`).
struct SupervisorOptions {
    /// Name for logs and events, e.g. the balancer's name. Required, non-empty.
    std::string name;
    /// Default one_for_one.
    RestartStrategy strategy = RestartStrategy::one_for_one;
    /// Restart intensity: more than `max_restarts` restarts within `max_seconds` and the
    /// supervisor gives up (stops every child and fails). 0 = the first restart already
    /// escalates. Default 3 in 5 s.
    std::size_t max_restarts = 3;
    /// The sliding window of the intensity; positive. Default 5 s.
    std::chrono::seconds max_seconds{5};
    /// The clock of the intensity window; empty = std::chrono::steady_clock::now. Tests
    /// inject one. Called on the control thread.
    std::function<std::chrono::steady_clock::time_point()> clock{};
    /// Receives every restart and escalation, on the supervisor's control thread, after
    /// the restart was done. Must not block, must not call this supervisor's members and
    /// must not destroy it; an exception it throws is logged and dropped. Empty = none.
    std::function<void(const SupervisorEvent&)> on_event{};
};

/// A supervisor's view of one child, for inspection (OTP `which_children`).
struct ChildStatus {
    std::string id;
    RestartType restart;
    bool running;  ///< start() returned and stop() has not been called since
};

/// Where a supervisor is in its life cycle.
enum class SupervisorState { stopped, starting, running, stopping, failed };

/// Supervises child services with OTP semantics (Erlang's `supervisor`;
/// predecessor-compatibility §1.1, §3.2, §3.6). start() starts the children in order, stop()
/// stops them in reverse, each within its `shutdown`. A child that reports the end of its
/// work is restarted by its RestartType and the RestartStrategy (stop() then start() on the
/// same objects); more than `max_restarts` within `max_seconds` stops every child, publishes
/// an `escalation` event and reports a failure to the parent (a root stays `failed`). It is a
/// Service itself, so trees nest. Reports from an earlier run of a child are ignored.
/// doc/explanation/supervision.md gives the rules and the reasons.
///
/// Thread safety: distinct objects safe; shared objects safe, except from on_event and from
/// its children's start() and stop(). Restarts run on the supervisor's own control thread,
/// never on the reporting one.
class Supervisor final : public Service {
public:
    /// Throws std::invalid_argument for an empty name or a non-positive max_seconds.
    explicit Supervisor(SupervisorOptions options);

    /// Stops (see stop()), then releases the children in start order.
    ~Supervisor() override;

    /// The options' name.
    std::string name() const override;

    /// Starts the control thread and every child in order; returns once all have
    /// started. Does nothing when running. When a child's start() throws, the children
    /// already started are stopped in reverse order and std::runtime_error is thrown:
    /// "child <id> of supervisor <name> failed to start: <what>". The intensity window
    /// starts empty. Also starts a supervisor that failed.
    void start() override;

    /// Stops every running child in reverse order, each bounded by its `shutdown`, then
    /// the control thread. A restart in progress finishes the child it is starting and
    /// starts no other; pending reports are dropped. Idempotent.
    void stop() noexcept override;

    /// Adds a child to a supervisor that is not running (stopped or failed); start()
    /// will start it after the ones added before. Throws std::invalid_argument for an
    /// empty id, a null service, a negative shutdown or a duplicate id, and
    /// std::logic_error when the supervisor is running.
    void add_child(ChildSpec spec);

    /// Adds a child to a running supervisor and starts it (after the existing children
    /// in start order). Throws std::invalid_argument as add_child(), std::logic_error
    /// when the supervisor is not running (or is stopping), and std::runtime_error as
    /// start() when the child's start() throws (the child is then not added).
    void start_child(ChildSpec spec);

    /// Stops the child `id` (bounded by its shutdown) and keeps it, stopped, until
    /// start() or a one_for_all / rest_for_one restart starts it again; a temporary
    /// child is removed instead. Returns false when there is no such child.
    bool terminate_child(std::string_view id);

    /// Stops the child `id` if it is running, and removes it. Returns false when there
    /// is no such child.
    bool remove_child(std::string_view id);

    /// The children in start order. Waits for a restart in progress to finish.
    std::vector<ChildStatus> which_children() const;

    /// The current state (stopping from the moment stop() is called).
    SupervisorState state() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// "one_for_one", "one_for_all", "rest_for_one".
const char* to_string(RestartStrategy strategy) noexcept;

/// "permanent", "transient", "temporary".
const char* to_string(RestartType type) noexcept;

/// "stopped", "starting", "running", "stopping", "failed".
const char* to_string(SupervisorState state) noexcept;

/// "restart", "escalation".
const char* to_string(SupervisorEvent::Kind kind) noexcept;

}  // namespace rpclb
