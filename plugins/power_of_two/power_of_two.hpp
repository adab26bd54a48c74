// The PowerOfTwo selection algorithm ("power of two random choices").
#pragma once

#include <rpclb/detail/connection_counts.hpp>

#include <atomic>
#include <cstdint>

namespace rpclb::plugins {

/// Draws two distinct members at random and picks the one with fewer calls in flight
/// (seed §2.5): A when count(A) ≤ count(B), else B. A single member is always picked.
/// The pick counts one more call on the chosen member. Counts, their release and their
/// reset when a member leaves are those of every counting algorithm
/// (detail::CountingAlgorithm), shared with least_connections on the same balancer name.
///
/// Option `seed` (integer ≥ 0, default: none): draw from a deterministic generator seeded
/// with it instead of a per-thread one, so tests can repeat a sequence of picks. The seeded
/// generator is one atomic counter shared by the instance's threads (splitmix64 of the
/// counter), so picks stay lock-free but every pick writes that counter; leave it unset in
/// production. Without `seed`, each thread draws from its own splitmix64 generator seeded
/// from std::random_device.
///
/// Both members come from one 64-bit draw (each 32-bit half scaled to its range by a
/// multiply and shift; the bias, under size / 2³², is far below any test's resolution).
///
/// Differences from the seed, on purpose: counts never go below zero (§10.4); an empty
/// member list gives `service_unavailable` "no members registered" naming the balancer
/// (§10.6). `choose_nodes` is the default random sample and counts nothing.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// A pick is one draw, a read of two members' counts and one `fetch_add`. No lock, no
/// allocation (the first pick on a new snapshot builds its count table).
class PowerOfTwo final : public detail::CountingAlgorithm {
public:
    /// Binds the counts to the balancer's name and reads option `seed`. Throws
    /// std::invalid_argument naming `seed` when it is not an integer ≥ 0.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the less loaded of two distinct random members (the first drawn on a tie),
    /// counted as one more call in flight; `service_unavailable` when the list is empty,
    /// `internal_server_error` when memory ran out rebuilding the counter table.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

private:
    std::uint64_t draw() noexcept;

    bool seeded_ = false;
    std::atomic<std::uint64_t> seeded_state_{0};
};

}  // namespace rpclb::plugins
