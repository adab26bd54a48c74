// Routing of calls and casts (doc/architecture.md "Calls"): short-circuits, selection,
// drainer tracking, the no-route retry on timers, re-selection after a `draining` reply,
// hedged attempts and the deadline a call inherits from the handler that makes it. The
// blocking API (router_timers.cpp) is a thin layer over start().
#include "routing/router.hpp"

#include "membership/mesh.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/call_outcome.hpp"
#include "transport/call_channels.hpp"
#include "rpc/rpc_server.hpp"

#include <rpclb/handler.hpp>
#include <rpclb/detail/log.hpp>
#include <rpclb/detail/option_problem.hpp>
#include <rpclb/detail/thread_rng.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

namespace rpclb::detail {
namespace asio = boost::asio;

namespace {

// A call whose target answered `draining` is sent to another member at most this often.
constexpr int max_reselections = 16;

bool is_no_members(const ErrorMessage& e) { return e.is(Failure::no_members); }

ErrorMessage no_matching_node(const NodeFilter& filter) {
    return ErrorMessage{ErrorCode::service_unavailable, "no nodes in cluster found with that filter",
                        boost::json::object{{"node_filter", filter.is_regex() ? "/" + filter.text() + "/"
                                                                              : filter.text()}},
                        make_error_code(Failure::no_matching_node)};
}

}  // namespace

// One call or cast from start to completion. Lives in shared_ptrs held by whatever it
// waits on (a connection's pending entry, a retry timer, a worker task). Completes once:
// the first of its own result and a cancellation wins.
class CallOperation : public std::enable_shared_from_this<CallOperation> {
public:
    using Spec = CallSpec;

    CallOperation(std::shared_ptr<Router> router, Spec spec, std::function<void(CallResult)> done)
        : router_(std::move(router)), spec_(std::move(spec)), done_(std::move(done)) {
        const auto& o = spec_.options;
        const auto& defaults = router_->options();
        call_directly_ = o.call_directly.value_or(defaults.call_directly);
        retry_ = RetryPolicy{o.retry.value_or(defaults.retry), o.retry_count.value_or(defaults.retry_count),
                             o.retry_sleep};
        // The predecessor's span covers direct and load-balanced calls from the start, retry
        // sleeps included; a random-node helper's span is its inner direct call's.
        if (!spec_.filter && open_span(spec_.node, spec_.options.load_balancer)) emit_span_start();
    }

    // A blocking caller would otherwise wait forever for an operation dropped unrun (its
    // timer or task discarded when the node stopped).
    ~CallOperation() {
        if (!finished_.load()) done_(stopping_error());
    }

    // This call's error once the node stops (Failure::node_stopping, naming this node).
    ErrorMessage stopping_error() const {
        return call_failure(Failure::node_stopping, router_->options().name, spec_.module, spec_.function);
    }

    void cancel() {
        finish(call_failure(Failure::cancelled, spec_.node.empty() ? router_->options().name : spec_.node,
                            spec_.module, spec_.function));
    }

    // The first attempt, once the options are checked (later attempts, after a retry
    // sleep or a `draining` reply, have the same options).
    void start(bool on_caller_thread) {
        if (auto bad = bad_timeout()) return finish(std::move(*bad));
        if (auto bad = bad_hedging()) return finish(std::move(*bad));
        // The timeout bounds the whole call: waits for a member, re-routes and the request.
        // Made from a handler, the call ends by that handler's call's deadline too.
        if (spec_.kind == Spec::Kind::call) {
            const auto now = std::chrono::steady_clock::now();
            deadline_ = now + spec_.options.timeout;
            if (const auto inherited = call_deadline(); inherited && *inherited < deadline_) {
                deadline_ = *inherited;
                if (deadline_ <= now) return finish(inherited_deadline_passed());
            }
        }
        attempt(on_caller_thread);
    }

