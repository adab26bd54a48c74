// Routing of calls and casts (doc/architecture.md "Calls"): short-circuits, selection,
// drainer tracking, the no-route retry on timers, re-selection after a `draining` reply,
// hedged attempts, and the deadline and trace context a call inherits from the handler
// that makes it. The blocking API (router_timers.cpp) is a thin layer over start().
#include "routing/router.hpp"

#include "membership/mesh.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/call_machine.hpp"
#include "transport/call_channels.hpp"
#include "rpc/abandon_signal.hpp"
#include "rpc/call_scope.hpp"
#include "rpc/rpc_server.hpp"
#include "telemetry/trace_state.hpp"

#include <rpclb/error.hpp>
#include <rpclb/handler.hpp>
#include <rpclb/detail/log.hpp>
#include <rpclb/detail/option_problem.hpp>
#include <rpclb/detail/thread_rng.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/post.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

namespace rpclb::detail {
namespace asio = boost::asio;

namespace {

ErrorMessage no_matching_node(const NodeFilter& filter) {
    return ErrorMessage{ErrorCode::service_unavailable, "no nodes in cluster found with that filter",
                        boost::json::object{{"node_filter", filter.is_regex() ? "/" + filter.text() + "/"
                                                                              : filter.text()}},
                        make_error_code(Failure::no_matching_node)};
}

}  // namespace

// The driver of one call's CallMachine (doc/architecture.md "Calls"): feeds it events
// under a mutex and does the actions it returns with the lock released — picks through
// the balancer (or the direct, local and random-node routes), sends on the mesh link, a
// call channel or to a local handler, waits on the Router's timers, releases, completes.
// Lives in shared_ptrs held by whatever it waits on (a connection's pending entry, a
// timer, a worker task).
class CallOperation : public std::enable_shared_from_this<CallOperation> {
public:
    using Clock = CallMachine::Clock;

    CallOperation(std::shared_ptr<Router> router, CallSpec spec, std::function<void(CallResult)> done)
        : router_(std::move(router)), spec_(std::move(spec)), done_(std::move(done)), machine_(config()) {
        start_trace();
        // The predecessor's span covers direct and load-balanced calls from the start, retry
        // sleeps included; a random-node helper's span is its inner direct call's.
        if (!spec_.filter && open_span(spec_.node, spec_.options.load_balancer)) emit_span_start();
    }

    // A blocking caller would otherwise wait forever for an operation dropped unrun (its
    // timer or task discarded when the node stopped).
    ~CallOperation() {
        if (!completed_.load()) done_(machine_.stopping_error());
    }

    // A call made by a handler ends, cancelled, when that handler's caller gives up on it
    // (AbandonSignal); at once, with nothing sent, when it has already.
    void start(bool on_caller_thread) {
        const auto* parent = spec_.kind == CallSpec::Kind::call ? CallScope::current() : nullptr;
        if (parent && parent->abandoned()) return cancel();
        feed([](CallMachine& m, Clock::time_point now) { return m.start(now); }, on_caller_thread);
        if (auto* signal = parent ? parent->signal() : nullptr;
            signal && !parent_.tie(*signal, [weak = weak_from_this()] { if (auto op = weak.lock()) op->cancel(); }))
            cancel();
    }
    void cancel() {
        feed([](CallMachine& m, Clock::time_point) { return m.cancel(); }, false);
    }

private:
    // What a pick counted on its balancer (none for a direct or local call): released with
    // the call's outcome when an algorithm picked it, else untracked. Once its request went
    // on a mesh link: the link and the request's id, for a Cancel.
    struct Slot {
        std::shared_ptr<LoadBalancer> balancer;
        LoadBalancer::Picked counted{};
        bool picked = false;
        std::weak_ptr<Connection> link{};
        std::uint64_t request_id = 0;
        bool cancel = false;  // cancelled before the request's id was recorded
    };
    // An action, with what doing it needs from the state under the lock.
    struct Job {
        CallMachine::Action action;
        std::string member{};    // a Send's
        SpanId span{};           // a Send's: its attempt's span
        bool named_lb = false;   // a Send's request names the balancer
        bool emit_span = false;  // a Send opened a random-node helper's span
        std::shared_ptr<LoadBalancer> budget{};  // an idempotent call's first Send: its deposit
        Slot slot{};             // a Release's
    };

