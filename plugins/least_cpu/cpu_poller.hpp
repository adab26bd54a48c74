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
#include <optional>
#include <string>
#include <thread>

namespace rpclb {
class Cluster;
}

namespace rpclb::plugins {

/// Keeps the CPU readings of one LeastCpu balancer's members fresh (seed §2.7
/// "Poller", with §10.9): the seed's `<name>_cpu_poller`.
///
/// start() registers the function `rpclb.cpu_reading` on the cluster (it replaces any
/// earlier registration; every LeastCpu poller registers the same one) and starts a
/// thread. The thread waits a uniformly random time in [0, poll_startup_jitter], then
/// repeats a cycle and waits `poll_interval` after it ends. A cycle:
///
/// 1. Samples the local CPU: busy over total time from /proc/stat, between this cycle and
///    the previous one. The first cycle has no previous sample, so it takes two 100 ms
///    apart. When /proc/stat can't be read the sample is 50.0 (a warning is logged
///    once), as the seed does for a failing sampler. `cpu_sampler_fixed` replaces the
///    sample (testing aid).
/// 2. Stores it under the local node with the current time.
/// 3. Calls `rpclb.cpu_reading` on every remote member of the balancer's group, in
///    parallel, each with a 2 s timeout, and waits for the replies (or the timeouts). A
///    reply `{"cpu": number in [0, 100]}` is stored under that node with the *local*
///    time of its arrival; `null` (the node has no reading yet) is ignored; an error or
///    any other reply is logged at debug and counted in the process-wide counter
///    `AlgorithmState::counter(balancer, "least_cpu.remote_errors")`.
///
/// `rpclb.cpu_reading` takes no arguments and returns the latest reading of the node
/// that serves it, `{"cpu": value}`, or `null` when it has none.
///
/// The first start() also pins the plugin's shared object in memory for the rest of the
/// process: the registered function and the callbacks of calls still in flight after
/// stop() are code of this plugin, and the cluster may outlive every algorithm object.
///
/// A failed cycle (a std::exception from it) is logged at warning and the next one runs
/// as usual; anything else that escapes the thread's work is reported as a failure
/// (Service::run_reporting_failure) and ends the thread, so the balancer's supervisor
/// restarts the poller together with its balancer (seed §3.6). start() after stop()
/// starts a new thread; the readings, in AlgorithmState, persist.
///
/// Thread safety: start() and stop() one at a time (Service's contract);
/// stop() may be called from any thread but the poller's own, including network and
/// worker threads: it never waits for the network.
class CpuPoller final : public Service {
public:
    /// Module and function of the reading every polling node serves.
    static constexpr const char* reading_module = "rpclb";
    static constexpr const char* reading_function = "cpu_reading";
    /// Deadline of each remote call (the seed's 2_000 ms).
    static constexpr std::chrono::milliseconds remote_timeout{2000};
    /// Window of the first local sample, which has no previous one.
    static constexpr std::chrono::milliseconds first_sample_window{100};

    /// `cluster` may be null (then start() throws std::logic_error); it must outlive the
    /// poller's stop().
    CpuPoller(std::string balancer, std::string local_node, Cluster* cluster,
              LeastCpuSettings settings);

    /// Stops the poller.
    ~CpuPoller() override;

    /// "<balancer>_cpu_poller".
    std::string name() const override;

    /// Registers `rpclb.cpu_reading` and starts the polling thread. Throws
    /// std::logic_error without a cluster, std::system_error when the thread can't start.
    /// A second start() while running does nothing.
    void start() override;

    /// Stops the thread and waits for it: returns within one /proc/stat read, without
    /// waiting for remote replies. Replies that arrive later are dropped. Idempotent.
    void stop() noexcept override;

private:
    struct Shared;

    void run() noexcept;
    void poll_once();
    std::optional<double> sample_local();
    void fetch_remote();
    bool sleep_for(std::chrono::milliseconds duration);  // false: stopping

    std::string balancer_;
    std::string local_node_;
    Cluster* cluster_;
    LeastCpuSettings settings_;
    NodeReading& local_reading_;
    std::atomic<std::int64_t>& remote_errors_;
    std::shared_ptr<Shared> shared_;
    std::thread thread_;
    // Used by the polling thread only.
    std::optional<CpuTimes> previous_;
    double last_sample_ = LeastCpu::missing_cpu;
    bool warned_ = false;
};

}  // namespace rpclb::plugins
