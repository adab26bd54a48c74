// Routing of calls and casts (DESIGN.md "how a call flows"): short-circuits, selection,
// drainer tracking, the no-route retry on timers and re-selection after a `draining`
// reply. The blocking API is a thin layer over start_call.
#include "cluster_impl.hpp"

#include <rpclb/detail/log.hpp>
#include <rpclb/detail/thread_rng.hpp>

#include <boost/asio/post.hpp>

#include <future>

namespace rpclb {
namespace asio = boost::asio;

namespace {

// A call whose target answered `draining` is sent to another member at most this often.
constexpr int max_reselections = 16;

bool is_no_members(const ErrorMessage& e) {
    return e.code == ErrorCode::service_unavailable && e.message == "no members registered";
}

ErrorMessage no_matching_node(const NodeFilter& filter) {
    return ErrorMessage{ErrorCode::service_unavailable, "no nodes in cluster found with that filter",
                        boost::json::object{{"node_filter", filter.is_regex() ? "/" + filter.text() + "/"
                                                                              : filter.text()}}};
}

// One call or cast from start to completion. Lives in shared_ptrs held by whatever it
// waits on (a connection's pending entry, a retry timer, a worker task).
class CallOperation : public std::enable_shared_from_this<CallOperation> {
public:
    using Spec = Cluster::CallSpec;

    CallOperation(std::shared_ptr<Cluster::Impl> impl, Spec spec, std::function<void(CallResult)> done)
        : impl_(std::move(impl)), spec_(std::move(spec)), done_(std::move(done)) {
        const auto& o = spec_.options;
        const auto& defaults = impl_->options;
        call_directly_ = o.call_directly.value_or(defaults.call_directly);
        retry_ = RetryPolicy{o.retry.value_or(defaults.retry), o.retry_count.value_or(defaults.retry_count),
                             o.retry_sleep};
        // The seed's span covers direct and load-balanced calls from the start, retry
        // sleeps included; a random-node helper's span is its inner direct call's.
        if (!spec_.filter) begin_span(spec_.node, spec_.options.load_balancer);
    }

    // A blocking caller would otherwise wait forever for an operation dropped unrun (its
    // timer or task discarded when the node stopped).
    ~CallOperation() {
        if (done_)
            done_(call_error(ErrorCode::service_unavailable, "node stopping", impl_->options.name,
                             spec_.module, spec_.function));
    }

    void attempt(bool on_caller_thread) {
        if (spec_.filter) return attempt_filtered(on_caller_thread);
        if (spec_.options.load_balancer.empty()) return dispatch(spec_.node, nullptr, false, on_caller_thread);
        if (call_directly_) return run_locally(on_caller_thread);
        auto b = impl_->owner.balancer(spec_.options.load_balancer);
        if (!b) return is_no_members(b.error()) ? no_route(std::move(b.error())) : finish(std::move(b.error()));
        if ((*b)->local()) return run_locally(on_caller_thread);
        PickOptions pick;
        if (spec_.options.key) pick.key = *spec_.options.key;
        auto picked = (*b)->select_node(pick);
        if (!picked)
            return is_no_members(picked.error()) ? no_route(std::move(picked.error()))
                                                 : finish(std::move(picked.error()));
        (*b)->track_call();
        dispatch(std::move(*picked), std::move(*b), true, on_caller_thread);
    }

private:
    // The random-node helpers (seed §1.6, §1.7).
    void attempt_filtered(bool on_caller_thread) {
        const auto& filter = *spec_.filter;
        const auto& excluded = impl_->options.excluded_node_patterns;
        if (call_directly_ || filter.matches(impl_->options.name, excluded)) return run_locally(on_caller_thread);
        auto nodes = impl_->routable_nodes();
        std::erase_if(nodes, [&](const std::string& n) { return !filter.matches(n, excluded); });
        if (nodes.empty()) return no_route(no_matching_node(filter));
        std::uniform_int_distribution<std::size_t> pick(0, nodes.size() - 1);
        auto target = std::move(nodes[pick(detail::thread_rng())]);
        std::shared_ptr<LoadBalancer> tracker;
        if (!spec_.options.load_balancer.empty()) {
            auto b = impl_->hosted_balancer(spec_.options.load_balancer);
            if (!b) return finish(std::move(b.error()));
            tracker = std::move(*b);
            tracker->track_call();
        }
        dispatch(std::move(target), std::move(tracker), false, on_caller_thread);
    }

