// Which members a balancer ejects for failing calls: the detectors and the rules, no I/O.
#pragma once

#include <rpclb/load_balancer.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rpclb::detail {

/// What changed in a balancer's ejections: members newly ejected (with their ejection time
/// and the detector that fired) and members returned.
struct OutlierChange {
    struct Ejection {
        std::string node;
        std::chrono::milliseconds duration;
        std::string reason;
    };
    std::vector<Ejection> ejected;
    std::vector<std::string> returned;
    /// When failing members' times will be up (ejected ones and those the cap refused).
    std::vector<std::chrono::milliseconds> expiries;
    /// The failing set changed, so the ejected set may have (panic starts or ends).
    bool changed = false;
    bool empty() const noexcept { return !changed; }
};

/// The outlier detection of one balancer (Envoy's outlier detection is the model), on an
/// injected clock. record() hears how each call to a member ended; a member is failing
/// once a detector fires on it:
/// - consecutive remote failures (`internal_server_error` or `service_unavailable` from
///   the member) reach OutlierDetection::consecutive_remote_failures;
/// - consecutive local failures (no connection, timeout) reach
///   consecutive_local_failures (the two are counted apart; a success resets both);
/// - with failure_percentage set: over one `interval`, at least `minimum_requests` calls of
///   which at least that percentage failed (judged when the next interval starts).
/// A failing member is ejected for base_ejection_time × (its ejections so far + 1), at most
/// max_ejection_time, unless that would eject more than max_ejection_percent of the members
/// (the ejection is then refused and counted, and the member is failing all the same for
/// that time). While fewer than panic_threshold_percent of the members are not failing,
/// nobody is ejected (panic). ejected() is the set the balancer leaves out of its picks.
///
/// Thread safety: distinct objects safe; shared objects safe (one mutex, never held while
/// calling out).
class OutlierDetector {
public:
    using Clock = std::chrono::steady_clock;

    explicit OutlierDetector(OutlierDetection options) : options_(options) {}

    using Change = OutlierChange;

    /// A call to `node` ended with `outcome` at `now`.
    Change record(const std::string& node, const CallOutcome& outcome, Clock::time_point now);

    /// The group's members are now `members` (ascending). One that left is forgotten, even
    /// while failing: a member that comes back is most often a restarted process, which
    /// must not be shut out for the rest of an ejection it did not earn. (A frozen member
    /// whose links dropped comes back unejected too, and is ejected again if it still fails.)
    Change set_members(const std::vector<std::string>& members, Clock::time_point now);

    /// Returns the members whose time is up at `now`.
    Change expire(Clock::time_point now);

    /// The members to leave out of picks now (empty in panic), ascending.
    std::vector<std::string> ejected() const;

    /// From now on judges by `options`, starting afresh: every member's streaks, counts and
    /// ejections so far are forgotten, and the ejected ones return (in `returned`).
    Change reconfigure(OutlierDetection options, Clock::time_point now);

    /// The options it judges by now.
    OutlierDetection options() const;

    /// The earliest time a failing member's time is up; nullopt when none is failing.
    std::optional<Clock::time_point> next_expiry() const;

    /// Ejections the cap refused so far.
    std::uint64_t refused() const;

private:
    struct Member {
        std::uint32_t remote_streak = 0;
        std::uint32_t local_streak = 0;
        std::uint64_t calls = 0;     // in the current interval
        std::uint64_t failures = 0;  // in the current interval
        Clock::time_point interval_start{};
        std::uint32_t ejections = 0;
        std::optional<Clock::time_point> failing_until;  // set while failing
        bool ejected = false;                            // failing and not refused by the cap
        bool present = true;                             // in the group now
    };

    // Under mutex_: `node` is failing for `reason`; ejects it when the cap allows.
    void fail(const std::string& node, Member& m, const char* reason, Clock::time_point now, Change& change);
    // Under mutex_: true when fewer than panic_threshold_percent of the members are healthy.
    bool panic() const;

    mutable std::mutex mutex_;
    OutlierDetection options_;  // under mutex_
    std::map<std::string, Member, std::less<>> members_;
    std::uint64_t refused_ = 0;
};

}  // namespace rpclb::detail
