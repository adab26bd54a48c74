#include <rpclb/detail/log.hpp>
#include <rpclb/load_balancer.hpp>

#include <rpclb/plugin_registry.hpp>

#include "routing/balancer_host.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/cluster_link.hpp"
#include "routing/outlier_detector.hpp"
#include "routing/outlier_options.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

namespace rpclb {

namespace detail {
struct EjectionTimer {
    boost::asio::steady_timer timer;
};
}  // namespace detail

namespace {

// The group's new snapshot, before ejections, and the outlier detector told of its members.
// Called under publish_mutex_.
void adopt_group(std::shared_ptr<const MemberSnapshot>& group, detail::OutlierDetector* outliers,
                 std::shared_ptr<const MemberSnapshot> current) {
    group = std::move(current);
    if (outliers) outliers->set_members(group->nodes, std::chrono::steady_clock::now());
}

ErrorMessage algorithm_failure(std::string_view balancer, std::string message) {
    return ErrorMessage{ErrorCode::internal_server_error, std::move(message),
                        boost::json::object{{"load_balancer", balancer}}};
}

// Logs and publishes (member.ejected / member.returned) what `change` did to `balancer`.
void report_ejections(TelemetryBus& bus, const std::string& balancer, const detail::OutlierChange& change) {
    for (const auto& ejection : change.ejected) {
        RPCLB_LOG("balancer", warning) << "balancer " << balancer << ": member " << ejection.node << " ejected for "
                                       << ejection.duration.count() << " ms (" << ejection.reason << ")";
        if (bus.active()) {
            Event e{.name = EventName::member_ejected};
            e.load_balancer = balancer;
            e.node = ejection.node;
            e.reason = ejection.reason;
            e.duration = ejection.duration;
            bus.emit(e);
        }
    }
    for (const auto& node : change.returned) {
        RPCLB_LOG("balancer", info) << "balancer " << balancer << ": member " << node << " returned";
        if (bus.active()) {
            Event e{.name = EventName::member_returned};
            e.load_balancer = balancer;
            e.node = node;
            bus.emit(e);
        }
    }
}

}  // namespace

LoadBalancer::LoadBalancer(detail::ClusterLink& node, LoadBalancerOptions options,
                           std::shared_ptr<SelectionAlgorithm> algorithm, bool hosted)
    : node_(node),
      host_(std::make_unique<detail::BalancerHost>(node, *this)),
      options_(std::move(options)),
      hosted_(hosted) {
    // A routing-only balancer keeps a detector even with detection off: the options its
    // members announce may turn it on (follow_announcement).
    if (options_.outlier_detection.enabled() || !hosted_)
        outliers_ = std::make_unique<detail::OutlierDetector>(options_.outlier_detection);
    group_ = std::make_shared<const MemberSnapshot>();
    auto engine = std::make_shared<Engine>(
        Engine{std::move(algorithm), std::exchange(options_.algorithm, {}), std::exchange(options_.algorithm_opts, {})});
    route_.store(make_route(MemberSnapshot(), std::move(engine), nullptr));
}

std::shared_ptr<const LoadBalancer::Route> LoadBalancer::make_route(const MemberSnapshot& group,
                                                                    std::shared_ptr<const Engine> engine,
                                                                    const Route* previous) {
    auto members = std::make_shared<MemberSnapshot>(group.nodes, group.version);
    if (outliers_)
        if (const auto ejected = outliers_->ejected(); !ejected.empty())
            std::erase_if(members->nodes, [&](const std::string& node) {
                return std::binary_search(ejected.begin(), ejected.end(), node);
            });
    const auto& nodes = members->nodes;
    members->calls.reserve(nodes.size());
    // Both lists are ascending (MemberSnapshot's contract): one merge walk.
    static const MemberSnapshot none;
    const auto& before = previous ? *previous->members : none;
    std::vector<std::pair<std::string, std::weak_ptr<InFlightCount>>> left;
    std::size_t j = 0;
    for (const auto& node : nodes) {
        for (; j < before.nodes.size() && before.nodes[j] < node; ++j) left.emplace_back(before.nodes[j], before.calls[j]);
        if (j < before.nodes.size() && before.nodes[j] == node)
            members->calls.push_back(before.calls[j++]);
        else
            members->calls.push_back(std::make_shared<InFlightCount>());
    }
    for (; j < before.nodes.size(); ++j) left.emplace_back(before.nodes[j], before.calls[j]);
    {
        std::lock_guard lock(departed_mutex_);
        std::erase_if(departed_, [](const auto& entry) { return entry.second.expired(); });
        for (auto& entry : left) departed_.push_back(std::move(entry));
    }
    return std::make_shared<const Route>(Route{std::move(engine), std::move(members)});
}

LoadBalancer::~LoadBalancer() {
    {
        std::lock_guard lock(ejection_mutex_);
        ejection_timer_.reset();  // cancels the wait; its handler holds the balancer weakly
    }
    if (monitor_id_) node_.groups().demonitor(monitor_id_);
    if (announcement_monitor_id_) node_.groups().demonitor(announcement_monitor_id_);
    // Services' code lives in the algorithm's plugin; they must go before the algorithm
    // drops the last reference to its library.
    services_.clear();
    route_.store(nullptr);
}

LoadBalancerOptions LoadBalancer::options() const {
    auto options = options_;
    const auto engine = route_.load()->engine;
    options.algorithm = engine->name;
    options.algorithm_opts = engine->options;
    if (outliers_) options.outlier_detection = outliers_->options();
    return options;
}

std::string LoadBalancer::algorithm_name() const { return route_.load()->engine->name; }

boost::json::object LoadBalancer::algorithm_options() const { return route_.load()->engine->options; }

boost::json::object LoadBalancer::announcement() const {
    const auto engine = route_.load()->engine;
    const auto outliers = outliers_ ? outliers_->options() : options_.outlier_detection;
    return boost::json::object{{"algorithm", engine->name},
                               {"algorithm_opts", engine->options},
                               {"outlier_detection", detail::to_json(outliers)}};
}

const std::vector<std::shared_ptr<Service>>& LoadBalancer::prepare() {
    if (prepared_) return services_;
    const auto engine = route_.load()->engine;
    const AlgorithmContext context{options_.name, node_.node_name(), host_.get()};
    // The hook running, for the message: "init", "services()" or "local()".
    const char* hook = "init";
    auto failure = [&](const std::string& what) {
        services_.clear();
        return std::runtime_error("balancer " + options_.name + ": algorithm " + engine->name + " " + hook +
                                  " failed" + what);
    };
    try {
        engine->algorithm->init(context, engine->options);
        hook = "services()";
        services_ = engine->algorithm->services();
        hook = "local()";
        local_ = engine->algorithm->local();
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
    // A restart: a fresh instance of the algorithm, initialised again, as at the first
    // start (an algorithm with services keeps its instance: the supervisor restarts those
    // services with it). Built first, so that a failure leaves nothing running.
    std::shared_ptr<const Engine> fresh;
    if (restarted_ && services_.empty()) {
        const auto current = route_.load()->engine;
        bool local = false;
        auto built = build_engine(current->name, current->options, local);
        if (!built) throw std::runtime_error(built.error().message);
        fresh = std::move(*built);
        local_.store(local, std::memory_order_release);
    }
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
    auto& groups = node_.groups();
    monitor_id_ = groups.monitor(options_.name, [this](const std::string&, NodeChange change,
                                                       const std::vector<std::string>& nodes) {
        on_change(change, nodes);
    });
    // A routing-only balancer follows what the members announce (set_algorithm on them).
    if (!hosted_)
        announcement_monitor_id_ = groups.monitor_announcements(
            options_.name, [this](const std::string&, NodeChange, const std::vector<std::string>&) { post_follow(); });
    {
        std::lock_guard lock(publish_mutex_);
        const auto previous = route_.load();
        auto engine = fresh ? std::move(fresh) : previous->engine;
        adopt_group(group_, outliers_.get(), groups.members(options_.name));
        route_.store(make_route(*group_, std::move(engine), previous.get()));
    }
    if (hosted_ && options_.node_match_list.matches(node_.node_name(), node_.excluded_node_patterns())) {
        std::lock_guard lock(announce_mutex_);
        groups.join(options_.name, announcement());
        joined_ = true;
    }
    started_ = true;
    restarted_ = true;
}

void LoadBalancer::stop() noexcept {
    if (!started_) return;
    started_ = false;
    try {
        std::lock_guard lock(announce_mutex_);
        if (joined_.exchange(false)) node_.groups().leave(options_.name);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", warning) << "balancer " << options_.name << ": leaving the group failed: " << e.what();
    }
    // The predecessor's drainer (predecessor-compatibility §4.2): wait for this node's
    // calls through the balancer.
    auto& bus = node_.telemetry();
    const auto began = std::chrono::steady_clock::now();
    Event drain{.name = EventName::drain_begin};
    drain.load_balancer = options_.name;
    auto outstanding = [this] { return in_flight_.load() + serving_.load(); };
    drain.in_flight = outstanding();
    if (bus.active()) bus.emit(drain);
    const auto deadline = began + options_.drain_timeout;
    const bool drained = drained_.wait_until(deadline, [&] { return outstanding() <= 0; });
    if (!drained)
        RPCLB_LOG("balancer", warning) << "balancer " << options_.name << ": " << in_flight_.load()
                                       << " calls sent and " << serving_.load()
                                       << " calls served still running after the drain timeout";
    if (bus.active()) {
        drain.name = EventName::drain_end;
        drain.in_flight = outstanding();
        drain.duration = std::chrono::steady_clock::now() - began;
        drain.outcome = drained ? "drained" : "timeout";
        bus.emit(drain);
    }
    {
        std::lock_guard lock(ejection_mutex_);
        if (ejection_timer_) ejection_timer_->timer.cancel();
    }
    if (!hosted_)
        for (auto it = services_.rbegin(); it != services_.rend(); ++it) (*it)->stop();
    if (monitor_id_) node_.groups().demonitor(std::exchange(monitor_id_, 0));
    if (announcement_monitor_id_) node_.groups().demonitor(std::exchange(announcement_monitor_id_, 0));
}

void LoadBalancer::on_change(NodeChange change, const std::vector<std::string>& nodes) {
    const auto current = node_.groups().members(options_.name);
    std::shared_ptr<const Engine> engine;
    {
        std::lock_guard lock(publish_mutex_);
        const auto previous = route_.load();
        engine = previous->engine;
        adopt_group(group_, outliers_.get(), current);
        route_.store(make_route(*group_, engine, previous.get()));
    }
    // A member that came or went may change what the members announce.
    if (!hosted_) post_follow();
    try {
        engine->algorithm->on_node_change(change, nodes);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": on_node_change threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": on_node_change threw";
    }
}

void LoadBalancer::post_follow() {
    // Loading a plugin and running `init` would hold up the thread delivering group
    // changes: the worker pool does it.
    boost::asio::post(node_.workers(), [weak = weak_from_this()] {
        auto self = weak.lock();
        if (!self) return;
        try {
            self->follow_announcement();
        } catch (const std::exception& e) {  // std::bad_alloc: the next change tries again
            RPCLB_LOG("balancer", error) << "balancer " << self->options_.name << ": cannot follow: " << e.what();
        }
    });
}

void LoadBalancer::follow_announcement() {
    // Read and applied under one lock: of two follows on two workers, the one that reads
    // the newer announcement also applies last.
    std::lock_guard change(change_mutex_);
    auto announced = detail::announced_algorithm(node_.groups(), options_.name);
    if (!announced) return;
    if (outliers_ && !detail::same_outlier_detection(outliers_->options(), announced->outlier_detection)) {
        // The detector starts afresh under the new options: members ejected now return at
        // once, and the failures counted so far are dropped.
        const auto change = outliers_->reconfigure(announced->outlier_detection, std::chrono::steady_clock::now());
        RPCLB_LOG("balancer", info) << "balancer " << options_.name << ": outlier options now "
                                    << boost::json::serialize(detail::to_json(announced->outlier_detection));
        apply_ejections(change);
    }
    {
        const auto engine = route_.load()->engine;
        if (engine->name == announced->algorithm && engine->options == announced->options) return;
    }
    if (auto changed = replace_algorithm(announced->algorithm, announced->options); !changed)
        RPCLB_LOG("balancer", warning) << "balancer " << options_.name << ": cannot follow the announced algorithm "
                                       << announced->algorithm << ": " << changed.error().message;
}

ErrorMessage LoadBalancer::change_error(ErrorCode code, const std::string& algorithm, std::string message) const {
    return ErrorMessage{code, std::move(message),
                        boost::json::object{{"load_balancer", options_.name},
                                            {"algorithm", algorithm},
                                            {"node", node_.node_name()}}};
}

Result<std::shared_ptr<const LoadBalancer::Engine>> LoadBalancer::build_engine(const std::string& algorithm,
                                                                                const boost::json::object& options,
                                                                                bool& local) {
    auto& plugins = node_.plugins();
    auto made = detail::load_algorithm(plugins, node_.telemetry(), algorithm);
    if (!made) {
        if (!plugins.find(algorithm))
            return change_error(ErrorCode::not_found, algorithm,
                                "no plugin for algorithm " + algorithm + " (librpclb_" + algorithm +
                                    ".so) on the plugin path: " + made.error().message);
        return change_error(ErrorCode::bad_request, algorithm, made.error().message);
    }
    auto engine = std::make_shared<Engine>(Engine{std::move(*made), algorithm, options});
    const AlgorithmContext context{options_.name, node_.node_name(), host_.get()};
    const char* hook = "init";
    auto failure = [&](const std::string& what) {
        return change_error(ErrorCode::bad_request, algorithm,
                            "balancer " + options_.name + ": algorithm " + algorithm + " " + hook + " failed" + what);
    };
    try {
        engine->algorithm->init(context, engine->options);
        hook = "services()";
        // Services belong to the balancer's supervision tree, built at start: an algorithm
        // that needs them can't be swapped in (nor one that runs them swapped out).
        if (!engine->algorithm->services().empty())
            return change_error(ErrorCode::bad_request, algorithm,
                                "balancer " + options_.name + ": algorithm " + algorithm +
                                    " runs services, which only start with the balancer: stop the balancer and "
                                    "start it with this algorithm");
        hook = "local()";
        local = engine->algorithm->local();
    } catch (const std::exception& e) {
        return failure(std::string(": ") + e.what());
    } catch (...) {
        return failure(" with an unknown exception");
    }
    return std::shared_ptr<const Engine>(std::move(engine));
}

Result<void> LoadBalancer::set_algorithm(const std::string& algorithm, const boost::json::object& options) {
    std::lock_guard change(change_mutex_);
    return replace_algorithm(algorithm, options);
}

Result<void> LoadBalancer::replace_algorithm(const std::string& algorithm, const boost::json::object& options) {
    const auto old_name = algorithm_name();
    if (!services_.empty())
        return change_error(ErrorCode::bad_request, algorithm,
                            "balancer " + options_.name + ": algorithm " + old_name +
                                " runs services, which only stop with the balancer: stop the balancer and start it "
                                "with the new algorithm");
    bool local = false;
    auto engine = build_engine(algorithm, options, local);
    if (!engine) return engine.error();
    std::shared_ptr<const Route> old;
    {
        std::lock_guard lock(publish_mutex_);
        old = route_.load();
        // make_route copies the snapshot: what the old instance kept in it goes with the old one.
        route_.store(make_route(*group_, std::move(*engine), old.get()));
    }
    local_.store(local, std::memory_order_release);
    old.reset();  // the old instance goes with the last pick that still holds it
    RPCLB_LOG("balancer", info) << "balancer " << options_.name << ": algorithm " << old_name << " replaced by "
                                << algorithm << " " << boost::json::serialize(options);
    if (hosted_) {
        std::lock_guard lock(announce_mutex_);
        if (joined_) node_.groups().join(options_.name, announcement());
    }
    return {};
}

Result<void> LoadBalancer::set_options(const boost::json::object& options) {
    std::lock_guard change(change_mutex_);
    return replace_algorithm(algorithm_name(), options);
}

Result<std::vector<std::string>> LoadBalancer::get_members() const {
    auto snapshot = route_.load()->members;
    if (snapshot->nodes.empty()) return empty_members_error(options_.name);
    return snapshot->nodes;
}

Result<std::string> LoadBalancer::select_node(const PickOptions& options) {
    auto picked = pick(options);
    if (!picked) return picked.error();
    return picked->node();
}

Result<LoadBalancer::Picked> LoadBalancer::pick(const PickOptions& options) {
    auto route = route_.load();
    const auto& snapshot = route->members;
    const Engine& engine = *route->engine;
    // The predecessor's selection events (predecessor-compatibility §5.2), from the
    // dispatch so custom algorithms get them.
    auto& bus = node_.telemetry();
    if (snapshot->nodes.empty()) {
        if (bus.active()) {
            Event e{.name = EventName::node_selected_empty};
            e.algorithm = engine.name;
            e.load_balancer = options_.name;
            bus.emit(e);
        }
        return empty_members_error(options_.name);
    }
    try {
        auto picked = engine.algorithm->choose_from_nodes(*snapshot, options);
        if (!picked) return picked.error();
        if (*picked >= snapshot->nodes.size())
            return algorithm_failure(options_.name, "algorithm " + engine.name +
                                                        " picked an index out of range");
        const auto& node = snapshot->nodes[*picked];
        if (bus.active()) {
            Event e{.name = EventName::node_selected};
            e.members_count = static_cast<std::int64_t>(snapshot->nodes.size());
            e.algorithm = engine.name;
            e.load_balancer = options_.name;
            e.node = node;
            bus.emit(e);
        }
        const std::size_t index = *picked;
        InFlightCount* calls = snapshot->calls[index].get();
        calls->acquire();
        // Aliasing: the pick holds the route (members, algorithm, counts) with no allocation.
        return Picked{std::shared_ptr<const MemberSnapshot>(std::move(route), snapshot.get()), index, calls,
                      engine.algorithm.get(), std::chrono::steady_clock::now()};
    } catch (const std::exception& e) {
        return algorithm_failure(options_.name, "algorithm " + engine.name + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(options_.name, "algorithm " + engine.name + " threw");
    }
}

Result<std::vector<std::string>> LoadBalancer::select_nodes(std::size_t count, const PickOptions& options) {
    const auto route = route_.load();
    const auto& snapshot = route->members;
    const Engine& engine = *route->engine;
    if (snapshot->nodes.empty()) return empty_members_error(options_.name);
    try {
        auto picked = engine.algorithm->choose_nodes(*snapshot, count, options);
        if (!picked) return picked.error();
        const auto size = snapshot->nodes.size();
        if (picked->size() > count)
            return algorithm_failure(options_.name, "algorithm " + engine.name + " picked " +
                                                        std::to_string(picked->size()) + " nodes, more than the " +
                                                        std::to_string(count) + " asked for");
        std::vector<bool> seen(size);
        std::vector<std::string> nodes;
        nodes.reserve(picked->size());
        for (auto i : *picked) {
            if (i >= size)
                return algorithm_failure(options_.name, "algorithm " + engine.name +
                                                            " picked an index out of range");
            if (seen[i])
                return algorithm_failure(options_.name, "algorithm " + engine.name + " picked node " +
                                                            snapshot->nodes[i] + " twice");
            seen[i] = true;
            nodes.push_back(snapshot->nodes[i]);
        }
        return nodes;
    } catch (const std::exception& e) {
        return algorithm_failure(options_.name, "algorithm " + engine.name + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(options_.name, "algorithm " + engine.name + " threw");
    }
}

void LoadBalancer::track(const Picked&) noexcept { in_flight_.fetch_add(1); }

void LoadBalancer::untrack(const Picked& picked) noexcept {
    if (picked.calls) picked.calls->release();
    if (in_flight_.fetch_sub(1) == 1) drained_.wake();
}

void LoadBalancer::tell_release(SelectionAlgorithm& algorithm, const MemberSnapshot& members, std::size_t index,
                                const CallOutcome& outcome) noexcept {
    try {
        algorithm.release(members, index, outcome);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": release threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": release threw";
    }
}

void LoadBalancer::release(const Picked& picked, CallOutcome outcome) noexcept {
    if (picked.calls) picked.calls->release();
    if (picked.algorithm) {
        const auto now = std::chrono::steady_clock::now();
        if (!outcome.latency) outcome.latency = now - picked.at;
        tell_release(*picked.algorithm, *picked.members, picked.index, outcome);
        if (outliers_) {
            try {
                // The route leaves an ejected member out before this release returns, so the
                // caller's next pick cannot reach it; the log lines, events and expiry timer
                // are left to the worker pool.
                if (auto change = outliers_->record(picked.node(), outcome, now); !change.empty()) {
                    {
                        std::lock_guard lock(publish_mutex_);
                        republish();
                    }
                    boost::asio::post(node_.workers(), [weak = weak_from_this(), change = std::move(change)] {
                        auto self = weak.lock();
                        if (!self) return;
                        try {
                            report_ejections(self->node_.telemetry(), self->options_.name, change);
                            if (!change.expiries.empty()) self->arm_ejection_timer();
                        } catch (const std::exception& e) {
                            RPCLB_LOG("balancer", error) << "balancer " << self->options_.name
                                                         << ": ejection failed: " << e.what();
                        }
                    });
                }
            } catch (const std::exception& e) {
                RPCLB_LOG("balancer", error) << "balancer " << options_.name << ": ejection failed: " << e.what();
            }
        }
    }
    if (in_flight_.fetch_sub(1) == 1) drained_.wake();
}

void LoadBalancer::republish() {
    const auto previous = route_.load();
    route_.store(make_route(*group_, previous->engine, previous.get()));
}

void LoadBalancer::apply_ejections(const detail::OutlierChange& change) {
    {
        std::lock_guard lock(publish_mutex_);
        republish();
    }
    report_ejections(node_.telemetry(), options_.name, change);
    if (!change.expiries.empty()) arm_ejection_timer();
}

void LoadBalancer::arm_ejection_timer() {
    std::lock_guard lock(ejection_mutex_);
    const auto next = outliers_->next_expiry();
    if (!next) return;
    if (!ejection_timer_)
        ejection_timer_ = std::make_unique<detail::EjectionTimer>(detail::EjectionTimer{boost::asio::steady_timer(node_.workers())});
    ejection_timer_->timer.expires_at(*next);
    ejection_timer_->timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
        if (ec) return;
        auto self = weak.lock();
        if (!self) return;
        try {
            if (auto back = self->outliers_->expire(std::chrono::steady_clock::now()); !back.empty())
                self->apply_ejections(back);
        } catch (const std::exception& e) {
            RPCLB_LOG("balancer", error) << "balancer " << self->options_.name << ": ejection failed: " << e.what();
        }
        self->arm_ejection_timer();
    });
}

std::vector<std::string> LoadBalancer::ejected() const { return outliers_ ? outliers_->ejected() : std::vector<std::string>{}; }

std::uint64_t LoadBalancer::ejections_refused() const { return outliers_ ? outliers_->refused() : 0; }

LoadBalancer::Picked LoadBalancer::as_picked(std::string_view node) {
    auto route = route_.load();
    const auto& members = *route->members;
    const auto at = std::lower_bound(members.nodes.begin(), members.nodes.end(), node);
    Picked picked;
    if (at != members.nodes.end() && *at == node) {
        picked.index = static_cast<std::size_t>(at - members.nodes.begin());
        picked.calls = members.calls[picked.index].get();
        picked.calls->acquire();
    }
    picked.members = std::shared_ptr<const MemberSnapshot>(std::move(route), &members);
    return picked;
}

std::vector<std::pair<std::string, std::int64_t>> LoadBalancer::in_flight_by_member() const {
    std::map<std::string, std::int64_t, std::less<>> counts;
    {
        const auto route = route_.load();
        const auto& members = *route->members;
        for (std::size_t i = 0; i < members.nodes.size(); ++i)
            if (const auto n = members.in_flight(i); n != 0) counts[members.nodes[i]] += n;
    }
    {
        std::lock_guard lock(departed_mutex_);
        std::erase_if(departed_, [](const auto& entry) { return entry.second.expired(); });
        for (const auto& [node, weak] : departed_)
            if (const auto calls = weak.lock())
                if (const auto n = calls->value(); n != 0) counts[node] += n;
    }
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const auto& [node, n] : counts)
        if (n > 0) out.emplace_back(node, n);
    return out;
}

void LoadBalancer::release_node(std::string_view node, const CallOutcome& outcome) noexcept {
    const auto route = route_.load();
    const auto& members = *route->members;
    const auto at = std::lower_bound(members.nodes.begin(), members.nodes.end(), node);
    if (at == members.nodes.end() || *at != node) return;
    const auto index = static_cast<std::size_t>(at - members.nodes.begin());
    members.calls[index]->release();
    tell_release(*route->engine->algorithm, members, index, outcome);
}

}  // namespace rpclb
