// The RoundRobin selection algorithm.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstdint>
#include <string>

namespace rpclb::plugins {

/// Picks members in turn (reference §2.2).
///
/// Each pick takes the next value `c` of a cursor (the first pick of a fresh instance
/// gets c = 1) and returns index `(c − 1) mod size` of `members.nodes` as given, so a
/// fresh instance over [a, b, c] picks a, b, c, a, b, c. The cursor belongs to the
/// balancer, not to a member list: a membership change just re-maps it through the new
/// size. When a pick gets c > 10,000,000 the cursor goes back to 0 after that pick (the
/// pick itself uses c), as in the seed.
///
/// Differences from the seed, on purpose: the increment and read are one `fetch_add`, so
/// concurrent picks never share a value (the seed accepts duplicates); the cursor lives
/// in the instance, so it starts over when the balancer restarts; an empty member list
/// gives `service_unavailable` "no members registered" naming the balancer (§10.6).
/// `choose_nodes` is the default random sample.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned. A pick is one atomic add: no lock, no allocation.
class RoundRobin final : public SelectionAlgorithm {
public:
    /// Cursor value after which the cursor is reset to 0 (the seed's 10_000_000).
    static constexpr std::uint64_t reset_after = 10'000'000;

    /// Remembers the balancer's name for errors. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the next member in turn; `service_unavailable` when the list is empty
    /// (the cursor doesn't move then).
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

private:
    std::string balancer_;
    // On its own cache line: every pick on every thread writes it.
    alignas(64) std::atomic<std::uint64_t> cursor_{0};
};

}  // namespace rpclb::plugins