    // Sends to `target`; `balancer` (if any) has counted the call and is released after.
    void dispatch(std::string target, std::shared_ptr<LoadBalancer> balancer, bool picked,
                  bool on_caller_thread) {
        if (spec_.options.peer) *spec_.options.peer = target;
        auto release = [balancer, picked, target]() {
            if (!balancer) return;
            if (picked) balancer->release_node(target);
            balancer->release_call();
        };
        if (target == impl_->options.name) {
            // Local: the handler runs here, never over the network, and is never refused.
            if (spec_.kind == Spec::Kind::cast) {
                impl_->serve_cast(detail::wire::Cast{spec_.module, spec_.function, std::move(spec_.args), {}});
                release();
                return finish(boost::json::value());
            }
            if (on_caller_thread) {
                auto result = impl_->run_handler(spec_.module, spec_.function, spec_.args, &threw_);
                release();
                return finish(std::move(result));
            }
            asio::post(impl_->workers, [self = shared_from_this(), release] {
                auto result = self->impl_->run_handler(self->spec_.module, self->spec_.function, self->spec_.args,
                                                       &self->threw_);
                release();
                self->finish(std::move(result));
            });
            return;
        }
        if (spec_.filter) begin_span(target, {});
        // A load-balanced call may have to be sent again (after `draining`): keep the args.
        const bool may_resend = picked && spec_.kind == Spec::Kind::call;
        auto args = may_resend ? spec_.args : std::move(spec_.args);
        const auto& lb = picked ? spec_.options.load_balancer : std::string();
        if (spec_.kind == Spec::Kind::cast) {
            auto sent = impl_->direct_cast(target, spec_.module, spec_.function, std::move(args), lb);
            release();
            return finish(sent ? CallResult(boost::json::value()) : CallResult(std::move(sent).error()));
        }
        impl_->direct_call(std::move(target), spec_.module, spec_.function, std::move(args),
                           spec_.options.timeout, lb,
                           [self = shared_from_this(), release](CallResult result) {
                               release();
                               if (!result && is_draining(result.error()) &&
                                   !self->spec_.options.load_balancer.empty() &&
                                   self->reselections_ < max_reselections) {
                                   // Never executed there: choose again (DESIGN.md "Drainer").
                                   ++self->reselections_;
                                   return self->attempt(false);
                               }
                               self->finish(std::move(result));
                           });
    }

    // The short-circuits of seed §4.4: no selection, no retry, no drainer.
    void run_locally(bool on_caller_thread) {
        dispatch(impl_->options.name, nullptr, false, on_caller_thread);
    }

    // Nothing to send to (seed §4.1): wait `retry_sleep` on a timer and try again, or
    // give up with `final_error`.
    void no_route(ErrorMessage final_error) {
        if (impl_->stopping.load() || !retry_.consume()) return finish(std::move(final_error));
        impl_->after(retry_.sleep, [self = shared_from_this()](bool fired) {
            if (fired) return self->attempt(false);
            self->finish(call_error(ErrorCode::service_unavailable, "node stopping", self->impl_->options.name,
                                    self->spec_.module, self->spec_.function));
        });
    }

    void finish(CallResult result) {
        end_span(result);
        auto done = std::move(done_);
        done_ = nullptr;
        done(std::move(result));
    }

