#include <rpclb/cluster.hpp>
#include <rpclb/detail/log.hpp>
#include <rpclb/load_balancer.hpp>

#include "routing/balancer_host.hpp"

#include <algorithm>
#include <thread>

namespace rpclb {

namespace {

ErrorMessage algorithm_failure(std::string_view balancer, std::string message) {
    return ErrorMessage{ErrorCode::internal_server_error, std::move(message),
                        boost::json::object{{"load_balancer", balancer}}};
}

}  // namespace

LoadBalancer::LoadBalancer(Cluster& cluster, LoadBalancerOptions options,
                           std::shared_ptr<SelectionAlgorithm> algorithm, bool hosted)
    : cluster_(cluster),
      host_(std::make_unique<detail::BalancerHost>(cluster, *this)),
      options_(std::move(options)),
      algorithm_(std::move(algorithm)),
      hosted_(hosted),
      members_(std::make_shared<const MemberSnapshot>()) {}

LoadBalancer::~LoadBalancer() {
    if (monitor_id_) cluster_.groups().demonitor(monitor_id_);
    // Services' code lives in the algorithm's plugin; they must go before the algorithm
    // drops the last reference to its library.
    services_.clear();
    algorithm_.reset();
}

boost::json::object LoadBalancer::announcement() const {
    return boost::json::object{{"algorithm", options_.algorithm},
                               {"algorithm_opts", options_.algorithm_opts}};
}

const std::vector<std::shared_ptr<Service>>& LoadBalancer::prepare() {
    if (prepared_) return services_;
    const AlgorithmContext context{options_.name, cluster_.name(), host_.get()};
    // The hook running, for the message: "init", "services()" or "local()".
    const char* hook = "init";
    auto failure = [&](const std::string& what) {
        services_.clear();
        return std::runtime_error("balancer " + options_.name + ": algorithm " + options_.algorithm + " " +
                                  hook + " failed" + what);
    };
    try {
        algorithm_->init(context, options_.algorithm_opts);
        hook = "services()";
        services_ = algorithm_->services();
        hook = "local()";
        local_ = algorithm_->local();
    } catch (const std::exception& e) {
        throw failure(std::string(": ") + e.what());
    } catch (...) {
        throw failure(" with an unknown exception");
    }
    prepared_ = true;
    return services_;
}

void LoadBalancer::start() {
    if (started_) return;
    prepare();
    // A routing-only balancer has no supervisor: its services (e.g. the least_cpu poller,
    // whose readings its picks need) are its own to run.
    std::size_t started = 0;
    try {
        if (!hosted_)
            for (; started < services_.size(); ++started) services_[started]->start();
    } catch (const std::exception& e) {
        while (started > 0) services_[--started]->stop();
        throw std::runtime_error("balancer " + options_.name + ": service failed to start: " + e.what());
    } catch (...) {
        while (started > 0) services_[--started]->stop();
        throw std::runtime_error("balancer " + options_.name + ": service failed to start");
    }
    auto& groups = cluster_.groups();
    monitor_id_ = groups.monitor(options_.name, [this](const std::string&, NodeChange change,
                                                       const std::vector<std::string>& nodes) {
        on_change(change, nodes);
    });
    members_.store(groups.members(options_.name));
    if (hosted_ && options_.node_match_list.matches(cluster_.name(), cluster_.options().excluded_node_patterns)) {
        groups.join(options_.name, announcement());
        joined_ = true;
    }
    started_ = true;
}

void LoadBalancer::stop() noexcept {
    if (!started_) return;
    started_ = false;
    try {
        if (joined_.exchange(false)) cluster_.groups().leave(options_.name);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", warning) << "balancer " << options_.name << ": leaving the group failed: " << e.what();
    }
    // The seed's Drainer (§4.2): wait for this node's calls through the balancer.
    auto& bus = cluster_.telemetry();
    const auto began = std::chrono::steady_clock::now();
    Event drain{.name = EventName::drain_begin};
    drain.load_balancer = options_.name;
    auto outstanding = [this] { return in_flight_.load() + serving_.load(); };
    drain.in_flight = outstanding();
    if (bus.active()) bus.emit(drain);
    const auto deadline = began + options_.drain_timeout;
    bool drained = true;
    while (outstanding() > 0) {
        if (std::chrono::steady_clock::now() >= deadline) {
            drained = false;
            RPCLB_LOG("balancer", warning) << "balancer " << options_.name << ": " << in_flight_.load()
                                           << " calls sent and " << serving_.load()
                                           << " calls served still running after the drain timeout";
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (bus.active()) {
        drain.name = EventName::drain_end;
        drain.in_flight = outstanding();
        drain.duration = std::chrono::steady_clock::now() - began;
        drain.outcome = drained ? "drained" : "timeout";
        bus.emit(drain);
    }
    if (!hosted_)
        for (auto it = services_.rbegin(); it != services_.rend(); ++it) (*it)->stop();
    if (monitor_id_) cluster_.groups().demonitor(std::exchange(monitor_id_, 0));
}

void LoadBalancer::on_change(NodeChange change, const std::vector<std::string>& nodes) {
    members_.store(cluster_.groups().members(options_.name));
    try {
        algorithm_->on_node_change(change, nodes);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": on_node_change threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": on_node_change threw";
    }
}

Result<std::vector<std::string>> LoadBalancer::get_members() const {
    auto snapshot = members_.load();
    if (snapshot->nodes.empty()) return empty_members_error(options_.name);
    return snapshot->nodes;
}

Result<std::string> LoadBalancer::select_node(const PickOptions& options) {
    auto picked = pick(options);
    if (!picked) return picked.error();
    return picked->node();
}

Result<LoadBalancer::Picked> LoadBalancer::pick(const PickOptions& options) {
    auto snapshot = members_.load();
    // The seed's selection events (§5.2), from the dispatch so custom algorithms get them.
    auto& bus = cluster_.telemetry();
    if (snapshot->nodes.empty()) {
        if (bus.active()) {
            Event e{.name = EventName::node_selected_empty};
            e.algorithm = options_.algorithm;
            e.load_balancer = options_.name;
            bus.emit(e);
        }
        return empty_members_error(options_.name);
    }
    try {
        auto picked = algorithm_->choose_from_nodes(*snapshot, options);
        if (!picked) return picked.error();
        if (*picked >= snapshot->nodes.size())
            return algorithm_failure(options_.name, "algorithm " + options_.algorithm +
                                                        " picked an index out of range");
        const auto& node = snapshot->nodes[*picked];
        if (bus.active()) {
            Event e{.name = EventName::node_selected};
            e.members_count = static_cast<std::int64_t>(snapshot->nodes.size());
            e.algorithm = options_.algorithm;
            e.load_balancer = options_.name;
            e.node = node;
            bus.emit(e);
        }
        const std::size_t index = *picked;
        return Picked{std::move(snapshot), index};
    } catch (const std::exception& e) {
        return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " threw");
    }
}

Result<std::vector<std::string>> LoadBalancer::select_nodes(std::size_t count, const PickOptions& options) {
    auto snapshot = members_.load();
    if (snapshot->nodes.empty()) return empty_members_error(options_.name);
    try {
        auto picked = algorithm_->choose_nodes(*snapshot, count, options);
        if (!picked) return picked.error();
        const auto size = snapshot->nodes.size();
        if (picked->size() > count)
            return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " picked " +
                                                        std::to_string(picked->size()) + " nodes, more than the " +
                                                        std::to_string(count) + " asked for");
        std::vector<bool> seen(size);
        std::vector<std::string> nodes;
        nodes.reserve(picked->size());
        for (auto i : *picked) {
            if (i >= size)
                return algorithm_failure(options_.name, "algorithm " + options_.algorithm +
                                                            " picked an index out of range");
            if (seen[i])
                return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " picked node " +
                                                            snapshot->nodes[i] + " twice");
            seen[i] = true;
            nodes.push_back(snapshot->nodes[i]);
        }
        return nodes;
    } catch (const std::exception& e) {
        return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(options_.name, "algorithm " + options_.algorithm + " threw");
    }
}

void LoadBalancer::release_node(std::string_view node) noexcept {
    try {
        // The snapshot form lets an algorithm reach what it keeps in the snapshot.
        const auto snapshot = members_.load();
        const auto& nodes = snapshot->nodes;
        const auto at = std::lower_bound(nodes.begin(), nodes.end(), node);
        if (at != nodes.end() && *at == node)
            algorithm_->release_node(*snapshot, static_cast<std::size_t>(at - nodes.begin()));
        else
            algorithm_->release_node(node);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": release_node threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": release_node threw";
    }
}

}  // namespace rpclb