    CallMachine::Config config() const {
        const auto& o = spec_.options;
        const auto& defaults = router_->options();
        CallMachine::Config c;
        c.call = spec_.kind == CallSpec::Kind::call;
        c.self = defaults.name;
        c.node = spec_.node;
        c.module = spec_.module;
        c.function = spec_.function;
        c.timeout = o.timeout;
        if (c.call) c.inherited = call_deadline();
        c.load_balancer = o.load_balancer;
        c.balanced = !o.load_balancer.empty() && !spec_.filter;
        c.idempotent = o.idempotent;
        // A call's own hedging is checked when it starts: its balancer's marking counts then.
        if (!c.idempotent && o.hedging && c.balanced)
            if (auto b = router_->balancers().route(o.load_balancer))
                c.idempotent = (*b)->marks_idempotent(c.module, c.function);
        c.call_directly = o.call_directly.value_or(defaults.call_directly);
        c.hedging = o.hedging;
        c.retry = RetryPolicy{o.retry.value_or(defaults.retry), o.retry_count.value_or(defaults.retry_count),
                              o.retry_sleep};
        return c;
    }

    // Feeds the machine one event (`event(machine, now)`) and does its actions in order.
    template <class Event>
    void feed(Event&& event, bool on_caller_thread) {
        boost::container::small_vector<Job, 3> jobs;
        {
            std::lock_guard lock(mutex_);
            auto actions = event(machine_, Clock::now());
            for (auto& action : actions) {
                Job job{.action = std::move(action)};
                if (const auto* pick = std::get_if<CallMachine::Pick>(&job.action)) {
                    if (slots_.size() <= static_cast<std::size_t>(pick->slot)) slots_.resize(pick->slot + 1);
                } else if (const auto* send = std::get_if<CallMachine::Send>(&job.action)) {
                    // Written before the completion that reads it (the lock orders them).
                    job.member = machine_.member(send->slot);
                    job.span = new_span_id();
                    job.named_lb = slots_[send->slot].picked;
                    if (send->attempt == 0 && job.named_lb && machine_.idempotent())
                        job.budget = slots_[send->slot].balancer;
                    if (spec_.options.peer) *spec_.options.peer = job.member;
                    if (spec_.filter) job.emit_span = open_span(job.member, {});
                } else if (const auto* release = std::get_if<CallMachine::Release>(&job.action)) {
                    job.slot = std::move(slots_[release->slot]);
                }
                jobs.push_back(std::move(job));
            }
        }
        for (auto& job : jobs) run(job, on_caller_thread);
    }

    void run(Job& job, bool on_caller_thread) {
        if (auto* pick = std::get_if<CallMachine::Pick>(&job.action))
            return pick->hedge ? pick_hedge(*pick) : pick_first(pick->slot, pick->budgeted, on_caller_thread);
        if (auto* send = std::get_if<CallMachine::Send>(&job.action)) return do_send(job, *send, on_caller_thread);
        if (auto* wait = std::get_if<CallMachine::Wait>(&job.action)) {
            const auto timer = wait->timer;
            return router_->after(
                std::chrono::ceil<std::chrono::milliseconds>(wait->delay),
                [self = shared_from_this(), timer](bool fired) {
                    self->feed([timer, fired](CallMachine& m, Clock::time_point now) { return m.on_timer(timer, fired, now); },
                               false);
                },
                timer == CallMachine::Timer::route);  // a hedge's delay is not ended by wake()
        }
        if (auto* cancel = std::get_if<CallMachine::Cancel>(&job.action)) return cancel_attempt(cancel->slot);
        if (auto* release = std::get_if<CallMachine::Release>(&job.action)) {
            auto& slot = job.slot;
            if (!slot.balancer) return;
            if (slot.picked)
                slot.balancer->release(slot.counted, release->outcome);
            else
                slot.balancer->untrack(slot.counted);
            if (release->late) slot.balancer->count_late_reply();
            if (release->hedge_won) slot.balancer->count_hedge_win();
            return;
        }
        auto& complete = std::get<CallMachine::Complete>(job.action);
        completed_ = true;
        parent_.untie();
        end_span(complete.result);
        if (exports_spans())
            emit_trace_span("call", span_node_.empty() ? std::string_view(spec_.node) : std::string_view(span_node_),
                            trace_.span_id, trace_.parent_span_id, trace_wall_start_, trace_start_,
                            complete.result ? std::string_view("ok") : to_string(complete.result.error().code));
        auto done = std::move(done_);
        done_ = nullptr;
        done(std::move(complete.result));
    }

