// A named load balancer: an algorithm, a group of member nodes, routing and draining.
#pragma once

#include <rpclb/call_options.hpp>
#include <rpclb/error.hpp>
#include <rpclb/node_filter.hpp>
#include <rpclb/detail/option_problem.hpp>
#include <rpclb/selection_algorithm.hpp>
#include <rpclb/service.hpp>

#include <boost/json/object.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpclb {

namespace detail {
class ClusterLink;
struct BalancerAccess;
}  // namespace detail


/// When a balancer stops picking a member whose calls fail (Envoy's outlier detection is
/// the model; doc/explanation/outlier-ejection.md). Every algorithm picks from the members
/// left after ejection. A field at 0 turns its detector off; all three off = no detection.
struct OutlierDetection {
    /// Remote failures in a row (`internal_server_error` or `service_unavailable` answered
    /// by the member) that eject it. Default 5.
    std::uint32_t consecutive_remote_failures = 5;
    /// Local failures in a row (no connection, timeout) that eject it. Default 5.
    std::uint32_t consecutive_local_failures = 5;
    /// Ejects a member when at least this percentage (1–100) of its calls in one `interval`
    /// failed, given at least `minimum_requests` calls. Default 0 (off).
    std::uint32_t failure_percentage = 0;
    std::uint32_t minimum_requests = 100;
    std::chrono::milliseconds interval{10000};
    /// An ejection lasts this times the member's ejections so far (this one included), at
    /// most max_ejection_time. Defaults 30 s and 300 s.
    std::chrono::milliseconds base_ejection_time{30000};
    std::chrono::milliseconds max_ejection_time{300000};
    /// At most this percentage of the members is ejected at once; further ejections are
    /// refused and counted (LoadBalancer::ejections_refused). Default 50.
    std::uint32_t max_ejection_percent = 50;
    /// While fewer than this percentage of the members are not failing, nobody is ejected:
    /// the failure is most likely this node's own. Default 50.
    std::uint32_t panic_threshold_percent = 50;

    bool enabled() const noexcept {
        return consecutive_remote_failures > 0 || consecutive_local_failures > 0 || failure_percentage > 0;
    }
};

/// How a member that joins the group, or returns from ejection, gets its share of the
/// picks: ramped up over `window` rather than all at once (Envoy's slow start is the model;
/// doc/reference/algorithms.md#slow-start). Its share is its fair share times
/// max(min_weight_percent / 100, (t / window)^(1 / aggression)), t the time since it
/// joined or returned. Applies to every algorithm's select_node()/pick() without a key
/// (a keyed pick keeps its member); not to select_nodes(). The members present when the
/// balancer starts picking get their full share at once. Off by default (window 0).
struct SlowStart {
    /// How long the ramp lasts; 0 turns slow start off. At most max_option_duration.
    std::chrono::milliseconds window{0};
    /// The ramp's curve: 1 is linear, above 1 ramps faster at first. Finite, above 0.
    /// Default 1.0.
    double aggression = 1.0;
    /// The share a member has at the ramp's start, in percent of its fair share (0 to
    /// 100). Default 10.
    double min_weight_percent = 10.0;

    bool enabled() const noexcept { return window.count() > 0; }
};

/// The hedging of the idempotent calls (CallOptions::idempotent) through a balancer and the
/// budget of their extra attempts, hedges and retries alike (Envoy's retry budget, gRPC's
/// retry throttling). Announced to the nodes that only route through the balancer, like
/// `outlier_detection`; each node keeps its own budget. Checked when the balancer starts.
struct HedgingPolicy {
    /// How idempotent calls through the balancer that set no CallOptions::hedging are
    /// hedged: `delay` 0 (the recent p95) up to max_option_duration, `max_attempts` 2 to 5.
    /// Unset (the default): only a call that asks is hedged.
    std::optional<Hedging> calls;
    /// Extra attempts a node sends through the balancer: at most this percent of its
    /// idempotent calls through it, 0 to 100. Default 5.
    double budget_percent = 5.0;
    /// ...or this many a second when that is more (a floor for a balancer with few calls),
    /// 0 to 1000. Default 1. At most 10 unspent attempts are banked.
    double budget_min_per_second = 1.0;
    /// The functions, as "module.function", whose calls through the balancer are
    /// idempotent without CallOptions::idempotent (gRPC's per-method retry and hedging
    /// policy): they are hedged as `calls` says, or as the call's own CallOptions::hedging,
    /// and retried after a lost link, within the budget. Each name has a non-empty module
    /// and function of printable characters, at most 255 bytes; at most 1,000 names, none twice.
    /// Default: none.
    std::vector<std::string> idempotent_functions;
};

