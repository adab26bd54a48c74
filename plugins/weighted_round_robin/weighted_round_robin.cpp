#include "weighted_round_robin.hpp"

#include "../plugin_random.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace rpclb::plugins {

void WeightedRoundRobin::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "weighted_round_robin", {"weights", "start", "load_max_age_ms", "error_penalty"});
    balancer_ = context.balancer;
    weights_.clear();
    reported_ = false;
    load_max_age_ms_ = default_load_max_age_ms;
    error_penalty_ = 1.0;
    const auto* weights = options.if_contains("weights");
    if (weights && weights->is_string()) {
        if (weights->get_string() != "reported")
            throw std::invalid_argument("weights: must be a JSON object of node name -> integer weight or the "
                                        "string \"reported\", got " + boost::json::serialize(*weights));
        reported_ = true;
    }
    if (const auto* age = options.if_contains("load_max_age_ms")) {
        if (!reported_)
            throw std::invalid_argument("load_max_age_ms: applies only with \"weights\": \"reported\"");
        const std::int64_t n = age->is_int64() ? age->get_int64() : -1;
        if (n < 1 || n > 3'600'000)
            throw std::invalid_argument("load_max_age_ms: must be an integer in [1, 3600000], got " +
                                        boost::json::serialize(*age));
        load_max_age_ms_ = n;
    }
    if (const auto* penalty = options.if_contains("error_penalty")) {
        if (!reported_)
            throw std::invalid_argument("error_penalty: applies only with \"weights\": \"reported\"");
        const double x = penalty->is_number() ? penalty->to_number<double>() : -1.0;
        if (!(x >= 0.0 && x <= 1000.0))
            throw std::invalid_argument("error_penalty: must be a number in [0, 1000], got " +
                                        boost::json::serialize(*penalty));
        error_penalty_ = x;
    }
    if (weights && !reported_) {
        if (!weights->is_object())
            throw std::invalid_argument("weights: must be a JSON object of node name -> integer weight or the "
                                        "string \"reported\", got " + boost::json::serialize(*weights));
        bool any_positive = false;
        for (const auto& [node, value] : weights->get_object()) {
            std::uint64_t weight = 0;
            if (value.is_int64() && value.get_int64() >= 0) {
                weight = static_cast<std::uint64_t>(value.get_int64());
            } else if (value.is_uint64()) {
                weight = value.get_uint64();
            } else {
                throw std::invalid_argument("weights: weight of \"" + std::string(node) +
                                            "\" must be an integer >= 0, got " +
                                            boost::json::serialize(value));
            }
            if (weight > max_weight)
                throw std::invalid_argument("weights: weight of \"" + std::string(node) + "\" is " +
                                            std::to_string(weight) + ", more than the largest accepted, " +
                                            std::to_string(max_weight));
            any_positive = any_positive || weight > 0;
            weights_.emplace(std::string(node), weight);
        }
        if (!weights_.empty() && !any_positive)
            throw std::invalid_argument("weights: every weight is 0; at least one must be positive");
    }
    cursor_.store(cursor_start(options), std::memory_order_relaxed);
}

WeightedRoundRobin::Period WeightedRoundRobin::build(std::span<const std::string> nodes) const {
    std::vector<std::uint64_t> weight(nodes.size());
    std::uint64_t divisor = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        auto it = weights_.find(nodes[i]);
        weight[i] = it == weights_.end() ? 1 : it->second;
        divisor = std::gcd(divisor, weight[i]);
    }
    if (divisor == 0) return {};  // every member weighs 0

    std::uint64_t period = 0;
    for (auto& w : weight) period += (w /= divisor);
    if (period > max_period) {
        // w ≤ max_weight, so w × max_period fits easily in 64 bits.
        std::uint64_t scaled = 0;
        for (auto& w : weight) {
            if (w > 0) w = std::max<std::uint64_t>(1, w * max_period / period);
            scaled += w;
        }
        period = scaled;
    }

    // nginx's smooth weighted round robin, run for one period.
    Period order;
    order.reserve(period);
    std::vector<std::int64_t> score(nodes.size(), 0);
    for (std::uint64_t step = 0; step < period; ++step) {
        std::size_t best = nodes.size();
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            if (weight[i] == 0) continue;
            score[i] += static_cast<std::int64_t>(weight[i]);
            if (best == nodes.size() || score[i] > score[best]) best = i;
        }
        score[best] -= static_cast<std::int64_t>(period);
        order.push_back(static_cast<std::uint32_t>(best));
    }
    return order;
}

const WeightedRoundRobin::MemberStats* WeightedRoundRobin::member_stats(const MemberSnapshot& members) const noexcept {
    try {
        return &members.state<MemberStats>(snapshot_owner(), [&] { return MemberStats(members.nodes.size()); });
    } catch (...) {
        return nullptr;
    }
}

