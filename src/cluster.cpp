// Cluster life cycle, the public call API and balancer bookkeeping.
#include "cluster_impl.hpp"

#include <rpclb/detail/log.hpp>
#include <rpclb/detail/options_check.hpp>

#include <boost/asio/post.hpp>
#include <boost/json/serialize.hpp>

#include <random>
#include <sstream>

namespace rpclb {
namespace asio = boost::asio;
namespace wire = detail::wire;

namespace {

std::string draw_incarnation() {
    std::random_device rd;
    std::uniform_int_distribution<std::uint64_t> dist;
    std::ostringstream out;
    out << std::hex << dist(rd);
    return out.str();
}

void validate(const ClusterOptions& o) {
    if (auto problem = detail::check(o)) throw std::invalid_argument(problem->message());
}

}  // namespace

Cluster::Impl::Impl(Cluster& o, ClusterOptions opts)
    : owner(o),
      options(std::move(opts)),
      incarnation(draw_incarnation()),
      workers(options.worker_threads),
      reconnect_timer(ioc),
      groups(options.name),
      plugins(options.plugin_path) {
    settings.local = wire::PeerInfo{options.name, incarnation, "", options.client};
    settings.cookie = options.cookie;
    settings.max_message_size = options.max_message_size;
    settings.idle_timeout = options.idle_timeout;
    settings.handshake_timeout = options.handshake_timeout;
}

Cluster::Impl::~Impl() = default;

void Cluster::Impl::start() {
    if (running) return;
    if (!options.client) start_listener();  // throws before anything runs
    running = true;
    root.start();
    for (const auto& dir : plugins.missing_directories())
        RPCLB_LOG("plugins", error) << "plugin directory " << dir << " does not exist";
    groups.set_broadcast([weak = weak_from_this()](std::string frame) {
        if (auto self = weak.lock()) self->broadcast(frame);
    });
    groups.set_observer([this](const std::string& group, NodeChange change, const std::vector<std::string>& nodes) {
        if (!bus.active()) return;
        Event e{.name = change == NodeChange::joined ? EventName::membership_join : EventName::membership_leave};
        e.group = group;
        for (const auto& node : nodes) {
            e.node = node;
            bus.emit(e);
        }
    });
    work.emplace(ioc.get_executor());
    for (std::size_t i = 0; i < options.network_threads; ++i) threads.emplace_back([this] { ioc.run(); });
    for (const auto& seed : options.seeds) dial(seed);
    asio::post(ioc, [self = shared_from_this()] { self->schedule_reconnect(); });
    RPCLB_LOG("mesh", info) << options.name << " started"
                            << (bound ? " listening on " + settings.local.listen : std::string(" as a client"));
}

void Cluster::Impl::stop() {
    if (!running || stopping.exchange(true)) return;
    cancel_waits();  // calls waiting for a route fail now
    std::vector<std::shared_ptr<LoadBalancer>> routing_only;
    {
        std::lock_guard lock(balancers_mutex);
        for (auto& [name, b] : routing) routing_only.push_back(b);
        hosted.clear();
        routing.clear();
    }
    root.stop();  // each hosted balancer leaves and drains, then its services stop
    for (auto& b : routing_only) b->stop();
    routing_only.clear();
    // Finish the calls this node is serving, tell every peer to send nothing new (serving
    // what crossed that on the wire), then close: no request is lost in the close.
    const auto drain_deadline = std::chrono::steady_clock::now() + options.stop_timeout;
    auto wait_served = [&] {
        while (serving.load() > 0 && std::chrono::steady_clock::now() < drain_deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    wait_served();
    say_goodbye(std::chrono::seconds(2));
    wait_served();
    if (serving.load() > 0)
        RPCLB_LOG("rpc", warning) << serving.load() << " served calls still running after stop_timeout";
    asio::post(ioc, [self = shared_from_this()] {
        boost::system::error_code ignored;
        self->reconnect_timer.cancel();
        if (self->acceptor) self->acceptor->close(ignored);
    });
    std::vector<std::shared_ptr<detail::Connection>> all;
    {
        std::lock_guard lock(mesh_mutex);
        for (auto& [name, c] : peers) all.push_back(c);
        all.insert(all.end(), connecting.begin(), connecting.end());
    }
    for (auto& c : all) c->close("node stopping");
    // Give the close handshakes a moment, then stop the loop whatever is left.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
        bool done = true;
        for (auto& c : all) done = done && c->closed();
        if (done) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    work.reset();
    ioc.stop();
    for (auto& t : threads) t.join();
    threads.clear();
    workers.join();
    {
        std::lock_guard lock(mesh_mutex);
        peers.clear();
        connecting.clear();
    }
    groups.set_broadcast({});
    groups.set_observer({});
    RPCLB_LOG("mesh", info) << options.name << " stopped";
}

std::function<void(const SupervisorEvent&)> Cluster::Impl::supervisor_events() {
    return [this](const SupervisorEvent& event) {
        if (!bus.active()) return;
        Event e{.name = EventName::supervisor_restart};
        e.supervisor = event.supervisor;
        e.child = event.child;
        e.reason = event.reason;
        e.kind = event.kind == SupervisorEvent::Kind::restart ? "restart" : "escalation";
        bus.emit(e);
    };
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> Cluster::Impl::create_algorithm(
    const std::string& name) {
    auto algorithm = plugins.create(name);
    if (bus.active()) {
        const auto file = plugins.find(name);
        const auto path = file ? file->string() : std::string();
        Event e{.name = algorithm ? EventName::plugin_loaded : EventName::plugin_rejected};
        e.algorithm = name;
        e.path = path;
        if (!algorithm) e.reason = algorithm.error().message;
        bus.emit(e);
    }
    return algorithm;
}

// ---- Cluster ---------------------------------------------------------------------------

Cluster::Cluster(ClusterOptions options) {
    validate(options);
    impl_ = std::make_shared<Impl>(*this, std::move(options));
}

Cluster::~Cluster() {
    if (impl_) impl_->stop();
}

void Cluster::start() { impl_->start(); }
void Cluster::stop() { impl_->stop(); }
const std::string& Cluster::name() const noexcept { return impl_->options.name; }
const ClusterOptions& Cluster::options() const noexcept { return impl_->options; }
const std::string& Cluster::incarnation() const noexcept { return impl_->incarnation; }
std::optional<boost::asio::ip::tcp::endpoint> Cluster::listen_endpoint() const { return impl_->bound; }
Groups& Cluster::groups() noexcept { return impl_->groups; }
PluginRegistry& Cluster::plugins() noexcept { return impl_->plugins; }
TelemetryBus& Cluster::telemetry() noexcept { return impl_->bus; }

ClusterStats Cluster::stats() const noexcept {
    return ClusterStats{impl_->bad_frames.load(), impl_->auth_failures.load(), impl_->peers_lost.load()};
}

std::vector<std::string> Cluster::connected_nodes() const {
    std::lock_guard lock(impl_->mesh_mutex);
    std::vector<std::string> names;
    for (const auto& [name, c] : impl_->peers) names.push_back(name);
    return names;
}


boost::asio::any_io_executor Cluster::worker_executor() const { return impl_->workers.get_executor(); }
boost::asio::any_io_executor Cluster::network_executor() const { return impl_->ioc.get_executor(); }

void Cluster::register_function(std::string module, std::string function, Handler handler) {
    auto key = module + "." + function;
    std::unique_lock lock(impl_->functions_mutex);
    impl_->functions[std::move(key)] = std::make_shared<const Handler>(std::move(handler));
}

// ---- balancers ---------------------------------------------------------------------------

std::shared_ptr<LoadBalancer> Cluster::start_balancer(LoadBalancerOptions options) {
    if (auto problem = detail::check(options))
        throw std::invalid_argument("balancer " + options.name + ": " + problem->message());
    {
        std::lock_guard lock(impl_->balancers_mutex);
        if (impl_->hosted.contains(options.name))
            throw std::invalid_argument("balancer " + options.name + " is already started");
    }
    auto algorithm = impl_->create_algorithm(options.algorithm);
    if (!algorithm)
        throw std::runtime_error("balancer " + options.name + ": " + algorithm.error().message);
    if (impl_->options.client) options.node_match_list = NodeMatchList::none();
    auto b = std::make_shared<LoadBalancer>(*this, std::move(options), std::move(*algorithm), true);
    // The balancer's subtree (seed §1.1): the algorithm's services first, then the
    // balancer, so that it joins last and leaves first; one_for_all, so that a failure of
    // any of them restarts them all (§3.6).
    SupervisorOptions tree_options{.name = b->name(),
                                   .strategy = RestartStrategy::one_for_all,
                                   .on_event = impl_->supervisor_events()};
    auto tree = std::make_shared<Supervisor>(std::move(tree_options));
    for (const auto& service : b->prepare()) tree->add_child(ChildSpec{service->name(), service});
    // The balancer's stop drains for up to drain_timeout; give it that and some more.
    constexpr std::chrono::milliseconds margin{5000};
    const auto drain = b->options().drain_timeout;
    tree->add_child(ChildSpec{b->name() + "_server", b, RestartType::permanent,
                              drain < infinite_shutdown - margin ? drain + margin : infinite_shutdown});
    impl_->root.start_child(ChildSpec{b->name(), tree, RestartType::permanent, infinite_shutdown});
    std::shared_ptr<LoadBalancer> previous_routing;
    {
        std::lock_guard lock(impl_->balancers_mutex);
        impl_->hosted[b->name()] = b;
        if (auto it = impl_->routing.find(b->name()); it != impl_->routing.end()) {
            previous_routing = it->second;
            impl_->routing.erase(it);
        }
    }
    if (previous_routing) previous_routing->stop();
    RPCLB_LOG("balancer", info) << "started balancer " << b->name() << " (" << b->options().algorithm
                                << (b->joined() ? ", member" : ", not a member") << ")";
    return b;
}

bool Cluster::stop_balancer(std::string_view name) {
    {
        std::lock_guard lock(impl_->balancers_mutex);
        auto it = impl_->hosted.find(name);
        if (it == impl_->hosted.end()) return false;
        impl_->hosted.erase(it);
    }
    // The subtree stops in reverse order: the balancer leaves and drains, then its services.
    impl_->root.remove_child(name);
    RPCLB_LOG("balancer", info) << "stopped balancer " << name;
    return true;
}

std::vector<std::string> Cluster::balancer_names() const {
    std::lock_guard lock(impl_->balancers_mutex);
    std::vector<std::string> names;
    for (const auto& [name, b] : impl_->hosted) names.push_back(name);
    return names;
}

Result<std::shared_ptr<LoadBalancer>> Cluster::balancer(std::string_view name) {
    std::lock_guard lock(impl_->balancers_mutex);
    if (auto it = impl_->hosted.find(name); it != impl_->hosted.end()) return it->second;
    if (auto it = impl_->routing.find(name); it != impl_->routing.end()) return it->second;
    // Routing-only: build the balancer its members announce.
    const auto members = impl_->groups.members(name);
    if (members->nodes.empty()) return empty_members_error(name);
    LoadBalancerOptions options;
    options.name = std::string(name);
    options.node_match_list = NodeMatchList::none();
    std::optional<boost::json::object> chosen;
    for (const auto& node : members->nodes) {
        auto meta = impl_->groups.announcement(name, node);
        if (!meta) continue;
        if (!chosen) {
            chosen = std::move(meta);
        } else if (*meta != *chosen) {
            RPCLB_LOG("balancer", warning) << "members of " << name << " announce different algorithms; using "
                                           << boost::json::serialize(*chosen);
            break;
        }
    }
    if (chosen) {
        if (const auto* a = chosen->if_contains("algorithm"); a && a->is_string())
            options.algorithm = std::string(a->get_string());
        if (const auto* o = chosen->if_contains("algorithm_opts"); o && o->is_object())
            options.algorithm_opts = o->get_object();
    }
    auto algorithm = impl_->create_algorithm(options.algorithm);
    if (!algorithm)
        return ErrorMessage{ErrorCode::service_unavailable,
                            "cannot load algorithm " + options.algorithm + ": " + algorithm.error().message,
                            boost::json::object{{"load_balancer", name}, {"algorithm", options.algorithm}}};
    auto b = std::make_shared<LoadBalancer>(*this, std::move(options), std::move(*algorithm), false);
    try {
        b->start();
    } catch (const std::exception& e) {
        return ErrorMessage{ErrorCode::service_unavailable, e.what(),
                            boost::json::object{{"load_balancer", name}}};
    }
    impl_->routing.emplace(std::string(name), b);
    return b;
}

Result<std::string> Cluster::select_node(std::string_view balancer_name, const PickOptions& options) {
    auto b = balancer(balancer_name);
    if (!b) return b.error();
    return (*b)->select_node(options);
}

Result<std::vector<std::string>> Cluster::get_members(std::string_view balancer) const {
    const auto members = impl_->groups.members(balancer);
    if (members->nodes.empty()) return empty_members_error(balancer);
    return members->nodes;
}

}  // namespace rpclb
