#include "least_connections.hpp"

#include <algorithm>
#include <array>

namespace rpclb::plugins {

void LeastConnections::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "least_connections", {"failure_penalty", "seed", "test_now_ms"});
    balancer_ = context.balancer;
    draws_.init(options);
    failures_.init(options, "least_connections");
}

namespace {

// The index of the lowest score(i) over [0, size), a uniformly random one of the tied ones
// on a tie. Scores are read once into the buffer so that both passes agree; past its end
// they are read again and may have changed, which at worst finds no tied member in the
// second pass (then the first of the first pass is picked).
template <class Score>
std::size_t lowest(std::size_t size, const Score& score, Draws& draws) noexcept {
    using Value = decltype(score(std::size_t{0}));
    constexpr std::size_t buffered = 64;
    std::array<Value, buffered> buffer;
    Value low = score(0);
    buffer[0] = low;
    std::size_t best = 0, tied = 1;
    const auto visit = [&](std::size_t i, Value s) {
        if (s < low) {
            low = s;
            best = i;
            tied = 1;
        } else if (s == low) {
            ++tied;
        }
    };
    const std::size_t head = std::min(size, buffered);
    for (std::size_t i = 1; i < head; ++i) visit(i, buffer[i] = score(i));
    for (std::size_t i = head; i < size; ++i) visit(i, score(i));
    if (tied == 1) return best;
    const std::size_t nth = scale32(draws.next(), tied);
    if (tied == size) return nth;  // all tie (an idle balancer): no second pass
    std::size_t seen = 0;
    for (std::size_t i = best; i < size; ++i) {
        seen += (i < buffered ? buffer[i] : score(i)) == low;
        if (seen > nth) return i;
    }
    return best;
}

}  // namespace

Result<std::size_t> LeastConnections::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    std::int64_t now = 0;
    if (!failures_.on() || !failures_.recent(now))
        return lowest(size, [&](std::size_t i) { return members.in_flight(i); }, draws_);
    const FailureLoads::Row* loads = nullptr;
    try {
        loads = &failures_.row(members, snapshot_owner());
    } catch (const std::exception&) {
        return state_build_error(balancer_);
    }
    return lowest(
        size,
        [&](std::size_t i) { return static_cast<double>(members.in_flight(i)) + failures_.load(*(*loads)[i], now); },
        draws_);
}

void LeastConnections::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    failures_.record(members, snapshot_owner(), index, outcome);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_connections, rpclb::plugins::LeastConnections)
