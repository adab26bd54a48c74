// A LoadBalancer's state and the work behind its public functions (internal). The work is
// split by job: load_balancer.cpp (lifecycle, membership), balancer_pick.cpp (routes,
// picks, releases), balancer_ejection.cpp (outlier ejection), balancer_swap.cpp
// (set_algorithm, following the members' announcement).
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <rpclb/detail/zero_waiter.hpp>

#include "routing/cluster_link.hpp"
#include "routing/hedge_budget.hpp"
#include "routing/latency_window.hpp"
#include "routing/outlier_detector.hpp"
#include "routing/slow_start.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rpclb {

namespace detail {
/// The timer that wakes a balancer when a failing member's time is up.
struct EjectionTimer {
    boost::asio::steady_timer timer;
};
}  // namespace detail

/// Everything a LoadBalancer holds. The public functions of LoadBalancer are its spec;
/// this struct's members are used by them and by the balancer's timers and monitors.
///
/// Thread safety: as LoadBalancer's; each member says what guards it.
struct LoadBalancer::Impl {
    // An algorithm instance with the name and options it was built from; immutable.
    struct Engine {
        std::shared_ptr<SelectionAlgorithm> algorithm;
        std::string name;
        boost::json::object options;
    };
    // What a pick reads, published as one value so that members and algorithm are read
    // with one atomic load; immutable, replaced whole. `members` is the route's own copy of
    // the group's snapshot, whose `calls` carry each staying member's count from route to
    // route (make_route); declared after `engine` so that it (and the algorithm state it
    // holds) goes first.
    //
    // Slow start: `since[i]` is when member i joined or returned, when it still ramps up
    // (Clock::time_point{} = it has its full share); `since` is empty when no member
    // ramps, and every ramp is over at `ramp_until`.
    // HedgingPolicy::idempotent_functions as (module, function), sorted: looked up with no
    // allocation.
    using FunctionNames = std::vector<std::pair<std::string, std::string>>;
    struct Route {
        std::shared_ptr<const Engine> engine;
        std::shared_ptr<const MemberSnapshot> members;
        SlowStart slow_start;
        std::vector<std::chrono::steady_clock::time_point> since;
        std::chrono::steady_clock::time_point ramp_until{};
        std::optional<Hedging> call_hedging;  // HedgingPolicy::calls
        std::shared_ptr<const FunctionNames> idempotent_functions;  // HedgingPolicy's, never null
    };
    using Clock = std::chrono::steady_clock;
    // What slow start reads the time from: a plain function, so that a test can swap it
    // while picks run.
    using ClockFunction = Clock::time_point (*)() noexcept;
    // CLOCK_MONOTONIC_COARSE: steady_clock's epoch, a few milliseconds' resolution, cheaper
    // to read.
    static Clock::time_point coarse_now() noexcept;

    Impl(LoadBalancer& self, detail::ClusterLink& node, LoadBalancerOptions options,
         std::shared_ptr<SelectionAlgorithm> algorithm, bool hosted);
    ~Impl();

    // A route over `members` with `engine`, taking each staying member's count from
    // `previous` (null: all start at 0) and recording those of members that left in
    // departed. Call under publish_mutex. Throws std::bad_alloc.
    std::shared_ptr<const Route> make_route(const MemberSnapshot& members, std::shared_ptr<const Engine> engine,
                                            const Route* previous);
    // The group's new snapshot, before ejections, and the outlier detector told of its
    // members and their incarnations; returns what that changed (ejections a restart
    // ended). Call under publish_mutex.
    detail::OutlierChange adopt_group(std::shared_ptr<const MemberSnapshot> current);

    void on_change(NodeChange change, const std::vector<std::string>& nodes);
    // Publishes a route over the last group snapshot less the ejected members. Call under
    // publish_mutex.
    void republish();

    // The outlier detector hears how a call to the picked member ended; an ejection it
    // causes is out of the route before this returns (balancer_ejection.cpp).
    void record_outcome(const Picked& picked, const CallOutcome& outcome,
                        std::chrono::steady_clock::time_point now) noexcept;
    // Logs and publishes (member.ejected / member.returned) what `change` did.
    void report_ejections(const detail::OutlierChange& change);
    // Emits the events of an ejection change, republishes, and arms the return timer.
    void apply_ejections(const detail::OutlierChange& change);
    // Arms the return timer for the detector's next expiry (if any).
    void arm_ejection_timer();
    // Cancels the return timer's wait (stop()).
    void cancel_ejection_timer();

    // The algorithm's `release`, with what it throws logged.
    void tell_release(SelectionAlgorithm& algorithm, const MemberSnapshot& members, std::size_t index,
                      const CallOutcome& outcome) noexcept;

