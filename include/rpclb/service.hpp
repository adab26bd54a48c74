// A supervised background service: anything with a start/stop life cycle.
#pragma once

#include <boost/config.hpp>

#include <string>

namespace rpclb {

/// A background service that a balancer (and later the Supervisor) starts before the
/// LoadBalancer joins its group and stops after it has left and drained. Algorithms
/// return theirs from `SelectionAlgorithm::services()` (the seed's `child_specs`, e.g. the
/// least_cpu poller).
///
/// Thread safety: start() and stop() are called from one control thread, never
/// concurrently with each other; the service's own work may run on any thread.
class BOOST_SYMBOL_VISIBLE Service {
public:
    virtual ~Service() = default;

    /// A short name for logs, e.g. "workers_cpu_poller".
    virtual std::string name() const = 0;

    /// Starts the work. Throws std::exception on failure; the balancer's start then fails
    /// with that message.
    virtual void start() = 0;

    /// Stops the work and returns once it has stopped. Must not throw.
    virtual void stop() noexcept = 0;
};

}  // namespace rpclb
