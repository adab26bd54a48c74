#include <rpclb/detail/log.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include "routing/balancer_host.hpp"
#include "routing/balancer_impl.hpp"
#include "routing/hedging_options.hpp"
#include "routing/outlier_detector.hpp"
#include "routing/outlier_options.hpp"
#include "routing/slow_start.hpp"

#include <boost/json/object.hpp>

#include <utility>

// The balancer's lifecycle (prepare, start, stop) and what it follows of its group. Picks
// and releases: balancer_pick.cpp; ejections: balancer_ejection.cpp; algorithm changes:
// balancer_swap.cpp.

namespace rpclb {

LoadBalancer::Impl::Impl(LoadBalancer& owner, detail::ClusterLink& link, LoadBalancerOptions opts,
                         std::shared_ptr<SelectionAlgorithm> algorithm, bool is_hosted)
    : self(owner),
      node(link),
      host(std::make_unique<detail::BalancerHost>(link, owner)),
      options(std::move(opts)),
      hosted(is_hosted) {
    slow_start = options.slow_start;
    adopt_hedging(options.hedging);
    // A routing-only balancer keeps a detector even with detection off: the options its
    // members announce may turn it on (follow_announcement).
    if (options.outlier_detection.enabled() || !hosted)
        outliers = std::make_unique<detail::OutlierDetector>(options.outlier_detection);
    group = std::make_shared<const MemberSnapshot>();
    auto engine = std::make_shared<Engine>(
        Engine{std::move(algorithm), std::exchange(options.algorithm, {}), std::exchange(options.algorithm_opts, {})});
    route.store(make_route(MemberSnapshot(), std::move(engine), nullptr));
}

LoadBalancer::Impl::~Impl() {
    {
        std::lock_guard lock(ejection_mutex);
        ejection_timer.reset();  // cancels the wait; its handler holds the balancer weakly
    }
    if (monitor_id) node.groups().demonitor(monitor_id);
    if (announcement_monitor_id) node.groups().demonitor(announcement_monitor_id);
    // Services' code lives in the algorithm's plugin; they must go before the algorithm
    // drops the last reference to its library.
    services.clear();
    route.store(nullptr);
}

LoadBalancer::LoadBalancer(detail::ClusterLink& node, LoadBalancerOptions options,
                           std::shared_ptr<SelectionAlgorithm> algorithm, bool hosted)
    : impl_(std::make_unique<Impl>(*this, node, std::move(options), std::move(algorithm), hosted)) {}

LoadBalancer::~LoadBalancer() = default;

std::string LoadBalancer::name() const { return impl_->options.name; }

bool LoadBalancer::joined() const noexcept { return impl_->joined.load(); }

bool LoadBalancer::hosted() const noexcept { return impl_->hosted; }

bool LoadBalancer::local() const noexcept { return impl_->local.load(std::memory_order_acquire); }

std::int64_t LoadBalancer::in_flight() const noexcept { return impl_->in_flight.load(); }

std::int64_t LoadBalancer::serving() const noexcept { return impl_->serving.load(); }

void LoadBalancer::track_served() noexcept { impl_->serving.fetch_add(1); }

void LoadBalancer::release_served() noexcept {
    if (impl_->serving.fetch_sub(1) == 1) impl_->drained.wake();
}

LoadBalancerOptions LoadBalancer::options() const {
    auto options = impl_->options;
    const auto route = impl_->route.load();
    const auto& engine = route->engine;
    options.algorithm = engine->name;
    options.algorithm_opts = engine->options;
    options.slow_start = route->slow_start;
    options.hedging = impl_->hedging_policy();
    if (impl_->outliers) options.outlier_detection = impl_->outliers->options();
    return options;
}

std::string LoadBalancer::algorithm_name() const { return impl_->route.load()->engine->name; }

boost::json::object LoadBalancer::algorithm_options() const { return impl_->route.load()->engine->options; }

boost::json::object LoadBalancer::announcement() const {
    const auto route = impl_->route.load();
    const auto& engine = route->engine;
    const auto outliers = impl_->outliers ? impl_->outliers->options() : impl_->options.outlier_detection;
    const auto hedging = impl_->hedging_policy();
    return boost::json::object{{"algorithm", engine->name},
                               {"algorithm_opts", engine->options},
                               {"outlier_detection", detail::to_json(outliers)},
                               {"slow_start", detail::to_json(route->slow_start)},
                               {"hedging", detail::to_json(hedging)}};
}

const std::vector<std::shared_ptr<Service>>& LoadBalancer::prepare() {
    auto& m = *impl_;
    if (m.prepared) return m.services;
    const auto engine = m.route.load()->engine;
    const AlgorithmContext context{m.options.name, m.node.node_name(), m.host.get()};
    // The hook running, for the message: "init", "services()" or "local()".
    const char* hook = "init";
    auto failure = [&](const std::string& what) {
        m.services.clear();
        return std::runtime_error("balancer " + m.options.name + ": algorithm " + engine->name + " " + hook +
                                  " failed" + what);
    };
    try {
        engine->algorithm->init(context, engine->options);
        hook = "services()";
        m.services = engine->algorithm->services();
        hook = "local()";
        m.local = engine->algorithm->local();
    } catch (const std::exception& e) {
        throw failure(std::string(": ") + e.what());
    } catch (...) {
        throw failure(" with an unknown exception");
    }
    m.prepared = true;
    return m.services;
}

void LoadBalancer::start() {
    auto& m = *impl_;
    if (m.started) return;
    prepare();
    // A restart: a fresh instance of the algorithm, initialised again, as at the first
    // start (an algorithm with services keeps its instance: the supervisor restarts those
    // services with it). Built first, so that a failure leaves nothing running.
    std::shared_ptr<const Impl::Engine> fresh;
    if (m.restarted && m.services.empty()) {
        const auto current = m.route.load()->engine;
        bool local = false;
        auto built = m.build_engine(current->name, current->options, local);
        if (!built) throw std::runtime_error(built.error().message);
        fresh = std::move(*built);
        m.local.store(local, std::memory_order_release);
    }
    // A routing-only balancer has no supervisor: its services (e.g. the least_cpu poller,
    // whose readings its picks need) are its own to run.
    std::size_t started = 0;
    try {
        if (!m.hosted)
            for (; started < m.services.size(); ++started) m.services[started]->start();
    } catch (const std::exception& e) {
        while (started > 0) m.services[--started]->stop();
        throw std::runtime_error("balancer " + m.options.name + ": service failed to start: " + e.what());
    } catch (...) {
        while (started > 0) m.services[--started]->stop();
        throw std::runtime_error("balancer " + m.options.name + ": service failed to start");
    }
    auto& groups = m.node.groups();
    m.monitor_id = groups.monitor(m.options.name, [&m](const std::string&, NodeChange change,
                                                       const std::vector<std::string>& nodes) {
        m.on_change(change, nodes);
    });
    // A routing-only balancer follows what the members announce (set_algorithm on them).
    if (!m.hosted)
        m.announcement_monitor_id = groups.monitor_announcements(
            m.options.name, [&m](const std::string&, NodeChange, const std::vector<std::string>&) { m.post_follow(); });
    detail::OutlierChange ended;
    {
        std::lock_guard lock(m.publish_mutex);
        const auto previous = m.route.load();
        auto engine = fresh ? std::move(fresh) : previous->engine;
        ended = m.adopt_group(groups.members(m.options.name));
        m.route.store(m.make_route(*m.group, std::move(engine), previous.get()));
    }
    if (!ended.returned.empty()) m.report_ejections(ended);
    if (m.hosted && m.options.node_match_list.matches(m.node.node_name(), m.node.excluded_node_patterns())) {
        std::lock_guard lock(m.announce_mutex);
        groups.join(m.options.name, announcement());
        m.joined = true;
    }
    m.started = true;
    m.restarted = true;
}

void LoadBalancer::stop() noexcept {
    auto& m = *impl_;
    if (!m.started) return;
    m.started = false;
    try {
        std::lock_guard lock(m.announce_mutex);
        if (m.joined.exchange(false)) m.node.groups().leave(m.options.name);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", warning) << "balancer " << m.options.name << ": leaving the group failed: " << e.what();
    }
    // The predecessor's drainer (predecessor-compatibility §4.2): wait for this node's
    // calls through the balancer.
    auto& bus = m.node.telemetry();
    const auto began = std::chrono::steady_clock::now();
    Event drain{.name = EventName::drain_begin};
    drain.load_balancer = m.options.name;
    auto outstanding = [&m] { return m.in_flight.load() + m.serving.load(); };
    drain.in_flight = outstanding();
    if (bus.active()) bus.emit(drain);
    const auto deadline = began + m.options.drain_timeout;
    const bool drained = m.drained.wait_until(deadline, [&] { return outstanding() <= 0; });
    if (!drained)
        RPCLB_LOG("balancer", warning) << "balancer " << m.options.name << ": " << m.in_flight.load()
                                       << " calls sent and " << m.serving.load()
                                       << " calls served still running after the drain timeout";
    if (bus.active()) {
        drain.name = EventName::drain_end;
        drain.in_flight = outstanding();
        drain.duration = std::chrono::steady_clock::now() - began;
        drain.outcome = drained ? "drained" : "timeout";
        bus.emit(drain);
    }
    m.cancel_ejection_timer();
    if (!m.hosted)
        for (auto it = m.services.rbegin(); it != m.services.rend(); ++it) (*it)->stop();
    if (m.monitor_id) m.node.groups().demonitor(std::exchange(m.monitor_id, 0));
    if (m.announcement_monitor_id) m.node.groups().demonitor(std::exchange(m.announcement_monitor_id, 0));
}

detail::OutlierChange LoadBalancer::Impl::adopt_group(std::shared_ptr<const MemberSnapshot> current) {
    group = std::move(current);
    if (!outliers) return {};
    return outliers->set_members(group->nodes, node.groups().incarnations(group->nodes),
                                 std::chrono::steady_clock::now());
}

void LoadBalancer::Impl::on_change(NodeChange change, const std::vector<std::string>& nodes) {
    const auto current = node.groups().members(options.name);
    std::shared_ptr<const Engine> engine;
    detail::OutlierChange ended;
    {
        std::lock_guard lock(publish_mutex);
        const auto previous = route.load();
        engine = previous->engine;
        ended = adopt_group(current);
        route.store(make_route(*group, engine, previous.get()));
    }
    // A member back as a new incarnation: its ejection ended.
    if (!ended.returned.empty()) report_ejections(ended);
    // A member that came or went may change what the members announce.
    if (!hosted) post_follow();
    try {
        engine->algorithm->on_node_change(change, nodes);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options.name << ": on_node_change threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options.name << ": on_node_change threw";
    }
}

}  // namespace rpclb
