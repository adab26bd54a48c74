// The RoundRobin selection algorithm.
#pragma once

#include <rpclb/detail/block_cursor.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <cstdint>
#include <string>

namespace rpclb::plugins {

/// Picks members in turn (seed §2.2).
///
/// Each pick takes the next value `c` of the balancer's cursor (the first pick of a fresh
/// balancer gets c = 1) and returns index `(c − 1) mod size` of `members.nodes` as given.
/// The cursor belongs to the balancer, not to a member list or an instance: a membership
/// change just re-maps it through the new size, and it is the process-wide
/// `AlgorithmState::cursor(balancer, "rr_cursor")`, so it outlives a restart of the
/// balancer and a new instance on the same name continues where the last one stopped, as
/// the seed's counter does. When a pick gets c > 10,000,000 the cursor starts over
/// at 0 after that pick (the pick itself uses c), as in the seed.
///
/// Across threads (detail::BlockCursor): cursor values are handed to threads in blocks of
/// 64 consecutive values, one shared `fetch_add` per block, and a thread walks its block in
/// order. So:
/// - from one thread, with no other thread picking, a fresh balancer over [a, b, c] picks
///   a, b, c, a, b, c, exactly as one counter would;
/// - with several threads, each thread's picks rotate through the members in turn within
///   its block, and no two picks share a cursor value. The values used so far are 1 …
///   (last value handed out) except the unused rest of each thread's current block, so
///   every member's total is its exact share (picks ÷ size) give or take one, plus what
///   those rests (under 64 values per thread) would have given it. Threads that always
///   finish their blocks give exact totals.
///
/// Differences from the seed, on purpose: no two concurrent picks share a value (the
/// seed's increment and read are two steps and accept duplicates); the order across
/// threads holds per block, not globally (the seed's single counter serialises every pick
/// on one shared word); an empty member list gives `service_unavailable` "no members
/// registered" naming the balancer (§10.6). `choose_nodes` is the default random sample.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned. A pick writes only its thread's own cache line (a shared
/// `fetch_add` once per 64 picks): no lock, no allocation. A thread's first pick claims its
/// thread slot (detail::thread_slot), once; threads beyond the slot count take single
/// values with one shared `fetch_add` per pick.
class RoundRobin final : public SelectionAlgorithm {
public:
    /// Cursor value after which the cursor is reset to 0 (the seed's 10_000_000).
    static constexpr std::uint64_t reset_after = 10'000'000;

    /// Binds the balancer's cursor. Takes no options: throws std::invalid_argument naming
    /// any option given.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the next member in turn; `service_unavailable` when the list is empty
    /// (the cursor doesn't move then).
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

private:
    std::string balancer_;
    detail::BlockCursor* cursor_ = nullptr;  // the balancer's, in AlgorithmState
};

}  // namespace rpclb::plugins