    // ---- picks ----

    PickOptions pick_options() const {
        PickOptions pick;
        if (spec_.options.key) pick.key = *spec_.options.key;
        return pick;
    }

    void picked(int slot, Slot counted, CallMachine::Picked picked, bool on_caller_thread) {
        feed(
            [&](CallMachine& m, Clock::time_point now) {
                slots_[slot] = std::move(counted);
                return m.on_picked(slot, std::move(picked), now);
            },
            on_caller_thread);
    }

    void pick_failed(int slot, ErrorMessage why, bool no_members) {
        feed([&](CallMachine& m, Clock::time_point now) { return m.on_pick_failed(slot, std::move(why), no_members, now); },
             false);
    }

    // The first attempt's member, or its re-pick's: the short-circuits of
    // predecessor-compatibility §4.4 (direct, call_directly, a balancer hosted here, a
    // random-node helper matching this node) or the algorithm's pick. A retry's
    // (`budgeted`) takes a token of the balancer's budget first.
    void pick_first(int slot, bool budgeted, bool on_caller_thread) {
        const auto& self = router_->options().name;
        const auto here = [&] { picked(slot, {}, {.member = self}, on_caller_thread); };
        if (spec_.filter) return pick_filtered(slot, on_caller_thread);
        if (spec_.options.load_balancer.empty()) return picked(slot, {}, {.member = spec_.node}, on_caller_thread);
        if (machine_.call_directly()) return here();
        auto b = router_->balancers().route(spec_.options.load_balancer);
        if (!b) return no_route(slot, std::move(b.error()));
        if ((*b)->local()) return here();
        if (budgeted && !(*b)->take_budget_token(true)) {
            emit_attempt({}, "retry", "refused");
            return pick_failed(slot, {}, false);
        }
        auto p = (*b)->pick(pick_options());
        if (!p) return no_route(slot, std::move(p.error()));
        (*b)->track(*p);
        CallMachine::Picked info{.member = p->node(), .repickable = true, .members = p->members->nodes.size()};
        info.idempotent = !spec_.options.idempotent && (*b)->marks_idempotent(spec_.module, spec_.function);
        if ((spec_.options.idempotent || info.idempotent) && !spec_.options.hedging) info.hedging = (*b)->call_hedging();
        if (spec_.options.hedging || info.hedging) {
            const int attempts = (spec_.options.hedging ? spec_.options.hedging : info.hedging)->max_attempts;
            if (static_cast<std::size_t>(attempts) > info.members) (*b)->attempts_clamped(attempts, info.members);
            info.recent_p95 = (*b)->recent_p95();
            std::lock_guard lock(mutex_);
            if (!hedge_balancer_) hedge_balancer_ = *b;
        }
        picked(slot, Slot{std::move(*b), std::move(*p), true}, std::move(info), on_caller_thread);
    }

    // An extra attempt's member, from the first attempt's balancer, with a token of its
    // budget for the first pick of each extra attempt.
    void pick_hedge(const CallMachine::Pick& pick) {
        if (pick.budgeted && !hedge_balancer_->take_budget_token(false)) {
            emit_attempt({}, "hedge", "refused");
            return pick_failed(pick.slot, {}, false);
        }
        auto p = hedge_balancer_->pick(pick_options());
        if (!p) return pick_failed(pick.slot, std::move(p.error()), false);
        hedge_balancer_->track(*p);
        auto node = p->node();
        picked(pick.slot, Slot{hedge_balancer_, std::move(*p), true}, {.member = std::move(node), .repickable = true}, false);
    }

    // The random-node helpers (predecessor-compatibility §1.6, §1.7).
    void pick_filtered(int slot, bool on_caller_thread) {
        const auto& filter = *spec_.filter;
        const auto& excluded = router_->options().excluded_node_patterns;
        const auto& self = router_->options().name;
        if (spec_.options.call_directly.value_or(router_->options().call_directly) || filter.matches(self, excluded))
            return picked(slot, {}, {.member = self}, on_caller_thread);
        auto nodes = router_->mesh().routable_nodes();
        std::erase_if(nodes, [&](const std::string& n) { return !filter.matches(n, excluded); });
        if (nodes.empty()) return no_route(slot, no_matching_node(filter));
        std::uniform_int_distribution<std::size_t> pick(0, nodes.size() - 1);
        auto target = std::move(nodes[pick(detail::thread_rng())]);
        Slot counted;
        if (!spec_.options.load_balancer.empty()) {
            auto b = router_->balancers().hosted(spec_.options.load_balancer);
            if (!b) return pick_failed(slot, std::move(b.error()), false);
            counted.counted = (*b)->as_picked(target);
            (*b)->track(counted.counted);
            counted.balancer = std::move(*b);
        }
        picked(slot, std::move(counted), {.member = std::move(target)}, on_caller_thread);
    }

