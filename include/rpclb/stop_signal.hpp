// Waiting for the process to be asked to stop (SIGINT, SIGTERM), then stopping a node.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

namespace rpclb {

class Cluster;

/// Catches SIGINT and SIGTERM for as long as it lives, so that a service's main thread can
/// wait until the process is asked to stop (gRPC's `Server::Wait`, brpc's
/// `RunUntilAskedToQuit`) and then stop its nodes gracefully. From construction on, the
/// signals no longer end the process: a signal that arrives before wait() is kept and
/// returned by the next wait(). Built on Boost.Asio's `signal_set`, so every thread may
/// receive the signal and no signal mask needs setting up.
///
/// A node of the process that gives up its name (Cluster::name_taken: another live
/// process holds it) ends the wait too, as request_stop() does, with no handler of the
/// application's: such a node is cut off from its cluster, and serves no one.
///
/// Make it before Cluster::start() (a signal in between would otherwise end the process
/// at once). Only one should live at a time in a process (Asio allows several, each then
/// sees every signal). Destroying it restores the default actions.
///
/// Thread safety: distinct objects safe; shared objects unsafe (wait from one thread),
/// except request_stop(), which any thread may call.
class StopSignal {
public:
    /// Installs the handlers. Throws std::system_error when they can't be installed.
    StopSignal();
    ~StopSignal();

    StopSignal(const StopSignal&) = delete;
    StopSignal& operator=(const StopSignal&) = delete;

    /// Blocks until SIGINT or SIGTERM arrives, request_stop() is called, or a node of this
    /// process gives up its name; the signal number (0 for the other two: tell them apart
    /// with Cluster::name_taken()).
    int wait();

    /// wait() for at most `timeout`; nullopt when nothing arrived by then. For a second
    /// signal during a graceful stop ("press Ctrl-C again to quit").
    std::optional<int> wait_for(std::chrono::milliseconds timeout);

    /// Ends a wait() as a signal would, with 0 (an admin "stop" command, a test).
    void request_stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Waits until the process is asked to stop through `signal`, or until a node of the
/// process gives up its name (at once when `cluster` has already), then stops `cluster`
/// gracefully: every hosted balancer leaves its group and drains (up to its
/// drain_timeout), then Cluster::stop() (up to stop_timeout for the calls it serves).
/// Returns the signal that ended the wait; 0 for StopSignal::request_stop() and for a
/// name given up, which Cluster::name_taken() then explains.
///
///     rpclb::StopSignal stop_signal;  // before start(): from here SIGTERM is caught
///     cluster.start();
///     cluster.start_balancer(...);
///     rpclb::run_until_signalled(cluster, stop_signal);
///     if (auto why = cluster.name_taken()) {  // another live process holds the name
///         std::cerr << *why << "\n";
///         return 1;
///     }
///     return 0;
///
/// Must not be called from a handler or network thread (as Cluster::stop()).
int run_until_signalled(Cluster& cluster, StopSignal& signal);

/// run_until_signalled() with a StopSignal of its own, made on entry: signals that come
/// before the call still end the process (make a StopSignal first to avoid that).
int run_until_signalled(Cluster& cluster);

}  // namespace rpclb
