// SWIM failure detection with Lifeguard's local health, without I/O (internal).
#pragma once

#include <rpclb/detail/wire.hpp>

#include <boost/container_hash/hash.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// The detector's timing. from_idle_timeout() derives every field from the one option
/// users set (ClusterOptions::idle_timeout); doc/explanation/failure-detection.md says
/// what each trades.
struct DetectorOptions {
    std::chrono::milliseconds probe_interval{1000};  ///< a probe of one member starts each interval
    std::chrono::milliseconds probe_timeout{250};    ///< the least wait for a direct ack (then as long for others)
    std::chrono::milliseconds probe_timeout_max{1000};  ///< the most a link's measured round trip stretches it to
    std::size_t indirect_probes = 3;                ///< members asked to ping a silent one (k)
    std::chrono::milliseconds suspicion_min{1000};  ///< a suspect confirmed by k others is dead after this
    std::chrono::milliseconds suspicion_max{3000};  ///< an unconfirmed suspect is dead after this
    int max_local_health = 8;  ///< timeouts stretch up to (1 + this) times when this node is slow

    /// probe_interval idle/3 within 100 ms…1 s, probe_timeout idle/12 within 100 ms…2 s,
    /// probe_timeout_max idle/3 (at least probe_timeout), suspicion idle/3 (confirmed, at
    /// least probe_timeout) to idle (unconfirmed).
    static DetectorOptions from_idle_timeout(std::chrono::milliseconds idle);
};

/// One node's failure detector over its linked members: SWIM (Das, Gupta and Motivala
/// 2002) with Lifeguard's local health and dynamic suspicion (Dadgar et al. 2017), on a
/// probe schedule shared by the nodes (each step, a permutation of the members; see
/// set_epoch). A probe is a ping, then `indirect_probes` pings through others, then a
/// suspicion told to every member; a suspect that does not refute within the suspicion
/// timeout is dead. A probe waits for each member as long as its link's retransmission
/// timeout (RFC 6298: smoothed round trip + 4 × its variation), within probe_timeout …
/// probe_timeout_max. A node that times out late (it was not running) ends no probe at
/// that wake-up: each gets another probe timeout to read the answers that came meanwhile. A node that hears nobody while its probes go unanswered is cut off, says
/// so (Actions::cut_off) and drops every link; the first frame after that says it is back.
/// doc/explanation/failure-detection.md gives each step and its timing.
///
/// Sans-I/O: driven by add/remove (links up and down), on_probe/on_member (frames read)
/// and on_timer (the instant next_timer() asked for), all given the time; each returns
/// the frames to send and the members found dead. Never blocks, never reads a clock;
/// randomness from the seed given. Thread safety: none (the driver serialises calls).
class FailureDetector {
public:
    using Clock = std::chrono::steady_clock;

    /// What an event asks the driver to do: send each frame of `sends` to its node (over
    /// that node's link; dropped when there is none; a "ping" as the link's own ping, whose
    /// answer the driver reports as an "ack" from that node), send each of `gossip` to
    /// every linked member, send each of `notices` to its node only, then drop the links
    /// of `dead` (they left every view) and of `broken` (the member answers others, but
    /// not twice running over this link). `cut_off` (how long this node heard nobody) when
    /// it finds itself cut off from every member (its links are then in `broken`); `back`
    /// (how long since it heard anyone before that) at the first frame heard after it;
    /// `odd_rtt` (the member and the bounded round trip) the first time a member's round
    /// trip falls outside 0 … 10 × probe_timeout_max.
    struct Actions {
        std::vector<std::pair<std::string, wire::Probe>> sends;
        std::vector<wire::MemberState> gossip;
        std::vector<std::pair<std::string, wire::MemberState>> notices;
        std::vector<std::string> dead;
        std::vector<std::string> broken;
        std::optional<std::chrono::milliseconds> cut_off;
        std::optional<std::chrono::milliseconds> back;
        std::optional<std::pair<std::string, std::chrono::microseconds>> odd_rtt;
        bool empty() const noexcept {
            return sends.empty() && gossip.empty() && notices.empty() && dead.empty() && broken.empty() &&
                   !cut_off && !back && !odd_rtt;
        }
    };

    FailureDetector(std::string self, std::string incarnation, DetectorOptions options, std::uint64_t seed);
    FailureDetector(FailureDetector&&) = default;  // the ring's pointers move with the map's storage
    FailureDetector(const FailureDetector&) = delete;
    FailureDetector& operator=(const FailureDetector&) = delete;