    void attempt(bool on_caller_thread) {
        if (finished_.load()) return;  // cancelled: nothing more to send
        if (spec_.filter) return attempt_filtered(on_caller_thread);
        if (spec_.options.load_balancer.empty()) return dispatch(spec_.node, nullptr, {}, false, on_caller_thread);
        if (call_directly_) return run_locally(on_caller_thread);
        auto b = router_->balancers().route(spec_.options.load_balancer);
        if (!b) return is_no_members(b.error()) ? no_route(std::move(b.error())) : finish(std::move(b.error()));
        if ((*b)->local()) return run_locally(on_caller_thread);
        PickOptions pick;
        if (spec_.options.key) pick.key = *spec_.options.key;
        auto picked = (*b)->pick(pick);
        if (!picked)
            return is_no_members(picked.error()) ? no_route(std::move(picked.error()))
                                                 : finish(std::move(picked.error()));
        auto target = picked->node();
        const bool first_hedged = hedging_ && !hedge_balancer_;
        if (first_hedged) {
            const auto members = picked->members->nodes.size();
            if (static_cast<std::size_t>(hedging_->max_attempts) > members) {
                drop_pick(**b, *picked);
                return finish(call_error(ErrorCode::bad_request,
                                         "hedging.max_attempts is " + std::to_string(hedging_->max_attempts) +
                                             ", more than the " + std::to_string(members) + " members of balancer " +
                                             spec_.options.load_balancer,
                                         router_->options().name, spec_.module, spec_.function));
            }
            hedge_balancer_ = *b;
            hedge_balancer_->hedge_call_started();
        }
        (*b)->track(*picked);
        dispatch(std::move(target), std::move(*b), std::move(*picked), true, on_caller_thread);
        if (first_hedged) arm_hedge();  // after the first attempt went, so a hedge never goes to its member
    }

private:
    // A call's timeout outside CallOptions::timeout's range (1 ms .. 4294967295 ms, the
    // range of erpc's timeout but for 0): bad_request on every path, local or remote,
    // before anything is picked or sent. A cast has no timeout.
    std::optional<ErrorMessage> bad_timeout() const {
        const auto timeout = spec_.options.timeout;
        if (spec_.kind != Spec::Kind::call || (timeout.count() >= 1 && timeout <= max_option_duration))
            return std::nullopt;
        return call_error(ErrorCode::bad_request,
                          "timeout must be 1 to " + std::to_string(max_option_duration.count()) + " ms; got " +
                              std::to_string(timeout.count()) + " ms",
                          spec_.node.empty() ? router_->options().name : spec_.node, spec_.module, spec_.function);
    }

    // CallOptions::hedging's problem, or nullopt (then hedging_ is set unless the call
    // runs here):
    // bad_request naming the option, before anything is picked or sent.
    std::optional<ErrorMessage> bad_hedging() {
        const auto& h = spec_.options.hedging;
        if (!h) return std::nullopt;
        std::string problem;
        if (spec_.kind != Spec::Kind::call)
            problem = "hedging: a cast is never hedged (it has no answer to wait for)";
        else if (spec_.options.load_balancer.empty() || spec_.filter)
            problem = "hedging: applies only to a call through a balancer (CallOptions::load_balancer)";
        else if (!spec_.options.idempotent)
            problem = "hedging: the call is not marked idempotent (CallOptions::idempotent); only an idempotent "
                      "call may run twice";
        else if (h->delay.count() < 0 || h->delay > spec_.options.timeout)
            problem = "hedging.delay must be 0 (the balancer's recent p95) or 1 ms to the call's timeout of " +
                      std::to_string(spec_.options.timeout.count()) + " ms; got " + std::to_string(h->delay.count()) +
                      " ms";
        else if (h->max_attempts < 2 || h->max_attempts > 5)
            problem = "hedging.max_attempts must be 2 to 5; got " + std::to_string(h->max_attempts);
        if (problem.empty()) {
            // Run here (call_directly): checked, but one attempt, on this node.
            if (!call_directly_) hedging_ = *h;
            return std::nullopt;
        }
        return call_error(ErrorCode::bad_request, std::move(problem), router_->options().name, spec_.module,
                          spec_.function);
    }

    // A pick this call does not use, released as cancelled (no failure of its member).
    void drop_pick(LoadBalancer& balancer, const LoadBalancer::Picked& picked) const {
        balancer.track(picked);
        balancer.release(picked, outcome_of(call_failure(Failure::cancelled, picked.node(), spec_.module, spec_.function)));
    }

    // Sends the next attempt of a hedged call after hedging.delay (0: the balancer's recent
    // p95, 10 ms while it has none), if it has not ended.
    void arm_hedge() {
        auto delay = hedging_->delay;
        if (delay.count() == 0) {
            const auto p95 = hedge_balancer_->recent_p95();
            delay = p95 ? std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(*p95))
                        : std::chrono::milliseconds(10);
        }
        router_->after(
            delay, [self = shared_from_this()](bool fired) {
                if (fired) self->hedge();
            },
            false);
    }

