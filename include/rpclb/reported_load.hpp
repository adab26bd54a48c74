// Reading the load members report, from a selection algorithm's pick (header-only). A
// plugin that uses it declares capability::reported_load and capability::snapshot_state.
#pragma once

#include <rpclb/member_snapshot.hpp>
#include <rpclb/node_load.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace rpclb {

/// How long a member's report counts, by default: a member that has not answered a call
/// or a probe for this long has unknown load (10 s, least_cpu's `ttl`).
inline constexpr std::int64_t default_load_max_age_ms = 10'000;

/// The NodeLoad records of `members`, index-aligned with `members.nodes`: looked up by the
/// first call on a snapshot (one lock, one allocation), then the same table for the
/// snapshot's life with no lock. nullptr when that first look-up could not allocate.
/// Every algorithm instance that calls it shares the table of a snapshot (it is kept
/// under an owner of its own, not the algorithm's snapshot_owner()).
///
/// Thread safety: shared snapshots safe.
inline const NodeLoadTable* reported_loads(const MemberSnapshot& members) noexcept {
    static const std::uint64_t owner = new_snapshot_owner();
    try {
        return &members.state<NodeLoadTable>(owner, [&] { return NodeLoads::instance().of(members.nodes); });
    } catch (...) {
        return nullptr;
    }
}

/// Member `i`'s last report, if one arrived within `max_age_ms` of `now_ms` (steady
/// milliseconds: load_clock_ms()); nullopt when its load is unknown. No lock; allocates
/// only on a snapshot's first call (reported_loads()).
inline std::optional<LoadReport> reported_load(const MemberSnapshot& members, std::size_t i, std::int64_t now_ms,
                                               std::int64_t max_age_ms = default_load_max_age_ms) noexcept {
    const auto* table = reported_loads(members);
    if (!table || i >= table->size()) return std::nullopt;
    return (*table)[i]->read(now_ms, max_age_ms);
}

/// The weight of a member by its report, after gRPC's weighted round robin (proposal A58),
/// per unit of rate: 1 ÷ (utilization + error_penalty × error_rate). The report carries
/// no rate; an algorithm that measures one (weighted_round_robin counts its successes per
/// member) multiplies by it.
/// The denominator is held at `min_utilization` or more, so an idle member weighs at most
/// 1 ÷ min_utilization (100 by default) instead of infinity.
inline double load_weight(const LoadReport& report, double error_rate = 0.0, double error_penalty = 1.0,
                          double min_utilization = 0.01) noexcept {
    return 1.0 / std::max(report.utilization() + error_penalty * error_rate, min_utilization);
}

}  // namespace rpclb