/// Options of a balancer (predecessor-compatibility §1.1; `selection_algorithm` is named
/// `algorithm` here and is a plugin name).
struct LoadBalancerOptions {
    /// Balancer name; also the name of its group. Required, non-empty.
    std::string name;
    /// Plugin name of the selection algorithm, e.g. "round_robin". Default "peak_ewma",
    /// the built-in that keeps the caller's tail nearest a healthy cluster's when a member
    /// is slow, paused or failing fast (doc/reference/algorithms.md, "The default"); the
    /// predecessor's default was "random".
    std::string algorithm = "peak_ewma";
    /// Options forwarded to the algorithm's `init` (a JSON object).
    boost::json::object algorithm_opts;
    /// Whether this node registers as a target (predecessor-compatibility §3.3). Default:
    /// all nodes.
    NodeMatchList node_match_list;
    /// Longest wait for in-flight calls when stopping. Default 15 s, as in the predecessor.
    std::chrono::milliseconds drain_timeout{15000};
    /// Which failing members this node stops picking, and for how long.
    OutlierDetection outlier_detection;
    /// How a member that joins or returns from ejection ramps up to its share. Announced
    /// to the nodes that only route through the balancer, like `outlier_detection`.
    SlowStart slow_start;
    /// Hedging of idempotent calls and the budget of hedges and retries.
    HedgingPolicy hedging;
};

/// One balancer on one node. Obtain it from `Cluster::start_balancer` (hosted: it may join
/// the group) or implicitly when routing through a balancer that only other nodes host
/// (routing-only: built from the algorithm its members announce, never joins). A hosted
/// balancer is the last child of its supervision subtree (predecessor-compatibility §1.1,
/// §3.5, §3.6; doc/explanation/supervision.md); a routing-only one starts and stops its
/// algorithm's services itself.
///
/// A pick reads one atomically published route (algorithm instance, member snapshot and
/// the members' slow start times), takes no lock and allocates nothing on success; it
/// counts one call in flight on its member until the release. Membership changes, set_algorithm() and set_options() publish
/// a new route without blocking a pick (doc/architecture.md).
///
/// Thread safety: distinct objects safe; shared objects safe, except that prepare(),
/// start() and stop() are called one at a time (Service's contract).
class LoadBalancer : public Service, public std::enable_shared_from_this<LoadBalancer> {
public:
    /// Used by Cluster, which passes what the balancer reaches of it (`node`, internal;
    /// it must outlive the balancer). `hosted` = started on this node by the user.
    LoadBalancer(detail::ClusterLink& node, LoadBalancerOptions options,
                 std::shared_ptr<SelectionAlgorithm> algorithm, bool hosted);
    ~LoadBalancer() override;

    LoadBalancer(const LoadBalancer&) = delete;
    LoadBalancer& operator=(const LoadBalancer&) = delete;

    /// The balancer's name (also its group's).
    std::string name() const override;

    /// The balancer's options as they are now: those it was started with, except that
    /// `algorithm` and `algorithm_opts` are the current ones (see set_algorithm()) and, on a
    /// routing-only balancer, `outlier_detection` and `slow_start` are what the members
    /// announce. A copy, since these may change at any time. Thread-safe.
    LoadBalancerOptions options() const;

    /// The current algorithm's plugin name, e.g. "round_robin". Thread-safe.
    std::string algorithm_name() const;

    /// The current algorithm's options (`algorithm_opts`). Thread-safe.
    boost::json::object algorithm_options() const;