    // An extra attempt, to a member no attempt of this call went to, when no answer came
    // yet, fewer than max_attempts were sent and the balancer's budget has a token.
    void hedge() {
        if (finished_.load() || attempts_.load() >= hedging_->max_attempts) return;
        if (!hedge_balancer_->take_hedge_token()) return;
        PickOptions pick;
        if (spec_.options.key) pick.key = *spec_.options.key;
        // The algorithm may pick a member an attempt went to already: up to 8 picks.
        for (int i = 0; i < 8; ++i) {
            auto picked = hedge_balancer_->pick(pick);
            if (!picked) return;
            auto target = picked->node();
            bool tried = false;
            {
                std::lock_guard lock(targets_mutex_);
                tried = std::find(targets_.begin(), targets_.end(), target) != targets_.end();
            }
            if (tried) {
                drop_pick(*hedge_balancer_, *picked);
                continue;
            }
            hedge_balancer_->track(*picked);
            dispatch(std::move(target), hedge_balancer_, std::move(*picked), true, false);
            if (attempts_.load() < hedging_->max_attempts) arm_hedge();
            return;
        }
    }

    // The random-node helpers (predecessor-compatibility §1.6, §1.7).
    void attempt_filtered(bool on_caller_thread) {
        const auto& filter = *spec_.filter;
        const auto& excluded = router_->options().excluded_node_patterns;
        if (call_directly_ || filter.matches(router_->options().name, excluded)) return run_locally(on_caller_thread);
        auto nodes = router_->mesh().routable_nodes();
        std::erase_if(nodes, [&](const std::string& n) { return !filter.matches(n, excluded); });
        if (nodes.empty()) return no_route(no_matching_node(filter));
        std::uniform_int_distribution<std::size_t> pick(0, nodes.size() - 1);
        auto target = std::move(nodes[pick(detail::thread_rng())]);
        std::shared_ptr<LoadBalancer> tracker;
        LoadBalancer::Picked counted;
        if (!spec_.options.load_balancer.empty()) {
            auto b = router_->balancers().hosted(spec_.options.load_balancer);
            if (!b) return finish(std::move(b.error()));
            tracker = std::move(*b);
            counted = tracker->as_picked(target);
            tracker->track(counted);
        }
        dispatch(std::move(target), std::move(tracker), std::move(counted), false, on_caller_thread);
    }

