#include "routing/call_machine.hpp"

#include "routing/call_outcome.hpp"

#include <rpclb/detail/deadline.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <algorithm>

namespace rpclb::detail {

namespace {

// The link failed while the request was on it or after it left (not before it was sent,
// and not because this node stops).
bool lost_after_sending(LinkError link) {
    return link != LinkError{} && link != LinkError::not_connected && link != LinkError::stopping &&
           link != LinkError::channel_closed;
}

}  // namespace

CallMachine::Actions CallMachine::start(Clock::time_point now) {
    Actions out;
    retry_ = config_.retry;
    if (auto bad = bad_options()) {
        complete(out, std::move(*bad));
        return out;
    }
    // The timeout bounds the whole call: waits for a member, re-picks and the request.
    // Made from a handler, the call ends by that handler's call's deadline too.
    if (config_.call) {
        deadline_ = deadline_after(now, config_.timeout);
        if (config_.inherited && *config_.inherited < deadline_) {
            deadline_ = *config_.inherited;
            if (deadline_ <= now) {
                auto e = call_failure(Failure::timeout, config_.node.empty() ? config_.self : config_.node,
                                      config_.module, config_.function);
                e.message = "not sent: the deadline of the call whose handler made it had passed";
                complete(out, std::move(e));
                return out;
            }
        }
    }
    pick(out, false, false);
    return out;
}

// A call's timeout outside CallOptions::timeout's range, then CallOptions::hedging's
// problem: bad_request naming the option, before anything is picked or sent. Sets hedging_
// when the call is hedged (not when call_directly runs it here, in one attempt).
std::optional<ErrorMessage> CallMachine::bad_options() {
    const auto timeout = config_.timeout;
    const auto& node = config_.node.empty() ? config_.self : config_.node;  // the node named, or this one
    if (config_.call && (timeout.count() < 1 || timeout > max_option_duration))
        return call_error(ErrorCode::bad_request,
                          "timeout must be 1 to " + std::to_string(max_option_duration.count()) + " ms; got " +
                              std::to_string(timeout.count()) + " ms",
                          node, config_.module, config_.function);
    const auto& h = config_.hedging;
    if (!h) return std::nullopt;
    std::string problem;
    if (!config_.call)
        problem = "hedging: a cast is never hedged (it has no answer to wait for)";
    else if (!config_.balanced)
        problem = "hedging: applies only to a call through a balancer (CallOptions::load_balancer)";
    else if (!config_.idempotent)
        problem = "hedging: the call is not marked idempotent (CallOptions::idempotent); only an idempotent "
                  "call may run twice";
    else if (h->delay.count() < 0 || h->delay > timeout)
        problem = "hedging.delay must be 0 (the balancer's recent p95) or 1 ms to the call's timeout of " +
                  std::to_string(timeout.count()) + " ms; got " + std::to_string(h->delay.count()) + " ms";
    else if (h->max_attempts < 2 || h->max_attempts > 5)
        problem = "hedging.max_attempts must be 2 to 5; got " + std::to_string(h->max_attempts);
    if (problem.empty()) {
        if (!config_.call_directly) hedging_ = *h;
        return std::nullopt;
    }
    return call_error(ErrorCode::bad_request, std::move(problem), node, config_.module, config_.function);
}

CallMachine::Actions CallMachine::on_picked(int slot, Picked picked, Clock::time_point now) {
    Actions out;
    auto& s = slots_.at(slot);
    s.state = SlotState::picked;
    s.member = std::move(picked.member);
    s.repickable = picked.repickable;
    // Cancelled while it picked: the pick is not used.
    if (completed_) {
        release(out, slot, cancelled_error());
        return out;
    }
    if (s.hedge) {
        // The algorithm may pick a member an attempt went to already: pick again, a few times.
        const auto tried = [&] {
            for (const auto& other : slots_)
                if (other.attempt >= 0 && other.member == s.member) return true;
            return false;
        };
        if (attempts_ >= hedging_->max_attempts || tried()) {
            release(out, slot, cancelled_error());
            if (attempts_ < hedging_->max_attempts && ++hedge_picks_ < max_hedge_picks) pick(out, true, false);
            return out;
        }
        hedge_picks_ = 0;
        send(out, slot, now);
        if (!completed_ && attempts_ < hedging_->max_attempts) arm_hedge(out);
        return out;
    }
    // The first attempt of a hedged call: at most one attempt per member of the balancer
    // now (one member: no hedge), and the next attempt goes after the delay (the
    // balancer's recent p95 by default).
    if (picked.idempotent && s.repickable && attempts_ == 0) idempotent_ = true;
    if (!hedging_ && !config_.hedging && picked.hedging && config_.call && idempotent_ && s.repickable &&
        attempts_ == 0)
        hedging_ = picked.hedging;
    const bool first_hedged = hedging_ && s.repickable && attempts_ == 0;
    if (first_hedged) {
        hedging_->max_attempts =
            static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(hedging_->max_attempts),
                                                   std::max<std::size_t>(picked.members, 1)));
        hedge_delay_ = hedging_->delay;
        if (hedge_delay_ == Clock::duration::zero())
            hedge_delay_ = picked.recent_p95
                               ? std::max<Clock::duration>(std::chrono::milliseconds(1),
                                                           std::chrono::ceil<std::chrono::milliseconds>(*picked.recent_p95))
                               : std::chrono::milliseconds(10);
    }
    send(out, slot, now);
    if (first_hedged && !completed_ && attempts_ < hedging_->max_attempts) arm_hedge(out);
    return out;
}