    /// Replaces the balancer's algorithm while it serves: loads plugin `algorithm`, builds
    /// a new instance and runs its `init` with `options` (a JSON object, possibly empty),
    /// and only when that succeeded publishes it in one atomic store, in place of the
    /// current instance. Picks never wait for it and no call fails because of it:
    /// - a call picked before the store finishes on the member it picked, and release()
    ///   tells the instance that picked it (release_node() by name tells the new one);
    /// - every pick that starts after set_algorithm() returns uses the new instance;
    /// - the old instance is destroyed when the last pick using it (a Picked) is gone, and
    ///   its plugin library stays loaded until then (PluginRegistry keeps a library per
    ///   object);
    /// - what the old instance derived per member goes with it: the route gets a fresh
    ///   copy of the member snapshot, without the old instance's state; the members'
    ///   counts of calls in flight (the balancer's) carry on unchanged.
    /// A hosted balancer that is a member of its group announces the new algorithm and
    /// options to every node (Groups::join again), so nodes that only route through it
    /// (clients) switch to the same algorithm; a routing-only balancer switches by itself
    /// when the announcement of the members changes.
    ///
    /// Errors (nothing changes, the current algorithm keeps serving):
    /// - `not_found` "no plugin for algorithm <a> ..." when no `librpclb_<a>.so` is on the
    ///   plugin path;
    /// - `bad_request` when the plugin refuses to load (ABI or compiler mismatch), when its
    ///   `init` rejects `options` (message "balancer <b>: algorithm <a> init failed:
    ///   <the algorithm's own message>"), or when the current or the new algorithm runs
    ///   services (least_cpu's poller): those are started by the balancer's supervisor,
    ///   so such a change needs a stop and a start of the balancer.
    /// Details: {"load_balancer", "algorithm", "node"}.
    ///
    /// Thread safety: safe from any thread, concurrently with picks, releases, membership
    /// changes and other calls of set_algorithm() / set_options() (which are applied one at
    /// a time; the last one wins). Blocks while the plugin loads and `init` runs; call it
    /// from a control thread, not from a network or handler thread that calls wait on.
    Result<void> set_algorithm(const std::string& algorithm, const boost::json::object& options = {});

    /// set_algorithm() with the current algorithm's name: a new instance with `options`
    /// (e.g. new `weights` for weighted_round_robin). Same guarantees and errors.
    Result<void> set_options(const boost::json::object& options);

    /// True when this node is a member of the balancer's group.
    bool joined() const noexcept;

    /// True when started on this node with Cluster::start_balancer.
    bool hosted() const noexcept;

    /// The current members (never null; possibly empty). Holds the route they belong to,
    /// with its algorithm instance, as long as the pointer lives.
    std::shared_ptr<const MemberSnapshot> members() const;

    /// Members as a list (predecessor-compatibility §1.2). Error: `service_unavailable` "no
    /// members registered" with details {"load_balancer": name} when the group is empty.
    Result<std::vector<std::string>> get_members() const;

    /// A pick: the member snapshot it was made from, the chosen member's index in it, and
    /// what a call to it counts on. `members` shares ownership with the balancer's route at
    /// the pick, so while a Picked lives the algorithm instance that made it and the
    /// member's in-flight count live too (even across set_algorithm() and membership
    /// changes): a call keeps its Picked from track() to release().
    struct Picked {
        std::shared_ptr<const MemberSnapshot> members;  ///< never null
        std::size_t index = 0;                          ///< < members->nodes.size()
        /// The chosen member's calls in flight from this node through this balancer, which
        /// the pick (or as_picked()) went up on and release() / untrack() take it off;
        /// null in a Picked of as_picked() for a node that is not a member.
        InFlightCount* calls = nullptr;
        /// The algorithm instance that made the pick, which release() tells; null in a
        /// Picked of as_picked().
        SelectionAlgorithm* algorithm = nullptr;
        /// When the pick was made (the start of the latency release() reports).
        std::chrono::steady_clock::time_point at{};
        /// The chosen member's name; valid as long as this Picked (not for a Picked of
        /// as_picked() whose `calls` is null).
        const std::string& node() const noexcept { return members->nodes[index]; }
    };

    /// Picks a member with the algorithm (predecessor-compatibility §1.3) without copying
    /// its name, and counts one call in flight on it (MemberSnapshot::in_flight) until
    /// release() or untrack() of the Picked, or release_node() of its name. Errors: the
    /// empty-group error of get_members();
    /// `internal_server_error` naming the balancer when the algorithm throws or returns an
    /// index out of range; an algorithm's own ErrorMessage as is. On success it allocates
    /// nothing (once the algorithm has built what it caches for the current snapshot) as
    /// long as no telemetry subscriber is connected. With slow start on
    /// (LoadBalancerOptions::slow_start), a member still ramping up is kept with the
    /// probability of its share, else the algorithm picks again (and hears of the pick it
    /// made through `release`, with nothing known of a call); up to 8 picks, the last one
    /// stands; not for a pick with `options.key`. Thread-safe.
    Result<Picked> pick(const PickOptions& options = {});

    /// pick(), returning a copy of the chosen member's name: that copy allocates when the
    /// name is longer than std::string's inline buffer (15 characters in libstdc++).
    /// Errors: those of pick(). Thread-safe.
    Result<std::string> select_node(const PickOptions& options = {});

