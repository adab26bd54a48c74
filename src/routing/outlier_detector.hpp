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

    /// The group's members are now `members` (ascending), running as `incarnations`
    /// (index-aligned, as Groups::incarnations gives them; empty or "" = not known). A
    /// healthy member that left is forgotten. A failing one is kept until its time is up:
    /// when it comes back as the same incarnation (a process that froze, was dropped by the
    /// failure detector and resumed; or a balancer that left and joined again) it is still
    /// failing, and ejected, until then. One that comes back as another incarnation (a
    /// restart) starts afresh; its ejection ends (in `returned`). An unknown incarnation is
    /// taken for the same one.
    Change set_members(const std::vector<std::string>& members, const std::vector<std::string>& incarnations,
                       Clock::time_point now);
    /// set_members() with no incarnation known.
    Change set_members(const std::vector<std::string>& members, Clock::time_point now) {
        return set_members(members, {}, now);
    }

    /// Returns the members whose time is up at `now`; an ejected one is in `returned` even
    /// when it is not in the group now (member.returned closes every member.ejected).
    Change expire(Clock::time_point now);

    /// The members to leave out of picks now (empty in panic), ascending.
    std::vector<std::string> ejected() const;

    /// From now on judges by `options`, starting afresh: every member's streaks, counts and
    /// ejections so far are forgotten, and the ejected ones return (in `returned`, those
    /// not in the group now too).
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
        std::string incarnation;                         // "" = not known
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
