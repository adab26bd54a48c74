// The rules of one call, without I/O (internal, sans-I/O).
#pragma once

#include "transport/link_error.hpp"

#include <rpclb/call_options.hpp>
#include <rpclb/error.hpp>
#include <rpclb/retry.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <boost/container/small_vector.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rpclb::detail {

/// One call or cast from start to completion, as a state machine with no sockets, timers,
/// clocks, threads or locks (doc/architecture.md "Calls"). It owns the call's rules: the
/// checked options, the deadline (inherited from the handler that makes the call when
/// earlier), the waits for a member, the re-pick after a `draining` refusal or a request
/// that never left, hedged attempts, cancellation, the late-answer rule, the outcome every
/// pick is released with, and the one completion. Its driver (CallOperation) feeds it
/// events — started, picked, pick failed, answered, timer fired, cancelled — with the time
/// they happened, and does the actions it returns, in order: pick, send, wait, release,
/// complete, cancel. Every pick it asks for is released exactly once (after it was
/// picked), and it completes exactly once. A call is sent again only when it never ran where it went
/// (`draining`, or never sent), or, when idempotent, when its link was lost after it
/// left (a retry, which takes a token of the balancer's budget as a hedge does).
///
/// Thread safety: none; the driver feeds it from one thread at a time.
class CallMachine {
public:
    using Clock = std::chrono::steady_clock;
    enum class Timer { route, hedge };

    /// Pick a member for pick number `slot`: the first attempt's (or its re-pick's), or,
    /// with `hedge`, an extra attempt's, which goes to no member an attempt went to. `budgeted`: the
    /// pick needs a token of the balancer's budget first (the first pick of an extra
    /// attempt, or a retry's); without one it fails.
    struct Pick {
        int slot;
        bool hedge = false;
        bool budgeted = false;
    };
    /// Why an attempt is sent: the call's first, again after it never ran (`draining`, not
    /// sent), an extra attempt of a hedged call, an idempotent call's retry.
    enum class Reason { first, repick, hedge, retry };
    /// Send the call (or cast) to the member of pick `slot`; the call ends by `deadline`.
    /// `attempt` counts sends from 0; `hedged`: an attempt of a hedged call (not on the
    /// caller's thread); `last`: no send follows, so the arguments may be moved.
    struct Send {
        int slot;
        int attempt;
        Clock::time_point deadline;
        bool hedged = false;
        bool last = false;
        Reason reason = Reason::first;
    };
    /// Wait `delay`, then feed on_timer(timer, ...).
    struct Wait {
        Timer timer;
        Clock::duration delay;
    };
    /// End pick `slot`'s count and tell its algorithm `outcome`. `late`: the answer of an
    /// attempt that lost to another; `hedge_won`: an extra attempt answered first.
    struct Release {
        int slot;
        CallOutcome outcome;
        bool late = false;
        bool hedge_won = false;
    };
    /// The call ended with `result` (a cast: null or its error).
    struct Complete {
        CallResult result;
    };
    /// Tell the member of pick `slot` the call no longer wants its attempt's answer (the
    /// call ended without it); its answer still comes and is released.
    struct Cancel {
        int slot;
    };
    using Action = std::variant<Pick, Send, Wait, Release, Complete, Cancel>;
    using Actions = boost::container::small_vector<Action, 3>;

    /// What the call asks for, from its CallSpec and the node's defaults. The strings are
    /// views of the driver's, which outlive the machine.
    struct Config {
        bool call = true;                    ///< false: a cast (no deadline, no answer)
        std::string_view self;               ///< this node, in errors about the call itself
        std::string_view node;               ///< a direct call's target; else empty
        std::string_view module, function;
        std::chrono::milliseconds timeout{10000};
        std::optional<Clock::time_point> inherited;  ///< the deadline of the handler's call
        std::string_view load_balancer;      ///< a balanced call's balancer
        bool balanced = false;               ///< through a balancer, not a random-node helper
        bool idempotent = false;
        bool call_directly = false;          ///< runs here, in one attempt
        std::optional<Hedging> hedging;      ///< unchecked
        RetryPolicy retry;                   ///< waits for a member
    };
    /// A pick's member. `repickable`: an algorithm picked it, so a call it never ran may
    /// go to another; `members`, `recent_p95`: the balancer's, for a first pick.
    struct Picked {
        std::string member;
        bool repickable = false;
        std::size_t members = 1;
        std::optional<Clock::duration> recent_p95{};
        /// The balancer marks the call's function idempotent (HedgingPolicy::idempotent_functions):
        /// read at the first attempt's pick, as if Config::idempotent were set.
        bool idempotent = false;
        /// The balancer's hedging of an idempotent call that sets none (HedgingPolicy::calls).
        std::optional<Hedging> hedging{};
    };