    // Sends to `target`; `balancer` (if any) has counted the call on `counted` (track) and
    // is released after, on the same Picked: the count it went up on and, when `picked`,
    // the algorithm that picked it, whatever the membership is by then.
    void dispatch(std::string target, std::shared_ptr<LoadBalancer> balancer, LoadBalancer::Picked counted,
                  bool picked, bool on_caller_thread) {
        // Ends the call's count; a picked call tells its algorithm how it ended.
        auto release = [balancer = std::move(balancer), picked, counted = std::move(counted)](const CallResult& result) {
            if (!balancer) return;
            if (picked)
                balancer->release(counted, outcome_of(result));
            else
                balancer->untrack(counted);
        };
        if (!claim(target)) return release(call_failure(Failure::cancelled, target, spec_.module, spec_.function));
        int attempt_index = -1;  // of a hedged call's attempts, in the order they were sent
        if (hedging_ && picked) {
            std::lock_guard lock(targets_mutex_);
            targets_.push_back(target);
            attempt_index = attempts_.fetch_add(1);
            in_flight_.fetch_add(1);
        }
        if (target == router_->options().name) {
            // Local: the handler runs here, never over the network, and is never refused.
            // Once the node closes (its worker pool is about to be joined), only a blocking
            // call, which runs the handler on its own thread, can still be served here. A
            // hedged attempt never runs on the caller's thread: the caller could not hedge
            // while its own thread runs the handler.
            const bool on_this_thread = on_caller_thread && attempt_index < 0;
            if (router_->sending_stopped() && !(on_this_thread && spec_.kind == Spec::Kind::call)) {
                if (attempt_index >= 0) return hedged_attempt_done(RequestOutcome(stopping_error()), release, attempt_index);
                CallResult stopped = stopping_error();
                release(stopped);
                return finish(std::move(stopped));
            }
            if (spec_.kind == Spec::Kind::cast) {
                router_->rpc().serve_cast(wire::Cast{spec_.module, spec_.function, std::move(spec_.args), {}});
                CallResult done = boost::json::value();
                release(done);
                return finish(std::move(done));
            }
            if (on_this_thread) {
                auto result = router_->rpc().run_handler(spec_.module, spec_.function, spec_.args, &threw_, deadline_);
                release(result);
                return finish(std::move(result));
            }
            // A hedged call's other attempts need the args too.
            auto args = attempt_index >= 0 ? spec_.args : std::move(spec_.args);
            router_->rpc().run_local(spec_.module, spec_.function, std::move(args), deadline_,
                                     [self = shared_from_this(), release = std::move(release), attempt_index](
                                         CallResult result, bool threw) {
                                         if (attempt_index >= 0)
                                             return self->hedged_attempt_done(RequestOutcome(std::move(result)),
                                                                              release, attempt_index);
                                         self->threw_ = threw;
                                         release(result);
                                         self->finish(std::move(result));
                                     });
            return;
        }
        // A load-balanced call may have to be sent again (after `draining`, or as a hedge):
        // keep the args.
        const bool may_resend = picked && spec_.kind == Spec::Kind::call;
        auto args = may_resend ? spec_.args : std::move(spec_.args);
        const auto& lb = picked ? spec_.options.load_balancer : std::string();
        if (spec_.kind == Spec::Kind::cast) {
            auto sent = send_cast(target, std::move(args), lb);
            CallResult done = sent ? CallResult(boost::json::value()) : CallResult(std::move(sent).error());
            release(done);
            return finish(std::move(done));
        }
        if (attempt_index >= 0) {
            // A hedged attempt never takes a call channel: that would hold the caller's
            // thread until this attempt's own answer, whichever attempt answered first.
            return send_call(std::move(target), std::move(args), lb, false,
                             [self = shared_from_this(), release = std::move(release), attempt_index](
                                 RequestOutcome outcome) { self->hedged_attempt_done(std::move(outcome), release, attempt_index); });
        }
        send_call(std::move(target), std::move(args), lb, on_caller_thread,
                           [self = shared_from_this(), release = std::move(release), may_resend](RequestOutcome outcome) {
                               release(outcome.result);
                               auto& result = outcome.result;
                               if (may_resend && !result && (is_draining(result.error()) || outcome.never_sent()) &&
                                   self->reselections_ < max_reselections) {
                                   // Never executed there (refused while draining, or never sent
                                   // because the member had just said bye or its link was gone):
                                   // choose again among the members left
                                   // (doc/explanation/draining-and-retries.md).
                                   ++self->reselections_;
                                   return self->attempt(false);
                               }
                               self->finish(std::move(result));
                           });
    }

    // A request to another node; `done` gets its outcome (at once when not connected).
    // On a blocking caller's thread it goes on a call channel when one can be had, and
    // `done` runs here.
    void send_call(std::string target, boost::json::array args, const std::string& lb, bool on_caller_thread,
                   std::function<void(RequestOutcome)> done) {
        // A stopped node closed its connections itself: say so, not "noconnection".
        if (router_->sending_stopped()) return done(stopping_error());
        auto c = router_->mesh().connection_to(target);
        if (!c) return done(unreachable(target));
        wire::Request request{0, spec_.module, spec_.function, std::move(args), lb};
        const auto expired = [&] { return call_failure(Failure::timeout, target, spec_.module, spec_.function); };
        auto timeout = time_left();
        if (timeout.count() <= 0) return done(expired());
        if (on_caller_thread) {
            if (auto result = router_->channels().call(*c, request, timeout)) return done(std::move(*result));
            // A channel dial that failed took part of the call's time: the link gets what is
            // left, rounded up to the millisecond, so that a 1 ms call that found no channel
            // still goes out on the link.
            timeout = time_left();
            if (timeout.count() <= 0) return done(expired());
        }
        // Once the node closes its connections (its channels stop with them, so the channel
        // above gave way), a request could be queued on a connection whose strand no thread
        // runs any more, and never complete.
        if (router_->sending_stopped()) return done(stopping_error());
        c->request(std::move(request), timeout, std::move(done));
    }