    // Nothing to send to (`why`): the machine waits for a member unless waiting is
    // pointless — every node this one could reach refused its cookie, this node gave up
    // its name, or it stops (it cleared its balancers and groups itself).
    void no_route(int slot, ErrorMessage why) {
        if (!why.is(Failure::no_members) && !why.is(Failure::no_matching_node)) return pick_failed(slot, std::move(why), false);
        if (auto refused_by = router_->mesh().shut_out()) {
            // A balancer's error: it names the balancer (as `why` does), not a node.
            auto e = cookie_refused_error(*refused_by, {}, spec_.module, spec_.function);
            e.details.erase("node");
            if (const auto* lb = why.details.if_contains("load_balancer")) e.details["load_balancer"] = *lb;
            return pick_failed(slot, std::move(e), false);
        }
        if (auto lost = router_->mesh().name_lost()) return pick_failed(slot, name_taken_error(*lost), false);
        if (router_->stopping()) return pick_failed(slot, machine_.stopping_error(), false);
        pick_failed(slot, std::move(why), true);
    }

    // ---- sends ----

    void do_send(Job& job, const CallMachine::Send& send, bool on_caller_thread) {
        if (job.emit_span) emit_span_start();
        if (job.budget) job.budget->budget_call_started(send.hedged);
        if (send.reason == CallMachine::Reason::hedge || send.reason == CallMachine::Reason::retry)
            emit_attempt(job.member, send.reason == CallMachine::Reason::hedge ? "hedge" : "retry", "sent");
        const bool spanned = exports_spans();
        auto answer = [self = shared_from_this(), slot = send.slot, spanned, span = job.span,
                       member = spanned ? job.member : std::string(), start = spanned ? Clock::now() : Clock::time_point{},
                       wall = spanned ? std::chrono::system_clock::now() : std::chrono::system_clock::time_point{}](
                          RequestOutcome outcome) {
            if (spanned)
                self->emit_trace_span("attempt", member, span, self->trace_.span_id, wall, start,
                                      outcome.result ? std::string_view("ok")
                                                     : to_string(outcome.result.error().code));
            self->feed([&](CallMachine& m, Clock::time_point now) { return m.on_answer(slot, std::move(outcome), now); },
                       false);
        };
        const auto& target = job.member;
        const bool call = spec_.kind == CallSpec::Kind::call;
        // A hedged attempt never runs on (or holds) the caller's thread: the caller could
        // not hedge while its own thread waits for one attempt.
        const bool on_this_thread = on_caller_thread && !send.hedged;
        // Only a call that cannot be sent again may give its arguments away.
        auto args = send.last ? std::move(spec_.args) : spec_.args;
        if (target == router_->options().name) {
            // Local: the handler runs here, never over the network, and is never refused.
            // Once the node closes (its worker pool is about to be joined), only a blocking
            // call, which runs the handler on its own thread, can still be served here.
            if (router_->sending_stopped() && !(on_this_thread && call)) return answer(machine_.stopping_error());
            if (!call) {
                router_->rpc().serve_cast(
                    traced(wire::Cast{spec_.module, spec_.function, std::move(args), {}}, job.span));
                return answer(CallResult(boost::json::value()));
            }
            // The handler's span: a child of this attempt's, as a peer would make it.
            auto served = TraceContext::child_of(TraceParent{trace_.trace_id, job.span, trace_.flags}, new_span_id(),
                                                 trace_.tracestate);
            if (on_this_thread) {
                bool threw = false;
                auto result =
                    router_->rpc().run_handler(spec_.module, spec_.function, args, &threw, send.deadline, &served);
                threw_ = threw;
                return answer(std::move(result));
            }
            router_->rpc().run_local(spec_.module, spec_.function, std::move(args), send.deadline, std::move(served),
                                     [self = shared_from_this(), answer = std::move(answer)](CallResult result, bool threw) {
                                         if (threw) self->threw_ = true;
                                         answer(std::move(result));
                                     });
            return;
        }
        const auto& lb = job.named_lb ? spec_.options.load_balancer : std::string();
        if (!call) {
            auto sent = send_cast(target, std::move(args), lb, job.span);
            return answer(sent ? CallResult(boost::json::value()) : CallResult(std::move(sent).error()));
        }
        send_call(send.slot, target, std::move(args), lb, on_this_thread, send.deadline, job.span, std::move(answer));
    }