CallMachine::Actions CallMachine::on_pick_failed(int slot, ErrorMessage why, bool no_members, Clock::time_point now) {
    Actions out;
    auto& s = slots_.at(slot);
    s.state = SlotState::released;  // nothing was picked: nothing to release
    if (completed_ || s.hedge) return out;
    if (s.retry) {  // no member or no budget to retry with: the failure stands
        complete(out, std::move(*retry_error_));
        return out;
    }
    if (!no_members || !retry_.consume()) {
        complete(out, std::move(why));
        return out;
    }
    // Nothing to send to (predecessor-compatibility §4.1): wait, within the deadline.
    Clock::duration wait = retry_.sleep;
    if (config_.call) {
        if (now >= deadline_) {
            auto e = call_failure(Failure::timeout, config_.self, config_.module, config_.function);
            e.message += " while waiting for a member: " + why.message;
            for (const auto& [k, v] : why.details)
                if (!e.details.contains(k)) e.details[k] = v;
            complete(out, std::move(e));
            return out;
        }
        wait = std::min(wait, deadline_ - now);
    }
    out.emplace_back(std::in_place_type<Wait>, Wait{Timer::route, wait});
    return out;
}

CallMachine::Actions CallMachine::on_answer(int slot, RequestOutcome outcome, Clock::time_point now) {
    Actions out;
    auto& s = slots_.at(slot);
    auto& result = outcome.result;
    // A serving node does not start a request that waited past its timeout and answers
    // request_timeout then; that answer can come before this call's own deadline is seen
    // to pass. Either way the call timed out: it fails as its own deadline fails it.
    if (config_.call && !result && result.error().code == ErrorCode::request_timeout && now >= deadline_)
        result = call_failure(Failure::timeout, s.member, config_.module, config_.function);
    const bool hedged = hedging_ && s.repickable;
    if (hedged) {
        // The first success wins; the answers after it, whatever they say, are released as
        // cancelled (their members' failures do not count them) and counted as late.
        if (completed_) {
            release(out, slot, cancelled_error(), true);
            return out;
        }
        --in_flight_;
        if (result) {
            release(out, slot, result, false, s.attempt > 0);
            complete(out, std::move(result));
            return out;
        }
        release(out, slot, result);
        if (in_flight_ > 0) return out;  // the others may still answer
    } else {
        // Answered after the call was cancelled: a failure may be the cancel's doing, and
        // is not the member's.
        release(out, slot, completed_ && !result ? CallResult(cancelled_error()) : result);
        if (completed_) return out;
    }
    // Never run there (refused while draining, or never sent because the member had just
    // said bye or its link was gone): choose again among the members left
    // (doc/explanation/draining-and-retries.md).
    if (config_.call && s.repickable && !result && (is_draining(result.error()) || outcome.never_sent()) &&
        reselections_ < max_reselections) {
        ++reselections_;
        pick(out, false, false);
        return out;
    }
    // An idempotent call whose link was lost after its request left may have run there or
    // not: it goes again, to the member the algorithm picks now, if the budget allows.
    if (config_.call && idempotent_ && s.repickable && !result && lost_after_sending(outcome.link) &&
        reselections_ < max_reselections && now < deadline_) {
        ++reselections_;
        retry_error_ = result.error();
        pick(out, false, true);
        return out;
    }
    complete(out, std::move(result));
    return out;
}