    // rpc.start / rpc.stop / rpc.exception (seed §5.1), only while someone listens.
    void begin_span(std::string_view node, std::string_view balancer) {
        auto& bus = impl_->bus;
        if (!bus.active() || spanned_) return;
        spanned_ = true;
        span_node_ = std::string(node);
        span_balancer_ = std::string(balancer);
        span_start_ = std::chrono::steady_clock::now();
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
        if (threw_) {
            e.kind = "error";
            e.reason = result.error().message;
        }
        impl_->bus.emit(e);
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

    std::shared_ptr<Cluster::Impl> impl_;
    Spec spec_;
    std::function<void(CallResult)> done_;
    bool call_directly_ = false;
    RetryPolicy retry_;
    int reselections_ = 0;
    bool threw_ = false;  // a handler run here threw (rpc.exception)
    bool spanned_ = false;
    std::string span_node_, span_balancer_;
    std::chrono::steady_clock::time_point span_start_;
};

}  // namespace

// ---- Impl helpers ---------------------------------------------------------------------

void Cluster::Impl::after(std::chrono::milliseconds delay, std::function<void(bool fired)> then) {
    asio::dispatch(retry_strand, [self = shared_from_this(), delay, then = std::move(then)]() mutable {
        if (self->stopping.load()) return then(false);
        auto timer = std::make_shared<asio::steady_timer>(self->retry_strand, delay);
        self->retry_timers.insert(timer);
        timer->async_wait([self, timer, then = std::move(then)](boost::system::error_code ec) {
            self->retry_timers.erase(timer);
            then(!ec && !self->stopping.load());
        });
    });
}

void Cluster::Impl::cancel_waits() {
    asio::dispatch(retry_strand, [self = shared_from_this()] {
        for (const auto& t : self->retry_timers) t->cancel();
    });
}

std::vector<std::string> Cluster::Impl::routable_nodes() const {
    std::lock_guard lock(mesh_mutex);
    std::vector<std::string> nodes;
    for (const auto& [name, c] : peers)
        if (!c->peer().client && !c->going_away()) nodes.push_back(name);
    return nodes;
}

Result<std::shared_ptr<LoadBalancer>> Cluster::Impl::hosted_balancer(std::string_view name) const {
    std::lock_guard lock(balancers_mutex);
    if (auto it = hosted.find(name); it != hosted.end()) return it->second;
    return ErrorMessage{ErrorCode::service_unavailable,
                        "no balancer " + std::string(name) +
                            " is started on this node to count the call; start it or drop the "
                            "load_balancer option",
                        boost::json::object{{"load_balancer", name}, {"node", options.name}}};
}

std::shared_ptr<LoadBalancer> Cluster::Impl::accepting(std::string_view balancer) const {
    std::lock_guard lock(balancers_mutex);
    auto it = hosted.find(balancer);
    return it != hosted.end() && it->second->joined() ? it->second : nullptr;
}

// ---- Cluster ---------------------------------------------------------------------------

void Cluster::start_call(CallSpec spec, std::function<void(CallResult)> done, bool inline_local) {
    std::make_shared<CallOperation>(impl_, std::move(spec), std::move(done))->attempt(inline_local);
}

namespace {

// Runs `spec` and waits for it on the calling thread (which must not be a network thread).
CallResult run_blocking(Cluster& cluster, bool on_network_thread, Cluster::CallSpec spec) {
    if (on_network_thread)
        return call_error(ErrorCode::internal_server_error,
                          "blocking call from a network thread would deadlock; use async_call",
                          spec.node.empty() ? cluster.name() : spec.node, spec.module, spec.function);
    std::promise<CallResult> promise;
    auto future = promise.get_future();
    cluster.start_call(std::move(spec), [&promise](CallResult r) { promise.set_value(std::move(r)); }, true);
    return future.get();
}

Result<void> to_void(CallResult r) {
    if (!r) return std::move(r).error();
    return {};
}

}  // namespace

CallResult Cluster::call(std::string_view node, std::string_view module, std::string_view function,
                         boost::json::array args, const CallOptions& options) {
    return run_blocking(*this, impl_->on_network_thread(),
                        CallSpec{CallSpec::Kind::call, std::string(node), std::nullopt, std::string(module),
                                 std::string(function), std::move(args), options});
}

CallResult Cluster::call(std::string_view module, std::string_view function, boost::json::array args,
                         const CallOptions& options) {
    if (options.load_balancer.empty())
        return call_error(ErrorCode::bad_request, "a load-balanced call needs options.load_balancer",
                          name(), module, function);
    return call(name(), module, function, std::move(args), options);
}

Result<void> Cluster::cast(std::string_view node, std::string_view module, std::string_view function,
                           boost::json::array args, const CallOptions& options) {
    return to_void(run_blocking(*this, impl_->on_network_thread(),
                                CallSpec{CallSpec::Kind::cast, std::string(node), std::nullopt,
                                         std::string(module), std::string(function), std::move(args),
                                         options}));
}

CallResult Cluster::call_on_random_node(const NodeFilter& filter, std::string_view module,
                                        std::string_view function, boost::json::array args,
                                        const CallOptions& options) {
    return run_blocking(*this, impl_->on_network_thread(),
                        CallSpec{CallSpec::Kind::call, {}, filter, std::string(module), std::string(function),
                                 std::move(args), options});
}

Result<void> Cluster::cast_on_random_node(const NodeFilter& filter, std::string_view module,
                                          std::string_view function, boost::json::array args,
                                          const CallOptions& options) {
    return to_void(run_blocking(*this, impl_->on_network_thread(),
                                CallSpec{CallSpec::Kind::cast, {}, filter, std::string(module),
                                         std::string(function), std::move(args), options}));
}

}  // namespace rpclb