    /// A link to `node` (incarnation `incarnation`) is established: it is probed from now
    /// on, alive. A new incarnation replaces the old one's state. Once this node has
    /// refuted a suspicion, the new member is told its version (a notice), so that a
    /// suspicion the member raises later carries a version the others accept.
    [[nodiscard]] Actions add(const std::string& node, const std::string& incarnation);
    /// The link to `node` is gone (closed, dropped, or the member said bye): no longer probed.
    void remove(std::string_view node);
    /// `node` is probed next (another incarnation claims its name: is it still alive?).
    void probe_next(const std::string& node);
    /// Probe steps of one probe interval are counted from `epoch` (default: the clock's
    /// epoch). At step s, of the M nodes on a ring in name order, this one probes the member
    /// 1 + (s mod (M − 1)) places after it, at (its place / M) of an interval into the step:
    /// nodes whose views and epochs agree probe each member once per step, about an
    /// interval apart. The mesh gives the steady-clock instant of the wall clock's epoch, so
    /// that nodes with synchronised clocks count the same steps.
    void set_epoch(Clock::time_point epoch) noexcept { epoch_ = epoch; }

    Actions on_probe(Clock::time_point now, const std::string& from, const wire::Probe& probe);
    Actions on_member(Clock::time_point now, const std::string& from, const wire::MemberState& state);
    /// Runs what is due at `now`: the next probe, the indirect probes, the end of a probe,
    /// relayed pings that timed out, suspicions that expired.
    Actions on_timer(Clock::time_point now);
    /// The earliest instant on_timer() has something to do, or nullopt when nothing is
    /// linked and nothing is pending.
    std::optional<Clock::time_point> next_timer() const;

    /// The last direct probe's round trip to `node`, once one was answered.
    std::optional<std::chrono::microseconds> rtt(std::string_view node) const;
    /// How long a probe of `node` waits for its ack now: the link's retransmission timeout
    /// within probe_timeout … probe_timeout_max, times 1 + local_health().
    std::chrono::microseconds probe_timeout(std::string_view node) const;
    /// True while `node` is suspected here.
    bool suspected(std::string_view node) const;
    /// Linked members this detector probes.
    std::size_t size() const noexcept { return members_.size(); }
    /// This node's local health score, 0 (healthy) … max_local_health.
    int local_health() const noexcept { return health_; }
    /// The version of this node's own incarnation (raised by each refutation).
    std::uint64_t version() const noexcept { return version_; }

private:
    // Per linked member: kept small, since a node holds one for every other node.
    struct Member {
        std::string incarnation;
        std::uint64_t version = 0;
        std::uint64_t last_seq = 0;  // the seq of its last probe (a late pong still counts)
        std::uint32_t rtt_us = no_rtt;  // the last direct probe's round trip
        std::uint32_t srtt_us = no_rtt;  // smoothed round trip (RFC 6298), no_rtt before a sample
        std::uint32_t rttvar_us = 0;     // its variation
        Clock::time_point last_sent = Clock::time_point::min();  // when ping `last_seq` went out, unanswered
        std::uint64_t failing_seq = 0;     // the first of those probes
        std::uint8_t direct_failures = 0;  // probes in a row answered through others only
        bool odd_rtt_told = false;         // an out-of-range round trip was reported once
    };
    static constexpr std::uint32_t no_rtt = 0xffffffff;
    // A suspect's suspicion (in suspicions_ while the member is suspected).
    struct Suspicion {
        Clock::time_point since{};
        Clock::time_point due{};  // since + suspicion_timeout, its key in deadlines_
        // Distinct members that suspect it, this node included; only the first
        // indirect_probes + 1 are kept, since more do not shorten the timeout further.
        std::vector<std::string> suspecters;
    };
    // A probe in flight: its target, seq, and what it has heard.
    struct Probe {
        std::string target;
        std::uint64_t seq = 0;
        Clock::time_point indirect_at{};  // ask others when no ack by then
        Clock::time_point ends_at{};      // suspect when no ack by then
        bool indirect_sent = false;
        std::size_t asked = 0;   // indirect pings asked for
        std::size_t nacks = 0;   // "nack"s heard back
        bool acked = false;
        bool direct = false;     // the ack came from the target itself
    };
    // A ping this node sends on another's behalf (ping_req).
    struct Relay {
        std::string requester;
        std::uint64_t requester_seq = 0;
        Clock::time_point expires_at{};
    };

