#include "least_connections.hpp"

#include <array>
#include <limits>

namespace rpclb::plugins {

void LeastConnections::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "least_connections", {"failure_penalty", "seed", "test_now_ms"});
    balancer_ = context.balancer;
    draws_.init(options);
    failures_.init(options, "least_connections");
}

Result<std::size_t> LeastConnections::choose_from_nodes(const MemberSnapshot& members, const PickOptions&) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    const FailureLoads::Row* loads = nullptr;
    if (failures_.on()) {
        try {
            loads = &failures_.row(members, snapshot_owner());
        } catch (const std::exception&) {
            return state_build_error(balancer_);
        }
    }
    std::int64_t now = 0;
    const auto score = [&](std::size_t i) {
        const double in_flight = static_cast<double>(members.in_flight(i));
        return loads ? in_flight + failures_.load(*(*loads)[i], now) : in_flight;
    };
    // Scores are read once into the buffer so that both passes agree; past its end they
    // are read again and may have changed, which at worst finds no tied member in the
    // second pass (then the first of the first pass is picked).
    constexpr std::size_t buffered = 64;
    std::array<double, buffered> buffer;
    double lowest = std::numeric_limits<double>::infinity();
    std::size_t best = 0, tied = 0;
    for (std::size_t i = 0; i < size; ++i) {
        const double s = score(i);
        if (i < buffered) buffer[i] = s;
        if (s < lowest) {
            lowest = s;
            best = i;
            tied = 1;
        } else if (s == lowest) {
            ++tied;
        }
    }
    if (tied <= 1) return best;
    std::size_t nth = scale32(draws_.next(), tied);
    for (std::size_t i = 0; i < size; ++i)
        if ((i < buffered ? buffer[i] : score(i)) == lowest && nth-- == 0) return i;
    return best;
}

void LeastConnections::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    failures_.record(members, snapshot_owner(), index, outcome);
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_connections, rpclb::plugins::LeastConnections)