    // The end of attempt `index` of a hedged call. The first success wins; an attempt that
    // failed while others are in flight leaves the call to them; the last to fail ends
    // it (or, never run there, picks again as any call does). Attempts that end after the
    // winner, successes or not, are released as cancelled, so their members' failure
    // counts do not hear of them, and counted as late replies.
    template <class Release>
    void hedged_attempt_done(RequestOutcome outcome, const Release& release, int index) {
        auto& result = outcome.result;
        const auto lost = [&] {
            hedge_balancer_->count_late_reply();
            release(call_failure(Failure::cancelled, router_->options().name, spec_.module, spec_.function));
        };
        if (finished_.load() || won_.load()) return lost();
        const int left = in_flight_.fetch_sub(1) - 1;
        if (result) {
            if (won_.exchange(true)) return lost();  // another success came first
            release(result);
            if (index > 0) hedge_balancer_->count_hedge_win();
            return finish(std::move(result));
        }
        release(result);
        // The last attempt to end, unless a success is being delivered.
        if (left > 0 || won_.load()) return;
        if ((is_draining(result.error()) || outcome.never_sent()) && reselections_ < max_reselections) {
            ++reselections_;
            return attempt(false);
        }
        finish(std::move(result));
    }

    // A cast to another node: queued, or an error at once. A draining target still runs
    // it (a cast has no reply to refuse with).
    Result<void> send_cast(const std::string& target, boost::json::array args, const std::string& lb) {
        if (router_->sending_stopped()) return stopping_error();
        auto c = router_->mesh().connection_to(target);
        if (!c) return std::move(unreachable(target).result).error();
        return c->cast(wire::Cast{spec_.module, spec_.function, std::move(args), lb});
    }

    // The outcome of a call to `target`, which is not connected: cookie_refused when that
    // node refused this node's cookie (picking again would not help), else refused unsent
    // (LinkError::not_connected: a balancer picks again).
    RequestOutcome unreachable(const std::string& target) const {
        if (auto why = router_->mesh().name_lost()) return name_taken_error(*why);
        if (auto refused_by = router_->mesh().refused_by(target))
            return cookie_refused_error(*refused_by, target, spec_.module, spec_.function);
        return unsent(target, spec_.module, spec_.function);
    }

    // A call made from a handler whose own call's deadline has passed: request_timeout
    // (Failure::timeout), nothing sent.
    ErrorMessage inherited_deadline_passed() const {
        auto e = call_failure(Failure::timeout, spec_.node.empty() ? router_->options().name : spec_.node,
                              spec_.module, spec_.function);
        e.message = "not sent: the deadline of the call whose handler made it had passed";
        return e;
    }

    // What is left of the call's timeout, rounded up to the millisecond (the first attempt
    // gets the whole timeout); zero or less once the deadline has passed.
    std::chrono::milliseconds time_left() const {
        return std::chrono::ceil<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    }

    // The timeout ran out while the call waited for a member (`why`: the balancer's
    // no-members error): `request_timeout` (Failure::timeout), saying what it waited for,
    // with `why`'s details.
    ErrorMessage timed_out_waiting(const ErrorMessage& why) const {
        auto e = call_failure(Failure::timeout, router_->options().name, spec_.module, spec_.function);
        e.message += " while waiting for a member: " + why.message;
        for (const auto& [k, v] : why.details)
            if (!e.details.contains(k)) e.details[k] = v;
        return e;
    }

    // This node gave up its name (Mesh::name_lost): Failure::name_taken, saying `why`.
    ErrorMessage name_taken_error(const std::string& why) const {
        auto e = call_failure(Failure::name_taken, router_->options().name, spec_.module, spec_.function);
        e.message = "this node gave up its name: " + why;
        return e;
    }

    // The short-circuits of predecessor-compatibility §4.4: no selection, no retry, no drainer.
    void run_locally(bool on_caller_thread) {
        dispatch(router_->options().name, nullptr, {}, false, on_caller_thread);
    }

    // Nothing to send to (predecessor-compatibility §4.1): wait `retry_sleep` on a timer
    // and try again, or give up with `final_error`.
    void no_route(ErrorMessage final_error) {
        // Waiting is pointless when every node this one could reach refused its cookie.
        if (auto refused_by = router_->mesh().shut_out())
            return finish(cookie_refused_error(*refused_by, router_->options().name, spec_.module, spec_.function));
        // ...or when this node gave up its name.
        if (auto why = router_->mesh().name_lost()) return finish(name_taken_error(*why));
        // A stopping node has cleared its balancers and groups itself: that is why there
        // is no route, so say the node stopped (not "no members registered").
        if (router_->stopping()) return finish(stopping_error());
        if (!retry_.consume()) return finish(std::move(final_error));
        auto wait = retry_.sleep;
        if (spec_.kind == Spec::Kind::call) {
            const auto left = time_left();
            if (left.count() <= 0) return finish(timed_out_waiting(final_error));
            wait = std::min(wait, left);
        }
        router_->after(wait, [self = shared_from_this()](bool fired) {
            if (fired) return self->attempt(false);
            self->finish(self->stopping_error());
        });
    }

