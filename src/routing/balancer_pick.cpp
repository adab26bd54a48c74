// A balancer's routes and picks: building the route a pick reads, picking, counting calls
// in flight and releasing them.
#include <rpclb/detail/log.hpp>
#include <rpclb/detail/thread_rng.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include "routing/balancer_impl.hpp"

#include <boost/json/object.hpp>

#include <algorithm>
#include <ctime>
#include <map>
#include <random>
#include <utility>

namespace rpclb {

namespace {

ErrorMessage algorithm_failure(std::string_view balancer, std::string message) {
    return ErrorMessage{ErrorCode::internal_server_error, std::move(message),
                        boost::json::object{{"load_balancer", balancer}}};
}

}  // namespace

std::shared_ptr<const LoadBalancer::Impl::Route> LoadBalancer::Impl::make_route(const MemberSnapshot& members_in,
                                                                                std::shared_ptr<const Engine> engine,
                                                                                const Route* previous) {
    auto members = std::make_shared<MemberSnapshot>(members_in.nodes, members_in.version);
    if (outliers)
        if (const auto ejected = outliers->ejected(); !ejected.empty())
            std::erase_if(members->nodes, [&](const std::string& node) {
                return std::binary_search(ejected.begin(), ejected.end(), node);
            });
    const auto& nodes = members->nodes;
    members->calls.reserve(nodes.size());
    // Slow start: a member new to the route (it joined, or returned from ejection) ramps
    // up from now, once picks have begun; one that stays keeps its ramp until it is over.
    const SlowStart ramp = slow_start;
    const auto now = clock.load()();
    const bool ramp_new = ramp.enabled() && picking.load();
    std::vector<Clock::time_point> since(nodes.size());
    bool ramping = false;
    Clock::time_point ramp_until{};
    auto stamp = [&](std::size_t i, Clock::time_point at) {
        if (at == Clock::time_point{} || !ramp.enabled() || at + ramp.window <= now) return;
        since[i] = at;
        ramping = true;
        ramp_until = std::max(ramp_until, at + ramp.window);
    };
    // Both lists are ascending (MemberSnapshot's contract): one merge walk.
    static const MemberSnapshot none;
    const auto& before = previous ? *previous->members : none;
    std::vector<std::pair<std::string, std::weak_ptr<InFlightCount>>> left;
    std::size_t j = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto& node = nodes[i];
        for (; j < before.nodes.size() && before.nodes[j] < node; ++j) left.emplace_back(before.nodes[j], before.calls[j]);
        if (j < before.nodes.size() && before.nodes[j] == node) {
            if (!previous->since.empty()) stamp(i, previous->since[j]);
            members->calls.push_back(before.calls[j++]);
        } else {
            if (ramp_new) stamp(i, now);
            members->calls.push_back(std::make_shared<InFlightCount>());
        }
    }
    for (; j < before.nodes.size(); ++j) left.emplace_back(before.nodes[j], before.calls[j]);
    {
        std::lock_guard lock(departed_mutex);
        std::erase_if(departed, [](const auto& entry) { return entry.second.expired(); });
        for (auto& entry : left) departed.push_back(std::move(entry));
    }
    if (!ramping) since.clear();
    return std::make_shared<const Route>(Route{std::move(engine), std::move(members), ramp, std::move(since), ramp_until,
                                                hedging.calls, idempotent_functions});
}

LoadBalancer::Impl::Clock::time_point LoadBalancer::Impl::coarse_now() noexcept {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec)));
}

bool LoadBalancer::Impl::keep_pick(const Route& route, std::size_t index, Clock::time_point now) noexcept {
    const auto since = route.since[index];
    if (since == Clock::time_point{}) return true;
    const double share = detail::slow_start_factor(route.slow_start, now - since);
    if (share >= 1.0) return true;
    // The pick path's per-thread generator: no lock, no allocation.
    return std::uniform_real_distribution<double>(0.0, 1.0)(detail::thread_rng()) < share;
}