void WeightedRoundRobin::count_success(const MemberStats& stats, std::size_t index) noexcept {
    stats.members[index].completed.fetch_add(1, std::memory_order_relaxed);
    const auto window = stats.window();
    if (stats.completed.fetch_add(1, std::memory_order_relaxed) % window != window - 1) return;
    // This success closed a window: each member's share of its successes, averaged with
    // the share before. Only this caller closes this window; a success counted meanwhile
    // goes to this window or the next, which moves a share by one call.
    double share_sum = 0.0;
    std::size_t shares = 0;
    for (const auto& member : stats.members) {
        const double fresh = static_cast<double>(member.completed.exchange(0, std::memory_order_relaxed)) /
                             static_cast<double>(window);
        const double before = member.share.load(std::memory_order_relaxed);
        const double share = before > 0.0 ? 0.5 * (before + fresh) : fresh;
        member.share.store(share, std::memory_order_relaxed);
        if (share > 0.0) {
            share_sum += share;
            ++shares;
        }
    }
    stats.mean_share.store(shares ? share_sum / static_cast<double>(shares) : 1.0, std::memory_order_relaxed);
}

void WeightedRoundRobin::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    if (!reported_) return;
    const auto* stats = member_stats(members);
    if (!stats || index >= stats->members.size()) return;
    // A moving average over about the last 10 calls: each outcome moves it a tenth of
    // the way to 1 (failed) or 0 (succeeded).
    constexpr double step = 0.1;
    const double target = outcome.ok() ? 0.0 : 1.0;
    auto& rate = stats->members[index].error_rate;
    double now = rate.load(std::memory_order_relaxed);
    while (!rate.compare_exchange_weak(now, now + step * (target - now), std::memory_order_relaxed)) {
    }
    if (outcome.ok()) count_success(*stats, index);
}

Result<std::size_t> WeightedRoundRobin::choose_by_reported_load(const MemberSnapshot& members) {
    const auto* loads = reported_loads(members);
    const auto* stats = member_stats(members);
    if (!loads || !stats) return state_build_error(balancer_);
    const auto n = members.nodes.size();
    // A member's rate is its share of this node's recent successes; one with no share yet
    // counts the mean share of those with one (1 when none has: weights 1 ÷ utilization),
    // kept by the window that set the shares.
    const double mean_share = stats->mean_share.load(std::memory_order_relaxed);
    // Two passes over the members' records (no copy, so no allocation): the first sums
    // the known weights for the mean that unknown members get, the second finds the
    // member whose share holds this pick's point. A report that changes between the
    // passes moves the point by a little; the pick is still a member.
    const auto now = load_clock_ms();
    const auto weight_of = [&](std::size_t i) -> std::optional<double> {
        const auto& member = stats->members[i];
        if (auto report = (*loads)[i]->read(now, load_max_age_ms_)) {
            const double share = member.share.load(std::memory_order_relaxed);
            return (share > 0.0 ? share : mean_share) *
                   load_weight(*report, member.error_rate.load(std::memory_order_relaxed), error_penalty_);
        }
        return std::nullopt;
    };
    double known_sum = 0.0;
    std::size_t known = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (auto w = weight_of(i)) {
            known_sum += *w;
            ++known;
        }
    }
    const double unknown_weight = known ? known_sum / static_cast<double>(known) : 1.0;
    const double total = known_sum + unknown_weight * static_cast<double>(n - known);
    // frac(k × φ): the golden ratio's Weyl sequence spreads consecutive picks over [0, 1)
    // more evenly than any other step (three-distance theorem).
    // In 64-bit fixed point, frac(φ) × 2^64 is this constant and the product's wrap-around
    // is exactly the fraction; its top 53 bits make a double in [0, 1).
    constexpr std::uint64_t phi_fraction = 0x9E3779B97F4A7C15u;
    const auto k = cursor_.fetch_add(1, std::memory_order_relaxed);
    double point = static_cast<double>((k * phi_fraction) >> 11) * 0x1p-53 * total;
    for (std::size_t i = 0; i < n; ++i) {
        point -= weight_of(i).value_or(unknown_weight);
        if (point < 0.0) return i;
    }
    return n - 1;  // rounding, or a report that grew between the passes
}

Result<std::size_t> WeightedRoundRobin::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    if (members.nodes.empty()) return empty_members_error(balancer_);
    if (reported_) return choose_by_reported_load(members);
    const Period* order = nullptr;
    try {
        order = &members.state<Period>(snapshot_owner(), [&] { return build(members.nodes); });
    } catch (const std::exception&) {
        return state_build_error(balancer_);
    }
    if (order->empty())
        return ErrorMessage{ErrorCode::service_unavailable, "no member has a positive weight",
                            boost::json::object{{"load_balancer", balancer_}}};
    return (*order)[cursor_.fetch_add(1, std::memory_order_relaxed) % order->size()];
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(weighted_round_robin, rpclb::plugins::WeightedRoundRobin)