    /// Picks up to `count` distinct members, best first, with the algorithm's
    /// `choose_nodes` (algorithms without one give a uniformly random sample of
    /// `min(count, members)` distinct members); `options.key` is forwarded (hash_ring walks
    /// its ring from the key, so the first node is select_node's with the same key).
    /// Errors: the empty-group error of get_members(); an algorithm's ErrorMessage as is;
    /// `internal_server_error` with details {"load_balancer": name} when the algorithm
    /// throws ("algorithm <a> threw: <what>") or breaks the contract: an index out of
    /// range ("algorithm <a> picked an index out of range"), the same member twice
    /// ("algorithm <a> picked node <n> twice") or more than `count` ("algorithm <a> picked
    /// <k> nodes, more than the <count> asked for"). A broken answer is refused whole
    /// rather than repaired, so a faulty plugin is seen at once instead of quietly
    /// narrowing fan-outs. Thread-safe; allocates.
    Result<std::vector<std::string>> select_nodes(std::size_t count, const PickOptions& options = {});

    /// A call to `node` that a select_node() picked has finished with `outcome` (default:
    /// nothing known): one call fewer in flight on it (never below zero), and the
    /// algorithm's `release` with the current snapshot, when it holds `node`; nothing when
    /// it doesn't. For callers that kept only the name; the router releases its calls
    /// with release(). Exceptions from the algorithm are logged. Thread-safe.
    void release_node(std::string_view node, const CallOutcome& outcome = {}) noexcept;

    /// Counts a picked call in the balancer's total (in_flight(), which the drain waits
    /// for). Each track() is followed by exactly one release() or untrack() of the same
    /// Picked. No lock, no allocation. Thread-safe.
    void track(const Picked& picked) noexcept;

    /// A call routed by a pick has finished with `outcome` (its latency is set here, from
    /// `picked.at`): one call fewer on the member's count, the algorithm that picked it
    /// told (`release(*picked.members, picked.index, outcome)`, the snapshot it picked
    /// from), and one fewer on the total. Exceptions from the algorithm are logged.
    /// Thread-safe.
    void release(const Picked& picked, CallOutcome outcome) noexcept;

    /// A tracked call that no pick chose (as_picked()) has finished: one call fewer on the
    /// member's count and on the total; the count the call went up on, whatever the
    /// membership is now. Thread-safe.
    void untrack(const Picked& picked) noexcept;

    /// `node` as a pick of it from the current snapshot would give it, counted on its
    /// member's count like a pick, for a call to a node that no pick chose (the random-node
    /// helpers given this balancer); `calls` null when `node` is not a member (then only
    /// the total counts the call, after track()). `algorithm` is null: no algorithm hears
    /// of it. Binary search of the snapshot; no lock; thread-safe.
    Picked as_picked(std::string_view node);

    /// The current algorithm instance. The reference stays valid until the next
    /// set_algorithm() / set_options() (or the balancer's end); for tests and tools.
    SelectionAlgorithm& algorithm() noexcept;

    /// The current algorithm's `local()` answer, read by prepare() and by each
    /// set_algorithm(): load-balanced calls run on this node without selection
    /// (call_direct).
    bool local() const noexcept;

    /// Load-balanced calls from this node through this balancer still in flight (tracked
    /// and not yet released), to members and to nodes that are not members alike.
    std::int64_t in_flight() const noexcept;

    /// Calls other nodes routed here through this balancer that this node is running now
    /// (the serving side of the drain).
    std::int64_t serving() const noexcept;

    // ---- used by Cluster ----------------------------------------------------------------

    /// Runs the algorithm's `init` with `algorithm_opts`, reads its `local()` answer and
    /// returns the services it asks for (`services()`, the predecessor's `child_specs`), which a
    /// hosted balancer's supervisor starts before start(). Runs once: later calls (and
    /// restarts) return the same services without running `init` again, since picks may
    /// run concurrently with a restart and `init` is not safe against them (plugin
    /// contract). Throws std::runtime_error "balancer <b>: algorithm <a> <hook> failed:
    /// <what>", where <hook> is the one that threw: `init`, `services()` or `local()`
    /// (any exception; "... failed with an unknown exception" for one that is not a
    /// std::exception); it may then be called again.
    const std::vector<std::shared_ptr<Service>>& prepare();

    /// Runs prepare() if it hasn't run, starts the services of a routing-only balancer,
    /// follows the group (membership changes reach the algorithm), and joins it when
    /// hosted and `node_match_list` matches this node, so that it is selectable when
    /// start() returns (predecessor-compatibility §3.2). Supports start() after stop() (a
    /// restart). Throws std::runtime_error naming the balancer on failure; then nothing is
    /// left running.
    void start() override;