void LoadBalancer::Impl::republish() {
    const auto previous = route.load();
    route.store(make_route(*group, previous->engine, previous.get()));
}

std::shared_ptr<const MemberSnapshot> LoadBalancer::members() const {
    auto route = impl_->route.load();
    const MemberSnapshot* snapshot = route->members.get();
    return std::shared_ptr<const MemberSnapshot>(std::move(route), snapshot);
}

SelectionAlgorithm& LoadBalancer::algorithm() noexcept { return *impl_->route.load()->engine->algorithm; }

Result<std::vector<std::string>> LoadBalancer::get_members() const {
    auto snapshot = impl_->route.load()->members;
    if (snapshot->nodes.empty()) return empty_members_error(impl_->options.name);
    return snapshot->nodes;
}

Result<std::string> LoadBalancer::select_node(const PickOptions& options) {
    auto picked = pick(options);
    if (!picked) return picked.error();
    return picked->node();
}

Result<LoadBalancer::Picked> LoadBalancer::pick(const PickOptions& options) {
    const auto& name = impl_->options.name;
    auto route = impl_->route.load();
    const auto& snapshot = route->members;
    const Impl::Engine& engine = *route->engine;
    // The predecessor's selection events (predecessor-compatibility §5.2), from the
    // dispatch so custom algorithms get them.
    auto& bus = impl_->node.telemetry();
    if (snapshot->nodes.empty()) {
        if (bus.active()) {
            Event e{.name = EventName::node_selected_empty};
            e.algorithm = engine.name;
            e.load_balancer = name;
            bus.emit(e);
        }
        return empty_members_error(name);
    }
    if (!impl_->picking.load(std::memory_order_relaxed)) impl_->picking.store(true, std::memory_order_relaxed);
    try {
        // The algorithm's pick, checked: an index out of range is the algorithm's failure.
        const auto choose = [&]() -> Result<std::size_t> {
            auto index = engine.algorithm->choose_from_nodes(*snapshot, options);
            if (index && *index >= snapshot->nodes.size())
                return algorithm_failure(name, "algorithm " + engine.name + " picked an index out of range");
            return index;
        };
        auto picked = choose();
        if (!picked) return picked.error();
        // Slow start: a member still ramping up is kept with the probability of its share,
        // else the algorithm picks again (told of the pick it made, with nothing known of a
        // call that never ran); the last of kMaxPicks stands. A keyed pick keeps its member.
        if (!route->since.empty() && !options.key) {
            constexpr int kMaxPicks = 8;
            const auto now = impl_->clock.load(std::memory_order_relaxed)();
            for (int tries = 1; tries < kMaxPicks && now < route->ramp_until; ++tries) {
                if (Impl::keep_pick(*route, *picked, now)) break;
                impl_->tell_release(*engine.algorithm, *snapshot, *picked, CallOutcome{});
                picked = choose();
                if (!picked) return picked.error();
            }
        }
        const auto& node = snapshot->nodes[*picked];
        if (bus.active()) {
            Event e{.name = EventName::node_selected};
            e.members_count = static_cast<std::int64_t>(snapshot->nodes.size());
            e.algorithm = engine.name;
            e.load_balancer = name;
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
        return algorithm_failure(name, "algorithm " + engine.name + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(name, "algorithm " + engine.name + " threw");
    }
}

Result<std::vector<std::string>> LoadBalancer::select_nodes(std::size_t count, const PickOptions& options) {
    const auto& name = impl_->options.name;
    const auto route = impl_->route.load();
    const auto& snapshot = route->members;
    const Impl::Engine& engine = *route->engine;
    if (snapshot->nodes.empty()) return empty_members_error(name);
    try {
        auto picked = engine.algorithm->choose_nodes(*snapshot, count, options);
        if (!picked) return picked.error();
        const auto size = snapshot->nodes.size();
        if (picked->size() > count)
            return algorithm_failure(name, "algorithm " + engine.name + " picked " + std::to_string(picked->size()) +
                                               " nodes, more than the " + std::to_string(count) + " asked for");
        std::vector<bool> seen(size);
        std::vector<std::string> nodes;
        nodes.reserve(picked->size());
        for (auto i : *picked) {
            if (i >= size) return algorithm_failure(name, "algorithm " + engine.name + " picked an index out of range");
            if (seen[i])
                return algorithm_failure(name, "algorithm " + engine.name + " picked node " + snapshot->nodes[i] +
                                                   " twice");
            seen[i] = true;
            nodes.push_back(snapshot->nodes[i]);
        }
        return nodes;
    } catch (const std::exception& e) {
        return algorithm_failure(name, "algorithm " + engine.name + " threw: " + e.what());
    } catch (...) {
        return algorithm_failure(name, "algorithm " + engine.name + " threw");
    }
}

void LoadBalancer::track(const Picked&) noexcept { impl_->in_flight.fetch_add(1); }

void LoadBalancer::untrack(const Picked& picked) noexcept {
    if (picked.calls) picked.calls->release();
    if (impl_->in_flight.fetch_sub(1) == 1) impl_->drained.wake();
}

void LoadBalancer::Impl::tell_release(SelectionAlgorithm& algorithm, const MemberSnapshot& members, std::size_t index,
                                      const CallOutcome& outcome) noexcept {
    try {
        algorithm.release(members, index, outcome);
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options.name << ": release threw: " << e.what();
    } catch (...) {
        RPCLB_LOG("balancer", error) << "balancer " << options.name << ": release threw";
    }
}

void LoadBalancer::release(const Picked& picked, CallOutcome outcome) noexcept {
    if (picked.calls) picked.calls->release();
    if (picked.algorithm) {
        const auto now = std::chrono::steady_clock::now();
        if (!outcome.latency) outcome.latency = now - picked.at;
        impl_->tell_release(*picked.algorithm, *picked.members, picked.index, outcome);
        if (impl_->outliers) impl_->record_outcome(picked, outcome, now);
        // Hedging's delay by default: counted only once a hedged call went through.
        if (outcome.ok() && impl_->hedged_calls.load(std::memory_order_relaxed) != 0)
            impl_->latencies.add(std::chrono::duration_cast<std::chrono::microseconds>(*outcome.latency));
    }
    if (impl_->in_flight.fetch_sub(1) == 1) impl_->drained.wake();
}

LoadBalancer::Picked LoadBalancer::as_picked(std::string_view node) {
    auto route = impl_->route.load();
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
        const auto route = impl_->route.load();
        const auto& members = *route->members;
        for (std::size_t i = 0; i < members.nodes.size(); ++i)
            if (const auto n = members.in_flight(i); n != 0) counts[members.nodes[i]] += n;
    }
    {
        std::lock_guard lock(impl_->departed_mutex);
        std::erase_if(impl_->departed, [](const auto& entry) { return entry.second.expired(); });
        for (const auto& [node, weak] : impl_->departed)
            if (const auto calls = weak.lock())
                if (const auto n = calls->value(); n != 0) counts[node] += n;
    }
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const auto& [node, n] : counts)
        if (n > 0) out.emplace_back(node, n);
    return out;
}

void LoadBalancer::release_node(std::string_view node, const CallOutcome& outcome) noexcept {
    const auto route = impl_->route.load();
    const auto& members = *route->members;
    const auto at = std::lower_bound(members.nodes.begin(), members.nodes.end(), node);
    if (at == members.nodes.end() || *at != node) return;
    const auto index = static_cast<std::size_t>(at - members.nodes.begin());
    members.calls[index]->release();
    impl_->tell_release(*route->engine->algorithm, members, index, outcome);
}

}  // namespace rpclb
