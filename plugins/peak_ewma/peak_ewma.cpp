#include "peak_ewma.hpp"

#include <boost/json/serialize.hpp>

#include <time.h>

#include <cmath>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

constexpr std::int64_t max_ms = 86'400'000;

std::chrono::milliseconds ms_option(const boost::json::object& options, std::string_view key,
                                    std::chrono::milliseconds fallback, std::int64_t min) {
    const auto* v = options.if_contains(key);
    if (!v) return fallback;
    const bool ok = (v->is_int64() && v->get_int64() >= min && v->get_int64() <= max_ms) ||
                    (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(max_ms) &&
                     static_cast<std::int64_t>(v->get_uint64()) >= min);
    if (!ok)
        throw std::invalid_argument("peak_ewma: option " + std::string(key) + " must be an integer of milliseconds in " +
                                    std::to_string(min) + " .. " + std::to_string(max_ms) + ", got " +
                                    boost::json::serialize(*v));
    return std::chrono::milliseconds(v->to_number<std::int64_t>());
}

// steady_clock's clock at tick resolution (a few ms behind at most, against a decay of
// seconds): several times cheaper to read on the pick path.
std::int64_t now_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void PeakEwma::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "peak_ewma", {"decay", "failure_penalty", "seed"});
    balancer_ = context.balancer;
    decay_ = ms_option(options, "decay", std::chrono::milliseconds(10'000), 1);
    failure_penalty_ = ms_option(options, "failure_penalty", std::chrono::milliseconds(1'000), 0);
    draws_.init(options);
}

const PeakEwma::Costs& PeakEwma::costs_of(const MemberSnapshot& members) {
    return members.state<Costs>(snapshot_owner(), [&] {
        Costs costs;
        costs.reserve(members.nodes.size());
        std::lock_guard lock(mutex_);
        // Names that left no snapshot holds any more go, so the map stays bounded by the
        // members the balancer has now.
        std::erase_if(by_name_, [](const auto& entry) { return entry.second.use_count() == 1; });
        for (const auto& node : members.nodes) {
            auto& held = by_name_[node];
            if (!held) held = std::make_shared<Cost>();
            costs.push_back(held);
        }
        return costs;
    });
}

double PeakEwma::cost(const Cost& member, std::int64_t now) const noexcept {
    const double ns = member.ns.load(std::memory_order_relaxed);
    if (ns <= 0) return mean_ns_.load(std::memory_order_relaxed);
    // Decayed since the last sample, as if samples of 0 had come: a member nobody picks
    // any more (because it was slow) looks cheaper over time until a pick tries it again.
    const std::int64_t elapsed = now - member.at_ns.load(std::memory_order_relaxed);
    if (elapsed <= 0) return ns;
    const double x = static_cast<double>(elapsed) / static_cast<double>(decay_.count());
    return ns * (x < 0.01 ? 1 - x : std::exp(-x));  // 1 − x is e^−x within 5e-5 there
}

Result<std::size_t> PeakEwma::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (size == 1) return std::size_t{0};
    const Costs* costs = nullptr;
    try {
        costs = &costs_of(members);
    } catch (const std::exception&) {
        return state_build_error(balancer_);
    }
    const auto [a, b] = draws_.two(size);
    const std::int64_t now = now_ns();
    const double score_a = cost(*(*costs)[a], now) * static_cast<double>(members.in_flight(a) + 1);
    const double score_b = cost(*(*costs)[b], now) * static_cast<double>(members.in_flight(b) + 1);
    return score_a <= score_b ? a : b;
}

void PeakEwma::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    if (!outcome.latency) return;
    const Costs* costs = nullptr;
    try {
        costs = &costs_of(members);
    } catch (const std::exception&) {
        return;
    }
    if (index >= costs->size()) return;
    Cost& member = *(*costs)[index];
    double sample = static_cast<double>(outcome.latency->count());
    if (outcome.origin == ErrorOrigin::local)
        sample = std::max(sample, static_cast<double>(failure_penalty_.count()));
    const std::int64_t now = now_ns();
    const std::int64_t last = member.at_ns.exchange(now, std::memory_order_relaxed);
    const double elapsed = last == 0 ? 0.0 : static_cast<double>(std::max<std::int64_t>(0, now - last));
    const double keep = std::exp(-elapsed / static_cast<double>(decay_.count()));
    double before = member.ns.load(std::memory_order_relaxed);
    double after = 0;
    do {
        // The peak replaces the decayed cost; a lower sample is averaged into it.
        const double decayed = before * keep;
        after = before == 0 || sample > decayed ? sample : decayed + sample * (1 - keep);
    } while (!member.ns.compare_exchange_weak(before, after, std::memory_order_relaxed));
    // The mean that newcomers get: a moving average over every member's samples, written
    // only when it moves by more than an eighth (a write every release would be a cache
    // line that every releasing thread fights over).
    const double mean = mean_ns_.load(std::memory_order_relaxed);
    const double next = mean + (after - mean) / 16;
    if (std::abs(next - mean) * 8 > mean) mean_ns_.store(next, std::memory_order_relaxed);
}

double PeakEwma::cost_of(const std::string& node) {
    std::lock_guard lock(mutex_);
    const auto it = by_name_.find(node);
    return it == by_name_.end() ? 0 : it->second->ns.load(std::memory_order_relaxed);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(peak_ewma, rpclb::plugins::PeakEwma)