    /// A call whose target answered `draining` (or never got the request) goes to another
    /// member at most this often.
    static constexpr int max_reselections = 16;
    /// A hedge's pick that lands on a member already tried is made again at most this often.
    static constexpr int max_hedge_picks = 8;

    explicit CallMachine(Config config) : config_(std::move(config)), idempotent_(config_.idempotent) {}

    /// The call starts at `now`: bad options complete it with `bad_request`, else the
    /// first pick.
    Actions start(Clock::time_point now);
    /// Pick `slot` chose `picked`.
    Actions on_picked(int slot, Picked picked, Clock::time_point now);
    /// Pick `slot` found nothing: `no_members` (the wait for a member applies) or another
    /// error that ends the call (`why`). A hedge that found nothing, or no budget, just is
    /// not sent.
    Actions on_pick_failed(int slot, ErrorMessage why, bool no_members, Clock::time_point now);
    /// The attempt of pick `slot` ended with `outcome`.
    Actions on_answer(int slot, RequestOutcome outcome, Clock::time_point now);
    /// A Wait ended: `fired`, or not because the node stops.
    Actions on_timer(Timer timer, bool fired, Clock::time_point now);
    /// The caller gave up: completes with Failure::cancelled unless completed already.
    Actions cancel();

    bool completed() const noexcept { return completed_; }
    /// Whether the call may run more than once: Config::idempotent, or its balancer marks
    /// its function so (known once the first attempt is picked).
    bool idempotent() const noexcept { return idempotent_; }
    /// Config::call_directly: the call runs on this node, in one attempt, without a pick.
    bool call_directly() const noexcept { return config_.call_directly; }
    /// The call's deadline (time_point::max() for a cast, or before start).
    Clock::time_point deadline() const noexcept { return deadline_; }
    /// The member of pick `slot`, once picked.
    const std::string& member(int slot) const { return slots_.at(slot).member; }
    /// This call's error once the node stops (Failure::node_stopping, naming this node).
    ErrorMessage stopping_error() const;

private:
    enum class SlotState { picking, picked, sent, released };
    struct Slot {
        SlotState state = SlotState::picking;
        bool hedge = false;
        bool retry = false;  // a retry's pick: when it fails, the call ends with retry_error_
        bool repickable = false;
        int attempt = -1;
        std::string member{};
    };

    std::optional<ErrorMessage> bad_options();
    void pick(Actions& out, bool hedge, bool budgeted);
    void send(Actions& out, int slot, Clock::time_point now);
    void release(Actions& out, int slot, const CallResult& result, bool late = false, bool hedge_won = false);
    void complete(Actions& out, CallResult result);
    void arm_hedge(Actions& out) const;
    ErrorMessage cancelled_error() const;

    const Config config_;
    Clock::time_point deadline_ = Clock::time_point::max();
    std::optional<Hedging> hedging_;  // checked, and not run here
    bool idempotent_ = false;         // Config::idempotent, or Picked::idempotent at the first pick
    Clock::duration hedge_delay_{};
    boost::container::small_vector<Slot, 2> slots_;
    int attempts_ = 0, in_flight_ = 0, reselections_ = 0, hedge_picks_ = 0;
    bool completed_ = false;
    RetryPolicy retry_;
    std::optional<ErrorMessage> retry_error_;  // the failure a retry's pick follows
};

}  // namespace rpclb::detail