    // A routing-only balancer adopts the algorithm its members announce, if it changed:
    // follow_announcement() now, post_follow() on a worker thread.
    void follow_announcement();
    void post_follow();
    // set_algorithm()'s work, with change_mutex held by the caller.
    Result<void> replace_algorithm(const std::string& algorithm, const boost::json::object& options);
    // Builds, initialises and checks an instance of `algorithm` for set_algorithm().
    Result<std::shared_ptr<const Engine>> build_engine(const std::string& algorithm,
                                                       const boost::json::object& options, bool& local);
    ErrorMessage change_error(ErrorCode code, const std::string& algorithm, std::string message) const;

    // Slow start's choice for a pick of `index` from `route` at `now`: true to keep it,
    // false to pick again (balancer_pick.cpp). Draws from a per-thread generator.
    static bool keep_pick(const Route& route, std::size_t index, Clock::time_point now) noexcept;

    // Hedging: the budget of extra attempts and the counts of hedge_stats().
    detail::HedgeBudget hedge_budget;
    // The latencies of successful calls, counted once a hedged call went through (recent_p95).
    detail::LatencyWindow latencies;
    std::atomic<std::uint64_t> hedged_calls{0}, hedges{0}, hedge_wins{0}, budget_refusals{0}, late_replies{0},
        retries{0};

    LoadBalancer& self;
    detail::ClusterLink& node;
    // What the algorithm reaches of the node (AlgorithmContext::host); declared before
    // the algorithm so that it outlives it.
    std::unique_ptr<AlgorithmHost> host;
    // Name, node_match_list and drain_timeout; the algorithm and its options and the slow
    // start live in route.
    LoadBalancerOptions options;
    bool hosted;
    std::atomic<std::shared_ptr<const Route>> route;
    std::mutex publish_mutex;   // serialises stores of route; never taken by a pick
    std::mutex change_mutex;    // one set_algorithm() or follow_announcement() at a time
    std::mutex announce_mutex;  // orders joins and leaves of the group with re-announcements
    std::atomic<bool> joined{false};
    std::atomic<bool> clamp_warned{false};  // attempts_clamped() has logged
    std::atomic<std::int64_t> in_flight{0};
    // Counts of members that left, for in_flight_by_member(): alive while a call (its
    // Picked) still holds the route they were in. Expired entries are dropped at each
    // membership change and each read.
    mutable std::mutex departed_mutex;
    mutable std::vector<std::pair<std::string, std::weak_ptr<InFlightCount>>> departed;
    std::atomic<std::int64_t> serving{0};
    // stop() waits until in_flight + serving is 0; a release that brings either to 0
    // wakes it.
    detail::ZeroWaiter drained;
    std::vector<std::shared_ptr<Service>> services;
    std::uint64_t monitor_id = 0;
    std::uint64_t announcement_monitor_id = 0;  // routing-only: Groups::monitor_announcements
    bool prepared = false;
    bool started = false;
    bool restarted = false;  // start() has run once: the next one is a restart
    std::atomic<bool> local{false};
    // Null when OutlierDetection is off on a hosted balancer; a routing-only one always has
    // one, so that the options its members announce can turn detection on.
    std::unique_ptr<detail::OutlierDetector> outliers;
    // The group's last snapshot, before ejections (under publish_mutex).
    std::shared_ptr<const MemberSnapshot> group;
    // The slow start new routes get (options' at first; a routing-only balancer's follows
    // its members' announcement). Under publish_mutex.
    SlowStart slow_start;
    // The hedging policy new routes and the budget get, the same way. Under publish_mutex.
    HedgingPolicy hedging;
    std::shared_ptr<const FunctionNames> idempotent_functions;  // hedging's, never null
    std::atomic<bool> lists_idempotent_functions{false};        // it is not empty
    // Sets `hedging`, the budget's rates and `idempotent_functions` (the next route's). Call
    // under publish_mutex (or in the constructor). Throws std::bad_alloc.
    void adopt_hedging(const HedgingPolicy& policy);
    HedgingPolicy hedging_policy() {
        std::lock_guard lock(publish_mutex);
        return hedging;
    }
    // Slow start's clock (the join and return times, and the age of a ramp at a pick).
    std::atomic<ClockFunction> clock{&coarse_now};
    // A pick has run: from then on, members that join ramp up (those present when the
    // balancer starts picking have their full share at once).
    std::atomic<bool> picking{false};
    // Wakes the balancer when a failing member's time is up; cancelled by stop().
    std::mutex ejection_mutex;
    std::unique_ptr<detail::EjectionTimer> ejection_timer;  // under ejection_mutex
};

namespace detail {

/// What tests reach of a LoadBalancer's internals.
struct BalancerAccess {
    /// Slow start reads the time from `clock` from now on (for a test's injected clock);
    /// safe while picks run.
    static void set_clock(LoadBalancer& balancer, LoadBalancer::Impl::ClockFunction clock) noexcept {
        balancer.impl_->clock.store(clock);
    }
};

}  // namespace detail

}  // namespace rpclb