CallMachine::Actions CallMachine::on_timer(Timer timer, bool fired, Clock::time_point) {
    Actions out;
    if (completed_) return out;
    if (timer == Timer::route) {
        if (fired)
            pick(out, false, false);
        else
            complete(out, stopping_error());
        return out;
    }
    // A hedge: when no answer came yet and fewer than max_attempts were sent.
    if (fired && attempts_ < hedging_->max_attempts) {
        hedge_picks_ = 0;
        pick(out, true, true);
    }
    return out;
}

CallMachine::Actions CallMachine::cancel() {
    Actions out;
    if (!completed_) complete(out, cancelled_error());
    return out;
}

void CallMachine::pick(Actions& out, bool hedge, bool budgeted) {
    Slot slot;
    slot.hedge = hedge;
    slot.retry = budgeted && !hedge;
    slots_.push_back(std::move(slot));
    out.emplace_back(std::in_place_type<Pick>, Pick{static_cast<int>(slots_.size() - 1), hedge, budgeted});
}

void CallMachine::send(Actions& out, int slot, Clock::time_point now) {
    auto& s = slots_[slot];
    s.state = SlotState::sent;
    s.attempt = attempts_++;
    const bool hedged = hedging_ && s.repickable;
    if (hedged) ++in_flight_;
    if (config_.call && now >= deadline_) {
        auto outcome = on_answer(slot, RequestOutcome(call_failure(Failure::timeout, s.member, config_.module,
                                                                   config_.function)),
                                 now);
        out.insert(out.end(), std::make_move_iterator(outcome.begin()), std::make_move_iterator(outcome.end()));
        return;
    }
    // A call an algorithm picked may go again (after `draining`, or as a hedge).
    const auto reason = s.hedge ? Reason::hedge : s.retry ? Reason::retry : s.attempt == 0 ? Reason::first : Reason::repick;
    out.emplace_back(std::in_place_type<Send>,
                     Send{slot, s.attempt, deadline_, hedged, !config_.call || !s.repickable, reason});
}

void CallMachine::release(Actions& out, int slot, const CallResult& result, bool late, bool hedge_won) {
    slots_[slot].state = SlotState::released;
    out.emplace_back(std::in_place_type<Release>, Release{slot, outcome_of(result), late, hedge_won});
}

void CallMachine::complete(Actions& out, CallResult result) {
    completed_ = true;
    out.emplace_back(std::in_place_type<Complete>, Complete{std::move(result)});
    // The attempts still out are not waited for: their members may stop early.
    for (std::size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].state == SlotState::sent)
            out.emplace_back(std::in_place_type<Cancel>, Cancel{static_cast<int>(i)});
}

void CallMachine::arm_hedge(Actions& out) const { out.emplace_back(std::in_place_type<Wait>, Wait{Timer::hedge, hedge_delay_}); }

ErrorMessage CallMachine::stopping_error() const {
    return call_failure(Failure::node_stopping, config_.self, config_.module, config_.function);
}

ErrorMessage CallMachine::cancelled_error() const {
    return call_failure(Failure::cancelled, config_.node.empty() ? config_.self : config_.node, config_.module,
                        config_.function);
}

}  // namespace rpclb::detail
