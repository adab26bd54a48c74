// Cluster life cycle, the public call API and balancer bookkeeping.
#include "lifecycle/cluster_impl.hpp"
#include "lifecycle/stop_signals.hpp"

#include <rpclb/detail/log.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <atomic>
#include <random>
#include <iomanip>
#include <sstream>

namespace rpclb {
namespace asio = boost::asio;

namespace {

// 20 hex digits: the start time in milliseconds since the epoch (11 digits), then 36
// random bits. Incarnations sort by start time as strings, which the mesh uses to give a
// contested name to its older incarnation. Within one process the time part only grows,
// so a node made later always sorts later, even within one millisecond.
std::string draw_incarnation() {
    static std::atomic<std::int64_t> last_ms{0};
    std::random_device rd;
    std::uniform_int_distribution<std::uint64_t> dist(0, (std::uint64_t(1) << 36) - 1);
    const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    std::int64_t prev = last_ms.load();
    std::int64_t ms = 0;
    do {
        ms = std::max(now, prev + 1);
    } while (!last_ms.compare_exchange_weak(prev, ms));
    std::ostringstream out;
    out << std::hex << std::setfill('0') << std::setw(11) << ms << std::setw(9) << dist(rd);
    return out.str();
}

void validate(const ClusterOptions& o) {
    if (auto problem = detail::check(o)) throw std::invalid_argument(problem->message());
}

// What supervisors of a node report to: the log and `supervisor.restart`.
std::function<void(const SupervisorEvent&)> supervisor_events(TelemetryBus& bus) {
    return [&bus](const SupervisorEvent& event) {
        if (!bus.active()) return;
        Event e{.name = EventName::supervisor_restart};
        e.supervisor = event.supervisor;
        e.child = event.child;
        e.reason = event.reason;
        e.kind = event.kind == SupervisorEvent::Kind::restart ? "restart" : "escalation";
        bus.emit(e);
    };
}

// The options of each part, from the node's.
detail::MeshOptions mesh_options(const ClusterOptions& o, std::shared_ptr<detail::LoadGauge> load) {
    return detail::MeshOptions{.name = o.name,
                               .client = o.client,
                               .listen = o.listen,
                               .seeds = o.seeds,
                               .cookie = o.cookie,
                               .reconnect_interval = o.reconnect_interval,
                               .idle_timeout = o.idle_timeout,
                               .handshake_timeout = o.handshake_timeout,
                               .max_message_size = o.max_message_size,
                               .max_batch_frames = o.max_batch_frames,
                               .max_send_queue_bytes = o.max_send_queue_bytes,
                               .call_channels = o.call_channels,
                               .tls = o.tls,
                               .load = std::move(load)};
}

detail::RpcOptions rpc_options(const ClusterOptions& o, std::shared_ptr<detail::LoadGauge> load, TelemetryBus& bus) {
    return detail::RpcOptions{
        .node = o.name, .max_message_size = o.max_message_size, .load = std::move(load), .bus = &bus};
}

detail::RouterOptions router_options(const ClusterOptions& o) {
    return detail::RouterOptions{.name = o.name,
                                 .call_directly = o.call_directly,
                                 .retry = o.retry,
                                 .retry_count = o.retry_count,
                                 .excluded_node_patterns = o.excluded_node_patterns};
}

}  // namespace

Cluster::Impl::Impl(ClusterOptions opts)
    : options(std::move(opts)),
      incarnation(draw_incarnation()),
      runtime(options.network_threads, options.worker_threads),
      load(std::make_shared<detail::LoadGauge>(options.worker_threads)),
      node_groups(options.name),
      plugin_registry(options.plugin_path),
      root(SupervisorOptions{.name = options.name, .on_event = supervisor_events(bus)}),
      balancers(*this, options.client, *this),
      rpc(rpc_options(options, load, bus), runtime.workers(), balancers),
      mesh(mesh_options(options, load), incarnation, runtime.network(), node_groups, rpc),
      channels(mesh.settings(), options.call_channels),
      router(router_options(options), runtime.network(), mesh, channels, rpc, balancers, bus) {}

void Cluster::Impl::supervise(const std::shared_ptr<LoadBalancer>& b) {
    // The balancer's subtree (predecessor-compatibility §1.1): the algorithm's services
    // first, then the balancer, so that it joins last and leaves first; one_for_all, so
    // that a failure of any of them restarts them all (§3.6).
    auto tree = std::make_shared<Supervisor>(SupervisorOptions{
        .name = b->name(), .strategy = RestartStrategy::one_for_all, .on_event = supervisor_events(bus)});
    for (const auto& service : b->prepare()) tree->add_child(ChildSpec{service->name(), service});
    // The balancer's stop drains for up to drain_timeout; give it that and some more.
    constexpr std::chrono::milliseconds margin{5000};
    const auto drain = b->options().drain_timeout;
    tree->add_child(ChildSpec{b->name() + "_server", b, RestartType::permanent,
                              drain < infinite_shutdown - margin ? drain + margin : infinite_shutdown});
    root.start_child(ChildSpec{b->name(), tree, RestartType::permanent, infinite_shutdown});
}

// The subtree stops in reverse order: the balancer leaves and drains, then its services.
void Cluster::Impl::unsupervise(std::string_view name) { root.remove_child(name); }

boost::asio::any_io_executor Cluster::Impl::workers() { return runtime.workers().get_executor(); }

asio::any_completion_executor Cluster::Impl::completion_fallback() {
    if (runtime.workers_stopped()) return asio::any_completion_executor(asio::system_executor());
    return asio::any_completion_executor(runtime.workers().get_executor());
}

void Cluster::Impl::serve(std::string module, std::string function, Handler handler) {
    rpc.register_function(std::move(module), std::move(function), std::move(handler), HandlerOptions{});
}

void Cluster::Impl::wire_up(const std::shared_ptr<Impl>& self) {
    self->mesh.set_self(std::shared_ptr<detail::Mesh>(self, &self->mesh));
    self->mesh_ref = std::shared_ptr<detail::Mesh>(self, &self->mesh);
    self->router.set_self(std::shared_ptr<detail::Router>(self, &self->router));
    // A cookie refusal may leave calls waiting for a route with nothing to wait for.
    self->mesh.set_on_cookie_refused([router = std::weak_ptr<detail::Router>(
                                          std::shared_ptr<detail::Router>(self, &self->router))] {
        if (auto r = router.lock()) r->wake();
    });
    // Readiness waits end once no node lets this one in: no member could end them.
    self->mesh.set_on_locked_out([self_weak = std::weak_ptr<Impl>(self)](const detail::LockedOut& why) {
        auto impl = self_weak.lock();
        if (!impl) return;
        impl->waits.fail_all([&](const std::string& balancer) {
            return detail::locked_out_failure(why, impl->options.name, balancer);
        });
        impl->notify_link_waits();
    });
    self->mesh.set_on_linked([self_weak = std::weak_ptr<Impl>(self)](const std::string&) {
        if (auto impl = self_weak.lock()) impl->notify_link_waits();
    });
    // So does giving up the name; the application hears of it too (Cluster::on_name_lost),
    // and so does the process's StopSignal, without a handler: a node cut off from its
    // cluster must not run on as if it served.
    self->mesh.set_on_name_lost([self_weak = std::weak_ptr<Impl>(self)](const std::string& why) {
        auto impl = self_weak.lock();
        if (!impl) return;
        impl->router.wake();
        impl->waits.fail_all([&](const std::string& balancer) {
            return detail::name_taken_failure(why, impl->options.name, balancer);
        });
        impl->notify_link_waits();
        std::function<void(const std::string&)> handler;
        {
            std::lock_guard lock(impl->name_lost_mutex);
            handler = impl->name_lost_handler;
        }
        if (handler) handler(why);
        detail::stop_every_signal();
    });
    // A node's call channels end with its mesh link.
    self->mesh.set_on_peer_lost([channels = std::weak_ptr<detail::CallChannels>(
                                     std::shared_ptr<detail::CallChannels>(self, &self->channels))](
                                    const std::string& node, detail::LinkError why, bool said_bye) {
        if (auto c = channels.lock()) c->drop(node, why, said_bye);
    });
    // ...and a channel that breaks under a call says its node is gone, before the call's
    // own link may have noticed.
    self->channels.set_on_lost([mesh = std::weak_ptr<detail::Mesh>(std::shared_ptr<detail::Mesh>(self, &self->mesh))](
                                   const detail::Connection& link, const detail::LinkClose& reason) {
        if (auto m = mesh.lock()) m->drop_link(link, reason);
    });
}

void Cluster::Impl::start() {
    if (running) return;
    if (!options.client) mesh.listen();  // throws before anything runs
    running = true;
    root.start();
    for (const auto& dir : plugin_registry.missing_directories())
        RPCLB_LOG("plugins", error) << "plugin directory " << dir << " does not exist";
    node_groups.set_observer([this](const std::string& group, NodeChange change, const std::vector<std::string>& nodes) {
        if (!bus.active()) return;
        Event e{.name = change == NodeChange::joined ? EventName::membership_join : EventName::membership_leave};
        e.group = group;
        for (const auto& node : nodes) {
            e.node = node;
            bus.emit(e);
        }
    });
    runtime.start();
    mesh.start();
    if (!options.discovery.empty()) {
        // After listen(): the key's value is the address the mesh advertises.
        discovery = std::make_shared<detail::EtcdDiscovery>(
            runtime.network(),
            detail::EtcdDiscoveryOptions{.url = detail::parse_discovery_url(options.discovery),
                                         .node = options.name,
                                         .address = options.client ? std::string() : mesh.advertised_address(),
                                         .ttl = detail::lease_ttl(options.idle_timeout)},
            [mesh = mesh_ref](detail::EtcdDiscovery::Listed nodes) {
                if (auto m = mesh.lock()) m->set_discovered(std::move(nodes));
            });
        discovery->start();
    }
    const auto endpoint = mesh.listen_endpoint();
    RPCLB_LOG("mesh", info) << options.name << " started"
                            << (endpoint ? " listening on port " + std::to_string(endpoint->port())
                                         : std::string(" as a client"));
}

void Cluster::Impl::stop() {
    if (!running || stopping.exchange(true)) return;
    waits.stop();  // pending wait_for_members end before the loop holding their timers goes
    notify_link_waits();  // and wait_for_node, which sees `stopping`
    rpc.mark_stop();
    mesh.begin_stop();  // no new connections from here on
    if (discovery) discovery->begin_stop();  // this node's key goes: no node dials it any more
    router.stop();      // calls waiting for a route fail now
    balancers.clear();
    root.stop();  // each hosted balancer leaves and drains, then its services stop
    // Finish the calls this node was serving when its stop began (their handlers may still
    // call other nodes), tell every peer to send nothing new (serving what came meanwhile
    // and what crossed that on the wire), then close: no request is lost in the close.
    // Waiting for the node to be idle before the bye would wait out stop_timeout under a
    // steady stream of overlapping direct calls, which nothing else turns away.
    const auto drain_deadline = std::chrono::steady_clock::now() + options.stop_timeout;
    rpc.wait_served_before_stop(drain_deadline);
    mesh.say_goodbye(std::chrono::seconds(2));
    const bool served_all = rpc.wait_idle(drain_deadline);
    if (!served_all)
        RPCLB_LOG("rpc", warning) << rpc.abandon_queued()
                                  << " served calls still running or queued after stop_timeout: those not "
                                     "started yet are dropped, the running ones finish";
    router.stop_sending();  // new calls to other nodes fail at once from here
    channels.stop();        // calls still waiting on a channel fail now, as on a closing link
    mesh.close_all(std::chrono::seconds(2), served_all);  // aborts what the peer does not close in time
    if (discovery && !discovery->wait_stopped(std::chrono::seconds(2)))
        RPCLB_LOG("discovery", warning) << "etcd discovery did not stop within 2 s";
    runtime.stop();
    node_groups.set_broadcast({});
    node_groups.set_observer({});
    RPCLB_LOG("mesh", info) << options.name << " stopped";
}

// ---- Cluster ---------------------------------------------------------------------------

Cluster::Cluster(ClusterOptions options) {
    options = with_defaults(std::move(options));
    validate(options);
    impl_ = std::make_shared<Impl>(std::move(options));
    Impl::wire_up(impl_);
}

Cluster::~Cluster() {
    if (impl_) impl_->stop();
}

void Cluster::start() { impl_->start(); }
void Cluster::stop() { impl_->stop(); }
const std::string& Cluster::name() const noexcept { return impl_->options.name; }
const ClusterOptions& Cluster::options() const noexcept { return impl_->options; }
const std::string& Cluster::incarnation() const noexcept { return impl_->incarnation; }
std::optional<boost::asio::ip::tcp::endpoint> Cluster::listen_endpoint() const { return impl_->mesh.listen_endpoint(); }
Groups& Cluster::groups() noexcept { return impl_->node_groups; }
PluginRegistry& Cluster::plugins() noexcept { return impl_->plugin_registry; }
TelemetryBus& Cluster::telemetry() noexcept { return impl_->bus; }

ClusterStats Cluster::stats() const noexcept {
    const auto mesh = impl_->mesh.stats();
    ClusterStats stats;
    stats.bad_frames = mesh.bad_frames;
    stats.auth_failures = mesh.auth_failures;
    stats.peers_lost = mesh.peers_lost;
    stats.frames_sent = mesh.frames_sent;
    stats.messages_sent = mesh.messages_sent;
    stats.overloaded = mesh.overloaded;
    stats.known_nodes = mesh.known_nodes;
    stats.cookie_refusals = mesh.cookie_refusals;
    stats.tls_failures = mesh.tls_failures;
    stats.unauthenticated_refused = mesh.unauthenticated_refused;
    stats.oversize_before_handshake = mesh.oversize_before_handshake;
    stats.name_conflicts = mesh.name_conflicts;
    stats.slow_inline_runs = impl_->rpc.slow_inline_runs();
    stats.expired_requests = impl_->rpc.expired_requests();
    stats.bad_traceparents = impl_->rpc.bad_traceparents();
    stats.channel_calls = impl_->channels.calls();
    stats.channels_open = impl_->channels.open() + impl_->mesh.accepted_channels();
    return stats;
}

std::vector<std::string> Cluster::connected_nodes() const { return impl_->mesh.connected_nodes(); }

std::optional<std::string> Cluster::cookie_refused_by() const { return impl_->mesh.shut_out(); }

std::optional<std::string> Cluster::name_taken() const { return impl_->mesh.name_lost(); }

void Cluster::on_name_lost(std::function<void(const std::string&)> handler) {
    std::lock_guard lock(impl_->name_lost_mutex);
    impl_->name_lost_handler = std::move(handler);
}

void Cluster::report_load(double load) {
    if (!std::isfinite(load) || load < 0.0 || load > detail::wire::max_application_load) {
        std::ostringstream why;
        why << "report_load: the load must be a finite number in [0, 1e9], got " << load;
        throw std::invalid_argument(why.str());
    }
    impl_->load->set_application(load);
}

std::optional<std::chrono::microseconds> Cluster::keepalive_rtt(std::string_view node) const {
    return impl_->mesh.keepalive_rtt(node);
}

Result<void> Cluster::reload_tls() {
    const auto& tls = impl_->options.tls;
    const boost::json::object details{{"node", name()}};
    if (!impl_->mesh.tls()) {
        RPCLB_LOG("mesh", warning) << "TLS reload asked, but TLS is off on this node (no tls.cert): nothing to reload";
        return ErrorMessage{ErrorCode::bad_request,
                            "TLS is off on " + name() + " (no tls.cert): there are no credentials to reload", details};
    }
    if (auto problem = impl_->mesh.reload_tls()) {
        RPCLB_LOG("mesh", warning) << "TLS reload failed: " << problem->message()
                                   << "; new connections keep using the credentials loaded before";
        auto with_field = details;
        with_field["field"] = problem->field;
        return ErrorMessage{ErrorCode::bad_request,
                            problem->message() + "; " + name() + " keeps the TLS credentials it had", with_field};
    }
    RPCLB_LOG("mesh", info) << "TLS credentials reloaded (tls.cert " << tls.cert << ", tls.key " << tls.key
                            << ", tls.ca " << (tls.ca.empty() ? std::string("none") : "\"" + tls.ca.string() + "\"")
                            << "); new connections use them";
    return {};
}

boost::asio::any_io_executor Cluster::worker_executor() const { return impl_->runtime.workers().get_executor(); }
boost::asio::any_io_executor Cluster::network_executor() const { return impl_->runtime.network().get_executor(); }

void Cluster::register_function(std::string module, std::string function, Handler handler, HandlerOptions options) {
    impl_->rpc.register_function(std::move(module), std::move(function), std::move(handler), options);
}

// ---- balancers ---------------------------------------------------------------------------

std::shared_ptr<LoadBalancer> Cluster::start_balancer(LoadBalancerOptions options) {
    return impl_->balancers.start(std::move(options));
}

bool Cluster::stop_balancer(std::string_view name) { return impl_->balancers.stop(name); }

std::vector<std::string> Cluster::balancer_names() const { return impl_->balancers.hosted_names(); }

Result<std::shared_ptr<LoadBalancer>> Cluster::balancer(std::string_view name) { return impl_->balancers.route(name); }

Result<std::string> Cluster::select_node(std::string_view balancer_name, const PickOptions& options) {
    auto b = balancer(balancer_name);
    if (!b) return b.error();
    return (*b)->select_node(options);
}

Result<std::vector<std::string>> Cluster::get_members(std::string_view balancer) const {
    const auto members = impl_->node_groups.members(balancer);
    if (members->nodes.empty()) return empty_members_error(balancer);
    return members->nodes;
}

// ---- calls -------------------------------------------------------------------------------

namespace {

using detail::CallSpec;

Result<void> to_void(CallResult r) {
    if (!r) return std::move(r).error();
    return {};
}

// Starts `spec` and completes `handler` with `convert(result)` on the handler's associated
// executor (default: the node's worker pool, or, once the node has stopped and joined it,
// Asio's system executor, so that a call made or ended after stop() still completes):
// posted, never inline; the executor's outstanding work is tracked until then; the
// handler's cancellation slot cancels the operation.
//
// Never inline means never inside async_call, even when the call fails at once on the
// calling thread (no connection, an unknown balancer without retries): a handler that
// starts the next call from its completion would otherwise recurse once per failed call
// until the stack ran out (a loop of calls to a killed node, as rpclb-call makes, would
// overflow it after a few thousand). `any_completion_executor` cannot require
// blocking.never (its prefer is a no-op, so a worker running the pool's executor ran the
// completion in place); the worker pool's own executor type can.
// How many initiate() calls this thread is inside. An opted-in completion runs inline on a
// network thread unless that thread is inside async_call itself (the recursion above). It
// is per thread: an answer read on a network thread while the calling thread has not yet
// left async_call (it was preempted right after sending) still completes inline there,
// where a flag per call would send it to the pool.
thread_local int initiating_here = 0;

template <class R, class Convert>
void initiate(detail::Router& router, const detail::Runtime& runtime, CallSpec spec,
              asio::any_completion_handler<void(R)> handler, Convert convert) {
    using Workers = asio::thread_pool::executor_type;
    struct State {
        explicit State(Workers w) : workers(std::move(w)) {}
        asio::any_completion_handler<void(R)> handler;
        asio::any_completion_executor work;
        Workers workers;
        bool on_workers = false;  // `work` is the node's worker pool
        bool complete_inline = false;  // CallOptions::run_completion_inline, and on_workers
        asio::cancellation_slot slot;
        std::atomic<std::shared_ptr<detail::CallOperation>> operation;
    };
    auto& pool = const_cast<detail::Runtime&>(runtime).workers();
    auto state = std::make_shared<State>(pool.get_executor());
    state->slot = asio::get_associated_cancellation_slot(handler);
    const auto workers = asio::any_completion_executor(pool.get_executor());
    const auto fallback = runtime.workers_stopped() ? asio::any_completion_executor(asio::system_executor())
                                                    : workers;
    auto executor = asio::get_associated_executor(handler, fallback);
    state->on_workers = executor == workers;
    // Not with a cancellation slot: its signal is emitted on the handler's executor (the
    // pool), and completing elsewhere would clear the slot while it may be emitted.
    state->complete_inline = state->on_workers && spec.options.run_completion_inline && !state->slot.is_connected();
    state->work = asio::prefer(std::move(executor), asio::execution::outstanding_work.tracked);
    // swap, not move-assignment: Boost 1.81's any_completion_handler::operator=(&&) wraps
    // the handler in itself (recursively) instead of moving it.
    state->handler.swap(handler);
    if (state->slot.is_connected()) {
        state->slot.assign([weak = std::weak_ptr<State>(state)](asio::cancellation_type) {
            if (auto s = weak.lock())
                if (auto op = s->operation.load()) detail::Router::cancel(op);
        });
    }
    // `runtime` lives as long as the node's Impl, which the operation keeps (its Router).
    struct Initiating {
        Initiating() noexcept { ++initiating_here; }
        ~Initiating() { --initiating_here; }
    } initiating;
    auto operation = router.start(std::move(spec), [state, convert, &runtime](CallResult result) {
        // Posted (never run inside this call), with the work counted until it runs.
        auto work = std::move(state->work);
        auto complete = [state, r = convert(std::move(result))]() mutable {
            if (state->slot.is_connected()) state->slot.clear();
            state->operation.store(nullptr);
            auto handler = std::move(state->handler);
            std::move(handler)(std::move(r));
        };
        // Runs `f` later, never in place: on the worker pool, or on Asio's system
        // executor once the pool is joined (nothing would run there any more).
        const auto later = [&runtime, state](auto f) {
            if (runtime.workers_stopped()) return asio::post(asio::system_executor(), std::move(f));
            asio::require(state->workers, asio::execution::blocking.never).execute(std::move(f));
        };
        // Opted in: on the network thread that completes the call, where no rpclb lock is
        // held (reply, deadline and drop are all handled on the connection's strand).
        if (state->complete_inline && initiating_here == 0 && runtime.on_network_thread())
            return complete();
        if (state->on_workers) return later(std::move(complete));
        // Another executor (the handler's own). Completing inside async_call, on the
        // caller's thread, it could run the handler in place: go round `later` first.
        if (initiating_here > 0)
            return later([work = std::move(work), complete = std::move(complete)]() mutable {
                asio::prefer(work, asio::execution::blocking.never).execute(std::move(complete));
            });
        asio::prefer(work, asio::execution::blocking.never).execute(std::move(complete));
    });
    // For the cancellation slot; the completion drops it (a call that completed before
    // this store is kept until `state` goes, which cancelling then finds finished).
    state->operation.store(std::move(operation));
}

}  // namespace

void Cluster::initiate_call(std::string node, std::optional<NodeFilter> filter, std::string module,
                            std::string function, boost::json::array args, CallOptions options,
                            CallCompletion handler) {
    initiate<CallResult>(impl_->router, impl_->runtime,
                         CallSpec{CallSpec::Kind::call, std::move(node), std::move(filter), std::move(module),
                                  std::move(function), std::move(args), std::move(options)},
                         std::move(handler), [](CallResult r) { return r; });
}

void Cluster::initiate_cast(std::string node, std::optional<NodeFilter> filter, std::string module,
                            std::string function, boost::json::array args, CallOptions options,
                            CastCompletion handler) {
    initiate<Result<void>>(impl_->router, impl_->runtime,
                           CallSpec{CallSpec::Kind::cast, std::move(node), std::move(filter), std::move(module),
                                    std::move(function), std::move(args), std::move(options)},
                           std::move(handler), to_void);
}

void Cluster::initiate_balanced_call(std::string module, std::string function, boost::json::array args,
                                    CallOptions options, CallCompletion handler) {
    if (options.load_balancer.empty()) {
        // Nothing to route: complete with the error, posted (never inside async_call) to the
        // handler's executor, as initiate() does.
        auto error = call_error(ErrorCode::bad_request, "a load-balanced call needs options.load_balancer", name(),
                                module, function);
        detail::post_completion(std::move(handler), impl_->completion_fallback(), CallResult(std::move(error)));
        return;
    }
    initiate_call(name(), std::nullopt, std::move(module), std::move(function), std::move(args), std::move(options),
                  std::move(handler));
}

void Cluster::Impl::call(std::string node, std::string module, std::string function, boost::json::array args,
                         std::chrono::milliseconds timeout, CallCompletion handler) {
    // A direct call: no balancer in the options, so nothing is picked, counted or retried.
    CallOptions options;
    options.timeout = timeout;
    initiate<CallResult>(router, runtime,
                         CallSpec{CallSpec::Kind::call, std::move(node), std::nullopt, std::move(module),
                                  std::move(function), std::move(args), std::move(options)},
                         std::move(handler), [](CallResult r) { return r; });
}

CallResult Cluster::call(std::string_view node, std::string_view module, std::string_view function,
                         boost::json::array args, const CallOptions& options) {
    return impl_->router.run_blocking(CallSpec{CallSpec::Kind::call, std::string(node), std::nullopt,
                                               std::string(module), std::string(function), std::move(args), options},
                                      impl_->runtime.on_network_thread());
}

CallResult Cluster::call(std::string_view module, std::string_view function, boost::json::array args,
                         const CallOptions& options) {
    if (options.load_balancer.empty())
        return call_error(ErrorCode::bad_request, "a load-balanced call needs options.load_balancer", name(), module,
                          function);
    return call(name(), module, function, std::move(args), options);
}

Result<void> Cluster::cast(std::string_view node, std::string_view module, std::string_view function,
                           boost::json::array args, const CallOptions& options) {
    return to_void(impl_->router.run_blocking(CallSpec{CallSpec::Kind::cast, std::string(node), std::nullopt,
                                                       std::string(module), std::string(function), std::move(args),
                                                       options},
                                              impl_->runtime.on_network_thread()));
}

CallResult Cluster::call_on_random_node(const NodeFilter& filter, std::string_view module, std::string_view function,
                                        boost::json::array args, const CallOptions& options) {
    return impl_->router.run_blocking(CallSpec{CallSpec::Kind::call, {}, filter, std::string(module),
                                               std::string(function), std::move(args), options},
                                      impl_->runtime.on_network_thread());
}

Result<void> Cluster::cast_on_random_node(const NodeFilter& filter, std::string_view module,
                                          std::string_view function, boost::json::array args,
                                          const CallOptions& options) {
    return to_void(impl_->router.run_blocking(CallSpec{CallSpec::Kind::cast, {}, filter, std::string(module),
                                                       std::string(function), std::move(args), options},
                                              impl_->runtime.on_network_thread()));
}

CallResult Cluster::call(std::string_view node, std::string_view module, std::string_view function) {
    return call(node, module, function, {}, {});
}
Result<void> Cluster::cast(std::string_view node, std::string_view module, std::string_view function) {
    return cast(node, module, function, {}, {});
}
CallResult Cluster::call_on_random_node(const NodeFilter& filter, std::string_view module, std::string_view function) {
    return call_on_random_node(filter, module, function, {}, {});
}
Result<void> Cluster::cast_on_random_node(const NodeFilter& filter, std::string_view module, std::string_view function) {
    return cast_on_random_node(filter, module, function, {}, {});
}

}  // namespace rpclb