    // The request of pick `slot` went on `link` as `id`: a Cancel for it can be sent (at
    // once if it came first).
    void sent_on(int slot, const std::shared_ptr<Connection>& link, std::uint64_t id) {
        {
            std::lock_guard lock(mutex_);
            auto& sent = slots_[slot];
            if (!sent.cancel) {
                sent.link = link;
                sent.request_id = id;
                return;
            }
        }
        link->cancel_request(id);
    }

    void cancel_attempt(int slot) {
        std::shared_ptr<Connection> link;
        std::uint64_t id = 0;
        {
            std::lock_guard lock(mutex_);
            auto& sent = slots_[slot];
            sent.cancel = true;
            link = sent.link.lock();
            id = sent.request_id;
        }
        if (link && id != 0) link->cancel_request(id);
    }

    // A request to another node; `done` gets its outcome (at once when not connected).
    // On a blocking caller's thread it goes on a call channel when one can be had, and
    // `done` runs here. The request carries the time left to `deadline` (wire_timeout_ms).
    void send_call(int slot, const std::string& target, boost::json::array args, const std::string& lb,
                   bool on_caller_thread, Clock::time_point deadline, const SpanId& span,
                   std::function<void(RequestOutcome)> done) {
        // A stopped node closed its connections itself: say so, not "noconnection".
        if (router_->sending_stopped()) return done(machine_.stopping_error());
        auto c = router_->mesh().connection_to(target);
        if (!c) return done(unreachable(target));
        auto request = traced(wire::Request{0, spec_.module, spec_.function, std::move(args), lb}, span);
        // A call made by a handler serving another node's call goes on the link, where it
        // can be cancelled when that call's caller gives up (start()).
        const auto* parent = on_caller_thread ? CallScope::current() : nullptr;
        if (on_caller_thread && !(parent && parent->abandonable())) {
            if (auto result = router_->channels().call(*c, request, deadline)) return done(std::move(*result));
            if (deadline <= Clock::now()) return done(call_failure(Failure::timeout, target, spec_.module, spec_.function));
        }
        // Once the node closes its connections (its channels stop with them, so the channel
        // above gave way), a request could be queued on a connection whose strand no thread
        // runs any more, and never complete.
        if (router_->sending_stopped()) return done(machine_.stopping_error());
        if (const auto id = c->request(std::move(request), deadline, std::move(done))) sent_on(slot, c, id);
    }

    // A cast to another node: queued, or an error at once. A draining target still runs
    // it (a cast has no reply to refuse with).
    Result<void> send_cast(const std::string& target, boost::json::array args, const std::string& lb,
                           const SpanId& span) {
        if (router_->sending_stopped()) return machine_.stopping_error();
        auto c = router_->mesh().connection_to(target);
        if (!c) return std::move(unreachable(target).result).error();
        return c->cast(traced(wire::Cast{spec_.module, spec_.function, std::move(args), lb}, span));
    }

    // A request or cast carrying the trace context of the attempt whose span is `span`.
    template <class Frame>
    Frame traced(Frame frame, const SpanId& span) const {
        frame.trace = TraceParent{trace_.trace_id, span, trace_.flags};
        frame.trace_read = wire::TraceRead::valid;
        frame.tracestate = trace_.tracestate;
        return frame;
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

    // This node gave up its name (Mesh::name_lost): Failure::name_taken, saying `why`.
    ErrorMessage name_taken_error(const std::string& why) const {
        auto e = call_failure(Failure::name_taken, router_->options().name, spec_.module, spec_.function);
        e.message = "this node gave up its name: " + why;
        return e;
    }

    // ---- telemetry ----

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
        const TraceText ids = trace_text();
        Event e = span_event(EventName::rpc_start, ids);
        e.system_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
        bus.emit(e);
    }