    /// Leaves the group (from then on calls routed here by it get `draining`), waits until
    /// both this node's in-flight calls through it and the calls it routed here that this
    /// node is running are done, up to `drain_timeout` (a warning is logged when some are
    /// still running; they are not cancelled), stops following
    /// the group, and stops the services of a routing-only balancer
    /// (predecessor-compatibility §3.5; errors of the leave are swallowed). Idempotent.
    void stop() noexcept override;

    /// Members left out of picks now because their calls failed (OutlierDetection),
    /// ascending. Thread-safe.
    std::vector<std::string> ejected() const;

    /// Ejections the OutlierDetection::max_ejection_percent cap refused so far.
    std::uint64_t ejections_refused() const;

    /// Calls this node sent through this balancer and not finished, per member: (node,
    /// count) for every node with at least one, sorted by node (the admin console's "in
    /// flight per member"). Read from the members' counts that track() and untrack()
    /// change: the current snapshot's, and those of members that left while a call still
    /// held their count. Calls to nodes that were not members when tracked are in
    /// in_flight() only. Any thread; allocates; a short lock that no call path takes.
    std::vector<std::pair<std::string, std::int64_t>> in_flight_by_member() const;
    /// Hedging's and retries' counts for the calls this node sent through this balancer
    /// (Hedging, CallOptions::idempotent).
    struct HedgeStats {
        std::uint64_t hedged_calls = 0;     ///< calls started with hedging
        std::uint64_t hedges = 0;           ///< extra attempts sent
        std::uint64_t hedge_wins = 0;       ///< calls whose answer came from an extra attempt
        std::uint64_t budget_refusals = 0;  ///< extra attempts or retries not sent: the budget was spent
        std::uint64_t late_replies = 0;     ///< answers to attempts that lost, dropped
        std::uint64_t retries = 0;          ///< idempotent calls sent again after their link was lost
    };
    /// A consistent-enough copy of the counts (each read on its own). Thread-safe.
    HedgeStats hedge_stats() const noexcept;
    /// The p95 latency of the recent successful calls this node sent through this
    /// balancer, counted once a call with hedging went through it (older calls weigh
    /// less: every 1,000 calls halve the counts); nullopt until 20 calls are counted.
    /// Rounded up to its bucket's bound, at most 19 % high. Thread-safe; no lock.
    std::optional<std::chrono::microseconds> recent_p95() const noexcept;
    /// The router's: an idempotent call starts (`hedged`: with hedging); its deposit in the
    /// budget that hedges and retries share (HedgingPolicy, detail::HedgeBudget).
    void budget_call_started(bool hedged) noexcept;
    /// The hedging an idempotent call through this balancer gets when it sets none
    /// (HedgingPolicy::calls, as announced to a routing-only balancer). Thread-safe; no lock.
    std::optional<Hedging> call_hedging() const noexcept;
    /// Whether calls of `module`.`function` through this balancer are idempotent by its
    /// policy (HedgingPolicy::idempotent_functions, as announced to a routing-only
    /// balancer). Thread-safe; no lock; allocates nothing.
    bool marks_idempotent(std::string_view module, std::string_view function) const noexcept;
    /// The router's: takes the budget's token for an extra attempt (`retry`: for a retry);
    /// false (and counted in `budget_refusals`) when it is spent.
    bool take_budget_token(bool retry) noexcept;
    /// The router's: an extra attempt answered first / an attempt's answer came after the
    /// call's.
    void count_hedge_win() noexcept;
    void count_late_reply() noexcept;
    /// The router's: a hedged call asked for `max_attempts` with only `members` members to
    /// send them to, and gets one attempt per member; logged as a warning once per balancer.
    void attempts_clamped(int max_attempts, std::size_t members) noexcept;

    /// Counts a call routed here by this balancer while this node runs it.
    void track_served() noexcept;
    /// That call has finished.
    void release_served() noexcept;

    /// The announcement this balancer joins with: {"algorithm": ..., "algorithm_opts": ...,
    /// "outlier_detection": ..., "slow_start": ...}.
    boost::json::object announcement() const;

private:
    // The state and the work behind the functions above (src/routing/balancer_impl.hpp).
    struct Impl;
    friend struct detail::BalancerAccess;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rpclb

namespace rpclb::detail {

/// The first problem of `options`, or nullopt: name non-empty, UTF-8 without control characters,
/// algorithm non-empty, drain_timeout in 0..max_option_duration. Whether the algorithm's
/// plugin exists and accepts `algorithm_opts` is only known when the balancer starts.
/// Thread safety: pure function.
std::optional<OptionProblem> check(const LoadBalancerOptions& options);

}  // namespace rpclb::detail
