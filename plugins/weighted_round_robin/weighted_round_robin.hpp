// The WeightedRoundRobin selection algorithm.
#pragma once

#include <rpclb/detail/block_cursor.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// Picks members in turn, each as often as its weight says, spread evenly (seed §2.3
/// as changed by §10.5).
///
/// Option `weights`: a JSON object of node name → integer weight in [0, 1,000,000];
/// default `{}`. A member missing from it weighs 1, so `{}` is plain round robin (a, b, c,
/// a, b, c); weight 0 excludes a member; nodes that aren't members are ignored.
///
/// For each member list the weights are divided by their greatest common divisor and
/// expanded once into a period of sum(weights) picks with nginx's smooth weighted round
/// robin (each step adds every member's weight to its running score, takes the highest
/// score — the earliest member on a tie — and subtracts the period from it). The period
/// holds each member exactly weight times, interleaved: {a: 3, b: 1} gives a a b a, never
/// a a a b. A pick takes the next value `c` of the balancer's cursor (c = 1 for the first
/// pick) and returns entry `(c − 1) mod period`; a membership change re-maps the cursor
/// through the new period. A period longer than 65,536 (only with very large co-prime
/// weights) is scaled down to about that length, keeping every positive weight ≥ 1, and
/// the proportions are then approximate.
///
/// The cursor is the balancer's `AlgorithmState::cursor(balancer, "wrr_cursor")`, so it
/// survives a restart of the balancer, the rest of each thread's block included. It goes
/// back to 0 after the first pick with c ≥ 10,000,000 that ends a period (the seed resets
/// above 10,000,000 wherever it is in the expansion), so the interleaving continues
/// without a seam.
///
/// Across threads the cursor is handed out in blocks (detail::BlockCursor): a thread takes
/// 64 consecutive values with one shared `fetch_add` and walks them in order. From one
/// thread, with no other thread picking, the picks follow the period exactly (weights
/// {a: 3, b: 1}: a a b a a a b a …, 6 a and 2 b in 8 picks). With several threads each
/// thread walks the period in order within its block and no two picks share a value; the
/// values used so far are 1 … (last value handed out) except the unused rest of each
/// thread's current block (under 64 values per thread, plus rests dropped at a reset), so
/// totals keep the exact proportions up to what those rests would have added. Threads
/// that always finish their blocks give exact proportions.
///
/// Differences from the seed, on purpose: interleaving instead of blocks (§10.5);
/// negative, non-integer or all-zero weights are rejected at `init` instead of crashing at
/// pick time (§10.5); members whose weights are all 0 give `service_unavailable` "no member
/// has a positive weight"; an empty member list gives `service_unavailable` "no members
/// registered" (§10.6); no two concurrent picks share a cursor value, and the order across
/// threads holds per block rather than globally. `choose_nodes` is the default random
/// sample.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned. A pick writes only its thread's own cache line (a shared
/// `fetch_add` once per 64 picks) and reads the period, which the first pick on a snapshot
/// builds in O(period × members) and keeps in the snapshot (MemberSnapshot::cache), so it
/// goes with the snapshot: no lock, no allocation. A thread's first
/// pick claims its thread slot (detail::thread_slot), once; threads beyond the slot count
/// take single values with one shared `fetch_add` per pick.
class WeightedRoundRobin final : public SelectionAlgorithm {
public:
    /// The cursor goes back to 0 at the end of the first period reached at this value.
    static constexpr std::uint64_t reset_after = 10'000'000;
    /// Largest accepted weight.
    static constexpr std::uint64_t max_weight = 1'000'000;
    /// Periods longer than this are scaled down.
    static constexpr std::uint64_t max_period = 65'536;

    /// Reads option `weights`; binds the cursor to the balancer's name. Throws
    /// std::invalid_argument naming `weights` when it is not an object, when a weight is not
    /// an integer in [0, max_weight], or when it has weights and all of them are 0.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the next member of the weighted period; `service_unavailable` when the list
    /// is empty or no member has a positive weight (the cursor doesn't move then),
    /// `internal_server_error` when memory ran out rebuilding the period.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

private:
    // One period of member indices; empty when no member has a positive weight.
    using Period = std::vector<std::uint32_t>;

    Period build(std::span<const std::string> nodes) const;
    // The pick over one period: the cursor's next value mapped into it.
    Result<std::size_t> pick_in(const Period& order);

    std::string balancer_;
    std::map<std::string, std::uint64_t, std::less<>> weights_;
    detail::BlockCursor* cursor_ = nullptr;
    std::uint64_t owner_ = detail::new_owner_id();  // marks this instance's periods
    // The period of the last list whose snapshot held another instance's period.
    std::mutex foreign_mutex_;
    std::vector<std::string> foreign_nodes_;  // under foreign_mutex_
    Period foreign_;                          // under foreign_mutex_
};

}  // namespace rpclb::plugins