    void end_span(const CallResult& result) {
        if (!spanned_) return;
        spanned_ = false;
        const bool threw = threw_.load();
        const TraceText ids = trace_text();
        Event e = span_event(threw ? EventName::rpc_exception : EventName::rpc_stop, ids);
        e.duration = std::chrono::steady_clock::now() - span_start_;
        e.status = result ? std::string_view("ok") : to_string(result.error().code);
        // result.error() returns a copy, and Event fields are views: keep it until emit().
        std::optional<ErrorMessage> error;
        if (threw) {
            e.kind = "error";
            error = result.error();
            e.reason = error->message;
        }
        router_->bus().emit(e);
    }

    // rpc.attempt: an extra attempt (`kind` "hedge" or "retry") sent to `node`, or refused
    // by the balancer's budget.
    void emit_attempt(std::string_view node, std::string_view kind, std::string_view outcome) const {
        auto& bus = router_->bus();
        if (!bus.active()) return;
        Event e{.name = EventName::rpc_attempt};
        e.type = "call";
        e.node = node;
        e.module = spec_.module;
        e.function = spec_.function;
        e.load_balancer = spec_.options.load_balancer;
        e.kind = kind;
        e.outcome = outcome;
        const TraceText ids = trace_text();
        e.trace_id = ids.trace_id();
        e.span_id = ids.span_id();
        bus.emit(e);
    }

    Event span_event(EventName name, const TraceText& ids) const {
        Event e{.name = name};
        e.trace_id = ids.trace_id();
        e.span_id = ids.span_id();
        e.type = spec_.kind == CallSpec::Kind::call ? "call" : "cast";
        e.node = span_node_;
        e.module = spec_.module;
        e.function = spec_.function;
        e.load_balancer = span_balancer_;
        return e;
    }

    // ---- trace context (doc/explanation/trace-context.md) ----

    // The call's span: a child of this thread's context (a handler's or a TraceScope's), or
    // the root of a new trace, sampled when someone listens to this node's telemetry.
    void start_trace() {
        if (const auto* outer = innermost_trace()) {
            trace_ = TraceContext::child_of(outer->traceparent(), new_span_id(), outer->tracestate);
        } else {
            trace_ = new_trace(router_->bus().active());
        }
        if (trace_.sampled()) {
            trace_start_ = Clock::now();
            trace_wall_start_ = std::chrono::system_clock::now();
        }
    }

    // The call's span and its attempts go to the span sink (rpc.span).
    bool exports_spans() const noexcept { return trace_.sampled() && router_->bus().active(); }

    TraceText trace_text() const noexcept {
        return TraceText(trace_.trace_id, trace_.span_id, &trace_.parent_span_id);
    }

    void emit_trace_span(std::string_view kind, std::string_view node, const SpanId& span, const SpanId& parent,
                         std::chrono::system_clock::time_point wall_start, Clock::time_point start,
                         std::string_view status) const {
        const TraceText ids(trace_.trace_id, span, &parent);
        Event e = trace_span_event(ids, kind, wall_start, start);
        e.node = node;
        e.module = spec_.module;
        e.function = spec_.function;
        e.load_balancer = spec_.options.load_balancer;
        e.status = status;
        router_->bus().emit(e);
    }

    std::shared_ptr<Router> router_;
    CallSpec spec_;
    std::function<void(CallResult)> done_;
    std::atomic<bool> completed_{false};
    std::mutex mutex_;  // the machine, the slots, hedge_balancer_ once set
    CallMachine machine_;
    boost::container::small_vector<Slot, 2> slots_;  // by the machine's pick number
    std::shared_ptr<LoadBalancer> hedge_balancer_;  // a hedged call's, from its first pick
    std::atomic<bool> threw_{false};                // a handler run here threw (rpc.exception)
    bool spanned_ = false;
    std::string span_node_, span_balancer_;
    std::chrono::steady_clock::time_point span_start_;
    TraceContext trace_;  // the call's span (a call's only); set once, before any action
    Clock::time_point trace_start_{};
    std::chrono::system_clock::time_point trace_wall_start_{};
    AbandonTie parent_;  // a call made by a handler: its hook on that handler's caller giving up
};

// ---- Router ----------------------------------------------------------------------------

std::shared_ptr<CallOperation> Router::start(CallSpec spec, Done done, bool inline_local) {
    auto op = std::make_shared<CallOperation>(self_.lock(), std::move(spec), std::move(done));
    op->start(inline_local);
    return op;
}

void Router::cancel(const std::shared_ptr<CallOperation>& operation) { operation->cancel(); }

}  // namespace rpclb::detail
