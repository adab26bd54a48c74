// A supervised background service: anything with a start/stop life cycle that can report
// the end of its work.
#pragma once

#include <boost/config.hpp>

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

namespace rpclb {

/// How a service's work ended, as the service reported it.
struct ServiceExit {
    /// True: the work failed (an error, an exception escaping it). False: it finished
    /// normally and on purpose (OTP's `normal` exit reason).
    bool failed = false;
    /// What went wrong, for logs and events; empty for a normal exit.
    std::string reason;
};

/// A background service: a Supervisor's child. Algorithms return theirs from
/// `SelectionAlgorithm::services()` (the predecessor's `child_specs`); a LoadBalancer and a
/// Supervisor are services too. A service must support start() after stop(): a restart is
/// exactly that. When its work ends by itself it calls report_failure() or report_exit()
/// (or runs its threads in run_reporting_failure()) and never restarts itself.
///
/// Thread safety: start() and stop() are called one at a time, not necessarily from the
/// same thread. report_failure(), report_exit() and set_exit_receiver() are safe from any
/// thread at any time, even inside start() or stop(); a restart never runs on the
/// reporting thread.
///
/// The layout of this class is part of the plugin ABI (RPCLB_PLUGIN_ABI_VERSION).
class BOOST_SYMBOL_VISIBLE Service {
public:
    /// Receives a service's reports. Runs on the reporting thread, under a lock of the
    /// service: it must be quick, must not throw and must not call back into the service.
    using ExitReceiver = std::function<void(ServiceExit exit)>;

    Service() = default;
    Service(const Service&) = delete;
    Service& operator=(const Service&) = delete;
    virtual ~Service() = default;

    /// A short name for logs, e.g. "workers_cpu_poller".
    virtual std::string name() const = 0;

    /// Starts the work. Throws std::exception on failure; the supervisor (or the
    /// balancer's start) then fails with that message. Called again after stop() when
    /// the service is restarted.
    virtual void start() = 0;

    /// Stops the work and returns once it has stopped. Must not throw. Also called after
    /// the service reported the end of its work (to release what is left), and may be
    /// called when it was never started or is already stopped.
    virtual void stop() noexcept = 0;

    /// Installs the function that receives this service's reports (an empty function
    /// removes it). A Supervisor installs its own before each start(). Once this returns,
    /// the previous receiver is not running and will not run again.
    void set_exit_receiver(ExitReceiver receiver);

protected:
    /// Reports that the work failed with `reason`; the supervisor restarts the service
    /// (or not) according to its restart type. Without a receiver the report is logged
    /// (channel "supervisor", warning). Any thread; never throws.
    void report_failure(std::string reason) noexcept;

    /// Reports that the work finished normally: permanent children are restarted anyway,
    /// transient and temporary ones are not. Any thread; never throws.
    void report_exit() noexcept;

    /// Runs `work` (a callable taking no arguments) and reports an exception that escapes
    /// it as a failure, with its what() (or "unknown exception"), instead of letting it
    /// end the thread or the process. Meant as the body of a service's own threads.
    template <class Work>
    void run_reporting_failure(Work&& work) noexcept {
        try {
            std::forward<Work>(work)();
        } catch (const std::exception& e) {
            report_escaped(e.what());
        } catch (...) {
            report_escaped(nullptr);
        }
    }

private:
    void report(ServiceExit exit) noexcept;
    void report_escaped(const char* what) noexcept;  // null: not a std::exception

    std::mutex receiver_mutex_;  // held while the receiver runs
    ExitReceiver receiver_;
};

}  // namespace rpclb
