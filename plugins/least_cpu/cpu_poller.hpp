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

/// Keeps the CPU readings of one LeastCpu balancer's members fresh (seed §2.7
/// "Poller", with §10.9): the seed's `<name>_cpu_poller`.
///
/// start() serves the function `rpclb.cpu_reading` through the balancer's AlgorithmHost
/// (it replaces any earlier registration; every LeastCpu poller serves the same one) and
/// arms a steady_timer on the host's executor: no thread of its own. The first cycle
/// comes after a uniformly random time in [0, poll_startup_jitter], each next one
/// `poll_interval` after the previous one ends. A cycle:
///
/// 1. Samples the local CPU: busy over total time from /proc/stat, between this cycle and
///    the previous one. The first cycle has no previous sample, so it takes two 100 ms
///    apart (a timer wait between them). When /proc/stat can't be read the sample is
///    50.0 (a warning is logged once), as the seed does for a failing sampler.
///    `cpu_sampler_fixed` replaces the sample (testing aid).
/// 2. Stores it under the local node with the current time.
/// 3. Calls `rpclb.cpu_reading` on every remote member of the balancer (the host's
///    current snapshot), all at once with AlgorithmHost::async_call, each with a 2 s
///    deadline, and ends when every reply (or timeout) is in, or 3 s after the calls
///    went out, whichever comes first. A reply `{"cpu": number in [0, 100]}` is stored
///    under that node with the *local* time of its arrival, in the reading the snapshot
///    holds (AlgorithmState::readings), which is the one picks read; `null` (the
///    node has no reading yet) is ignored; an error or any other reply is logged at debug
///    and counted in the process-wide counter
///    `AlgorithmState::counter(balancer, "least_cpu.remote_errors")`.
///
/// `rpclb.cpu_reading` takes no arguments and returns the latest reading of the node
/// that serves it, `{"cpu": value}`, or `null` when it has none.
///
/// The first start() also pins the plugin's shared object in memory for the rest of the
/// process: the served function and the completions still queued after stop() are code
/// of this plugin, and the node may outlive every algorithm object.
///
/// A failed step (a std::exception) is logged at warning, ends the cycle as
/// `least_cpu.poll.exception`, and the next cycle runs as usual; anything else that
/// escapes is reported as a failure (Service::report_failure) and ends the polling, so
/// the balancer's supervisor restarts the poller together with its balancer (seed §3.6).
///
/// Lifetime: each start() makes a Run, the state its timer and call completions hold by
/// shared_ptr; stop() marks it stopped under its mutex and cancels the timer, so a
/// completion that runs later finds it, sees it stopped and touches nothing else (not the
/// host, not this object). start() after stop() makes a new Run.
///
/// Readings: the poller holds those of the members it polled last until its next cycle,
/// across its restarts too, so they carry over from one member snapshot to the next (a
/// snapshot frees its readings with itself) and a member that has left costs nothing
/// after one more cycle.
///
/// Thread safety: start() and stop() one at a time (Service's contract); stop() may be
/// called from any thread, including the executor's: it waits only for a step running
/// now (microseconds: a /proc/stat read, starting calls), never for the network.
class CpuPoller final : public Service {
public:
    /// Module and function of the reading every polling node serves.
    static constexpr const char* reading_module = "rpclb";
    static constexpr const char* reading_function = "cpu_reading";
    /// Deadline of each remote call (the seed's 2_000 ms).
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

    /// Serves `rpclb.cpu_reading` and arms the first cycle's timer. Throws
    /// std::logic_error without a host; std::bad_alloc. A second start() while running
    /// does nothing.
    void start() override;

    /// Cancels the timer and drops replies still to come; returns at once. Idempotent.
    void stop() noexcept override;

private:
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
