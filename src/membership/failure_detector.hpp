// SWIM failure detection with Lifeguard's local health, without I/O (internal).
#pragma once

#include <rpclb/detail/wire.hpp>

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
    std::chrono::milliseconds probe_interval{500};  ///< one probe per member per this, in turn
    std::chrono::milliseconds probe_timeout{250};   ///< wait for a direct ack, then ask others
    std::size_t indirect_probes = 3;                ///< members asked to ping a silent one (k)
    std::chrono::milliseconds suspicion_min{1500};  ///< a suspect confirmed by k others is dead after this
    std::chrono::milliseconds suspicion_max{4500};  ///< an unconfirmed suspect is dead after this
    int max_local_health = 8;  ///< timeouts stretch up to (1 + this) times when this node is slow

    /// probe_interval idle/6 within 100 ms…1 s, probe_timeout half of it, suspicion
    /// idle/2 (confirmed) to 1.5 × idle (unconfirmed).
    static DetectorOptions from_idle_timeout(std::chrono::milliseconds idle);
};

/// One node's failure detector over its linked members, after SWIM (Das, Gupta and
/// Motivala 2002) with Lifeguard's local health and dynamic suspicion (Dadgar et al. 2017):
/// each probe interval it pings the next member of a shuffled round; without an ack
/// within the probe timeout it asks `indirect_probes` others to ping it; without any ack
/// by the end of the interval it suspects it and tells every member. A suspect that does
/// not refute (a higher version of its own incarnation) within the suspicion timeout —
/// shorter the more members confirm the suspicion — is dead: the detector tells every
/// member and reports it, and the driver drops its link. A node that finds itself
/// suspected refutes at once. Its own missed acks and refutations raise its local health
/// score, which stretches its timeouts, so a slow node suspects others less.
///
/// Sans-I/O: driven by add/remove (links up and down), on_probe/on_member (frames read)
/// and on_timer (the instant next_timer() asked for), all given the time; each returns
/// the frames to send and the members found dead. Never blocks, never reads a clock;
/// randomness from the seed given. Thread safety: none (the driver serialises calls).
class FailureDetector {
public:
    using Clock = std::chrono::steady_clock;

    /// What an event asks the driver to do: send each frame of `sends` to its node (over
    /// that node's link; dropped when there is none), send each of `gossip` to every linked
    /// member, then drop the links of `dead` (they left every view).
    struct Actions {
        std::vector<std::pair<std::string, wire::Probe>> sends;
        std::vector<wire::MemberState> gossip;
        std::vector<std::string> dead;
        bool empty() const noexcept { return sends.empty() && gossip.empty() && dead.empty(); }
    };

    FailureDetector(std::string self, std::string incarnation, DetectorOptions options, std::uint64_t seed);

    /// A link to `node` (incarnation `incarnation`) is established: it is probed from now
    /// on, alive. A new incarnation replaces the old one's state.
    void add(const std::string& node, const std::string& incarnation);
    /// The link to `node` is gone (closed, dropped, or the member said bye): no longer probed.
    void remove(std::string_view node);

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
    /// True while `node` is suspected here.
    bool suspected(std::string_view node) const;
    /// Linked members this detector probes.
    std::size_t size() const noexcept { return members_.size(); }
    /// This node's local health score, 0 (healthy) … max_local_health.
    int local_health() const noexcept { return health_; }
    /// The version of this node's own incarnation (raised by each refutation).
    std::uint64_t version() const noexcept { return version_; }

private:
    struct Member {
        std::string incarnation;
        std::uint64_t version = 0;
        bool suspect = false;
        Clock::time_point suspected_at{};
        std::set<std::string> suspecters;  // distinct members that suspect it, this node included
        std::optional<std::chrono::microseconds> rtt;
    };
    // The probe of this interval: its target, seq, and what it has heard.
    struct Probe {
        std::string target;
        std::uint64_t seq = 0;
        Clock::time_point sent_at{};
        Clock::time_point indirect_at{};  // ask others when no ack by then
        Clock::time_point ends_at{};      // suspect when no ack by then
        bool indirect_sent = false;
        std::size_t asked = 0;   // indirect pings asked for
        std::size_t nacks = 0;   // "nack"s heard back
        bool acked = false;
    };
    // A ping this node sends on another's behalf (ping_req).
    struct Relay {
        std::string requester;
        std::uint64_t requester_seq = 0;
        Clock::time_point expires_at{};
    };

    Clock::duration scaled(std::chrono::milliseconds d) const;
    Clock::duration suspicion_timeout(const Member& m) const;
    void start_probe(Clock::time_point now, Actions& out);
    void end_probe(Clock::time_point now, Actions& out);
    void suspect(Clock::time_point now, const std::string& node, Member& m, const std::string& by, Actions& out);
    void refute(std::uint64_t above, Actions& out);
    void change_health(int delta);
    std::string next_target();

    const std::string self_;
    const std::string incarnation_;
    const DetectorOptions options_;
    std::mt19937_64 rng_;
    std::uint64_t version_ = 0;
    int health_ = 0;
    std::uint64_t next_seq_ = 1;
    std::map<std::string, Member, std::less<>> members_;
    std::vector<std::string> round_;  // members still to probe this round, shuffled
    std::optional<Probe> probe_;
    std::optional<Clock::time_point> next_probe_at_;
    std::map<std::uint64_t, Relay> relays_;  // by the seq of the ping sent on the requester's behalf
};

}  // namespace rpclb::detail