    // Records `target` as this attempt's (CallOptions::peer; a random-node helper's span)
    // unless the call has finished, e.g. cancelled on another thread: false then, and the
    // attempt sends nothing. Only calls that record something take the lock; finish()
    // takes it too, so these writes never overlap the completion that reads them.
    bool claim(const std::string& target) {
        if (!spec_.options.peer && !spec_.filter) return !finished_.load();
        bool emit = false;
        {
            std::lock_guard lock(claim_mutex_);
            if (finished_.load()) return false;
            if (spec_.options.peer) *spec_.options.peer = target;
            if (spec_.filter) emit = open_span(target, {});
        }
        if (emit) emit_span_start();
        return true;
    }

    void finish(CallResult result) {
        if (finished_.exchange(true)) return;  // cancelled first, or the other way round
        if (spec_.options.peer || spec_.filter) std::lock_guard wait_for_claim(claim_mutex_);
        end_span(result);
        auto done = std::move(done_);
        done_ = nullptr;
        done(std::move(result));
    }

    // rpc.start / rpc.stop / rpc.exception (predecessor-compatibility §5.1), only while
    // someone listens. Opens the span when someone listens and none is open; true when
    // rpc.start is to be emitted (emit_span_start, with no lock held).
    bool open_span(std::string_view node, std::string_view balancer) {
        if (!router_->bus().active() || spanned_) return false;
        spanned_ = true;
        span_node_ = std::string(node);
        span_balancer_ = std::string(balancer);
        span_start_ = std::chrono::steady_clock::now();
        return true;
    }

    void emit_span_start() {
        auto& bus = router_->bus();
        Event e = span_event(EventName::rpc_start);
        e.system_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
        bus.emit(e);
    }

    void end_span(const CallResult& result) {
        if (!spanned_) return;
        spanned_ = false;
        Event e = span_event(threw_ ? EventName::rpc_exception : EventName::rpc_stop);
        e.duration = std::chrono::steady_clock::now() - span_start_;
        e.status = result ? std::string_view("ok") : to_string(result.error().code);
        // result.error() returns a copy, and Event fields are views: keep it until emit().
        std::optional<ErrorMessage> error;
        if (threw_) {
            e.kind = "error";
            error = result.error();
            e.reason = error->message;
        }
        router_->bus().emit(e);
    }

    Event span_event(EventName name) const {
        Event e{.name = name};
        e.type = spec_.kind == Spec::Kind::call ? "call" : "cast";
        e.node = span_node_;
        e.module = spec_.module;
        e.function = spec_.function;
        e.load_balancer = span_balancer_;
        return e;
    }

    std::shared_ptr<Router> router_;
    Spec spec_;
    std::function<void(CallResult)> done_;
    std::atomic<bool> finished_{false};
    std::mutex claim_mutex_;  // claim() against finish(), for calls with a peer or a filter
    bool call_directly_ = false;
    RetryPolicy retry_;
    // A call's: start() plus its timeout, or its handler's call's deadline if earlier;
    // time_point::max() for a cast.
    std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
    std::atomic<int> reselections_{0};
    // Hedging (CallOptions::hedging, checked): the balancer of the first pick, the members
    // the attempts went to, attempts sent and not yet ended.
    std::optional<Hedging> hedging_;
    std::shared_ptr<LoadBalancer> hedge_balancer_;
    std::mutex targets_mutex_;
    std::vector<std::string> targets_;  // under targets_mutex_
    std::atomic<int> attempts_{0}, in_flight_{0};
    std::atomic<bool> won_{false};  // an attempt succeeded: the others lose
    bool threw_ = false;  // a handler run here threw (rpc.exception)
    bool spanned_ = false;
    std::string span_node_, span_balancer_;
    std::chrono::steady_clock::time_point span_start_;
};

// ---- Router ----------------------------------------------------------------------------

std::shared_ptr<CallOperation> Router::start(CallSpec spec, Done done, bool inline_local) {
    auto op = std::make_shared<CallOperation>(self_.lock(), std::move(spec), std::move(done));
    op->start(inline_local);
    return op;
}

void Router::cancel(const std::shared_ptr<CallOperation>& operation) { operation->cancel(); }

}  // namespace rpclb::detail
