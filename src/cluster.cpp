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
    for (const auto& dir : plugins.missing_directories())
        RPCLB_LOG("plugins", error) << "plugin directory " << dir << " does not exist";
    groups.set_broadcast([weak = weak_from_this()](std::string frame) {
        if (auto self = weak.lock()) self->broadcast(frame);
    });
    groups.set_observer([this](const std::string& group, NodeChange change, const std::vector<std::string>& nodes) {
        if (!bus.active()) return;
        Event e{change == NodeChange::joined ? EventName::membership_join : EventName::membership_leave};
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
    std::vector<std::shared_ptr<LoadBalancer>> balancers;
    {
        std::lock_guard lock(balancers_mutex);
        for (auto& [name, b] : hosted) balancers.push_back(b);
        for (auto& [name, b] : routing) balancers.push_back(b);
        hosted.clear();
        routing.clear();
    }
    for (auto& b : balancers) b->stop();
    balancers.clear();
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

void Cluster::set_pick_observer(PickObserver observer) {
    std::lock_guard lock(impl_->observers_mutex);
    if (!observer) {
        impl_->pick_observer.store(nullptr, std::memory_order_release);
        return;
    }
    impl_->observers.push_back(std::make_unique<const PickObserver>(std::move(observer)));
    impl_->pick_observer.store(impl_->observers.back().get(), std::memory_order_release);
}

const PickObserver* Cluster::pick_observer() const noexcept {
    return impl_->pick_observer.load(std::memory_order_acquire);
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
    if (options.name.empty()) throw std::invalid_argument("balancer name must not be empty");
    for (const unsigned char ch : options.name)
        if (ch < 0x20 || ch == 0x7f)
            throw std::invalid_argument("balancer name must not contain control characters");
    if (options.drain_timeout.count() < 0)
        throw std::invalid_argument("balancer " + options.name + ": drain_timeout must not be negative");
    {
        std::lock_guard lock(impl_->balancers_mutex);
        if (impl_->hosted.contains(options.name))
            throw std::invalid_argument("balancer " + options.name + " is already started");
    }
    auto algorithm = impl_->plugins.create(options.algorithm);
    if (!algorithm)
        throw std::runtime_error("balancer " + options.name + ": " + algorithm.error().message);
    if (impl_->options.client) options.node_match_list = NodeMatchList::none();
    auto b = std::make_shared<LoadBalancer>(*this, std::move(options), std::move(*algorithm), true);
    b->start();
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
    std::shared_ptr<LoadBalancer> b;
    {
        std::lock_guard lock(impl_->balancers_mutex);
        auto it = impl_->hosted.find(name);
        if (it == impl_->hosted.end()) return false;
        b = it->second;
        impl_->hosted.erase(it);
    }
    const bool drained = b->stop();
    RPCLB_LOG("balancer", info) << "stopped balancer " << name << (drained ? "" : " (drain timed out)");
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
    auto algorithm = impl_->plugins.create(options.algorithm);
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