    Clock::duration scaled(Clock::duration d) const;
    Clock::duration timeout_of(const Member& m) const;  // unscaled
    Clock::duration timeout_of(std::string_view node) const;  // scaled
    void sample_rtt(const std::string& node, Member& m, Clock::duration rtt, Actions& out);
    // This node woke late: no probe ends before the answers that came meanwhile are read.
    void postpone(Clock::time_point now);
    // A frame from a member: not cut off (any more), and silence is counted afresh.
    void heard(Clock::time_point now, Actions& out);
    Clock::duration suspicion_timeout(const Suspicion& s) const;
    void start_probe(Clock::time_point now, Actions& out);
    void probe(Clock::time_point now, const std::string& target, Actions& out);  // a ping to a member
    void end_probe(Clock::time_point now, Probe p, Actions& out);
    Probe* probe_of(std::uint64_t seq);
    bool probing(std::string_view node) const;
    // Suspects `node` (if not yet) with `by` among its suspecters; true when `by` was
    // counted anew (a new suspicion or a confirmation), false when it was already.
    bool suspect(Clock::time_point now, const std::string& node, const std::string& by);
    void clear_suspicion(const std::string& node);
    // Sets s's deadline from its suspecters and the member count, never later than it was:
    // confirmations shorten a suspicion, nothing lengthens it.
    void retime(const std::string& node, Suspicion& s);
    // Moves s to `due` in deadlines_.
    void file(const std::string& node, Suspicion& s, Clock::time_point due);
    // Every suspect's deadline again after the member count changed; a no-op unless the
    // members are at most indirect_probes + 1, below which the count bounds the
    // confirmations awaited.
    void retime_all();
    std::vector<std::string> indirect_helpers(const std::string& target);
    void refute(std::uint64_t above, Actions& out);
    void change_health(int delta);
    std::string next_target(Clock::time_point now);
    // The next instant after `after` at this node's phase of a step.
    Clock::time_point next_slot(Clock::time_point after) const;
    // The members' names in order (pointers into members_, valid until it changes).
    const std::vector<const std::string*>& ring() const;
    // This node's place on the ring of the members and itself.
    std::size_t place() const;
    // How far into each step this node probes: place × interval / M.
    Clock::duration phase() const;
    // The step `at` falls in, counted from the epoch at this node's phase.
    std::int64_t step(Clock::time_point at) const;
    bool confirms();  // true for about k + 1 of the members that hear a suspicion

    const std::string self_;
    const std::string incarnation_;
    const DetectorOptions options_;
    std::mt19937_64 rng_;
    std::uint64_t version_ = 0;
    int health_ = 0;
    std::uint64_t next_seq_ = 1;
    struct NameHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept { return boost::hash<std::string_view>{}(s); }
    };
    // Hashed, not ordered, for speed and size with thousands of members; walks that
    // draw from the RNG sort first, so the probe order depends on the RNG alone.
    boost::unordered_flat_map<std::string, Member, NameHash, std::equal_to<>> members_;
    boost::unordered_flat_map<std::string, Suspicion, NameHash, std::equal_to<>> suspicions_;
    // The suspects by deadline, so that a timer finds the expired ones (and the next
    // deadline) without walking every suspect.
    std::set<std::pair<Clock::time_point, std::string>, std::less<>> deadlines_;
    // The members' names (not this node's), rebuilt by ring() when it is next read after
    // members_ changed: a join or a mass failure changes thousands of members between
    // two probes.
    mutable std::vector<const std::string*> ring_;
    mutable bool ring_current_ = true;
    std::vector<std::string> next_;   // probed before the schedule's target (probe_next)
    Clock::time_point epoch_{};
    std::vector<Probe> probes_;  // in flight, oldest first
    std::optional<Clock::time_point> next_probe_at_;
    std::optional<Clock::time_point> last_heard_;  // the last probe frame or answer from any member
    int unanswered_ = 0;  // probes ended with no answer since then
    std::optional<Clock::time_point> cut_off_since_;  // last heard from anyone, while cut off
    std::map<std::uint64_t, Relay> relays_;  // by the seq of the ping sent on the requester's behalf
};

}  // namespace rpclb::detail
