// The poller that keeps LeastCpu's readings fresh.
#pragma once

#include "cpu_times.hpp"
#include "least_cpu.hpp"

#include <rpclb/algorithm_state.hpp>
#include <rpclb/service.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace rpclb::plugins {

/// The service that keeps one LeastCpu balancer's CPU readings fresh (the predecessor's
/// `<name>_cpu_poller`; predecessor-compatibility §2.7, §10.9). Every `poll_interval`, the
/// first time after a random wait of up to `poll_startup_jitter`, it samples the local CPU
/// from /proc/stat and asks each remote member for its reading through `rpclb.cpu_reading`,
/// which it serves itself (no arguments; `{"cpu": 0..100}`, or `null` before the first
/// sample). It runs on timers of the host's executor, with no thread of its own; the cycle
/// is described in doc/reference/algorithms.md.
///
/// Errors: a failed step is logged at warning and the next cycle runs as usual; a failed or
/// malformed remote reply is logged at debug and counted (`least_cpu.remote_errors`);
/// anything else that escapes is reported (Service::report_failure), so the supervisor
/// restarts the poller with its balancer.
///
/// Thread safety: start() and stop() one at a time (Service's contract); stop() may be
/// called from any thread, including the executor's, and never waits for the network.
class CpuPoller final : public Service {
public:
    /// Module and function of the reading every polling node serves.
    static constexpr const char* reading_module = "rpclb";
    static constexpr const char* reading_function = "cpu_reading";
    /// Deadline of each remote call (the predecessor's 2_000 ms).
    static constexpr std::chrono::milliseconds remote_timeout{2000};
    /// Window of the first local sample, which has no previous one.
    static constexpr std::chrono::milliseconds first_sample_window{100};

    /// `context.host` may be null (then start() throws std::logic_error); it must stay
    /// valid until stop() has returned.
    CpuPoller(AlgorithmContext context, LeastCpuSettings settings);

    /// Stops the poller.
    ~CpuPoller() override;

    /// "<balancer>_cpu_poller".
    std::string name() const override;

    /// Serves `rpclb.cpu_reading` (replacing any earlier registration) and arms the first
    /// cycle's timer. The first start() pins the plugin's shared object for the rest of
    /// the process: the served function and late completions are its code. Throws
    /// std::logic_error without a host; std::bad_alloc. A second start() while running
    /// does nothing.
    void start() override;

    /// Cancels the timer and drops replies still to come; returns at once. Idempotent.
    void stop() noexcept override;

private:
    // The state of one start(), held by its timer and call completions through a
    // shared_ptr. stop() marks it stopped under its mutex, so a completion that runs later
    // touches nothing else (not the host, not this object).
    struct Run;
    friend struct Run;

    // Service::report_failure is protected; a Run reports through this.
    void fail(std::string reason) noexcept { report_failure(std::move(reason)); }

    AlgorithmContext context_;
    LeastCpuSettings settings_;
    std::shared_ptr<NodeReading> local_reading_;
    std::atomic<std::int64_t>& remote_errors_;
    std::shared_ptr<Run> run_;
    // The readings of the members polled last (written by the running Run under its
    // mutex): they outlive the snapshot they came from until the next cycle.
    std::shared_ptr<const ReadingTable> held_readings_;
};

}  // namespace rpclb::plugins
