#include "peak_ewma.hpp"

#include <algorithm>
#include <cmath>

namespace rpclb::plugins {

void PeakEwma::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "peak_ewma", {"decay", "failure_penalty", "seed", "test_now_ms"});
    balancer_ = context.balancer;
    decay_ = std::chrono::milliseconds(ms_option(options, "peak_ewma", "decay", 10'000, 1));
    failure_penalty_ = std::chrono::milliseconds(ms_option(options, "peak_ewma", "failure_penalty", 1'000, 0));
    draws_.init(options);
    clock_.init(options, "peak_ewma");
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
        costs = &costs_.of(members, snapshot_owner());
    } catch (const std::exception&) {
        return state_build_error(balancer_);
    }
    const auto [a, b] = draws_.two(size);
    const std::int64_t now = clock_.now_ns();
    const double score_a = cost(*(*costs)[a], now) * static_cast<double>(members.in_flight(a) + 1);
    const double score_b = cost(*(*costs)[b], now) * static_cast<double>(members.in_flight(b) + 1);
    return score_a <= score_b ? a : b;
}

void PeakEwma::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    const bool failed = counted_failure(outcome) && failure_penalty_.count() > 0;
    // A refusal while draining or a cancellation ended before the member served: its time
    // says nothing of the member's speed.
    if (outcome.error && outcome.origin == ErrorOrigin::none) return;
    if (!outcome.latency && !failed) return;
    const Costs* costs = nullptr;
    try {
        costs = &costs_.of(members, snapshot_owner());
    } catch (const std::exception&) {
        return;
    }
    if (index >= costs->size()) return;
    Cost& member = *(*costs)[index];
    // A counted failure costs like a response that took at least failure_penalty.
    double sample = outcome.latency ? static_cast<double>(outcome.latency->count()) : 0.0;
    if (failed) sample = std::max(sample, static_cast<double>(failure_penalty_.count()));
    const std::int64_t now = clock_.now_ns();
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
    const auto member = costs_.find(node);
    return member ? member->ns.load(std::memory_order_relaxed) : 0;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(peak_ewma, rpclb::plugins::PeakEwma)
