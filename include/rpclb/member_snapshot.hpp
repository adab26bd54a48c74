// The members of a group at one moment, as groups publish them and balancers pick from
// them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rpclb {

namespace detail {
struct CountTable;
struct ReadingTable;

/// A sequence of member indices derived from one snapshot by one algorithm instance
/// (weighted_round_robin's period). `owner` tells instances apart (AlgorithmState::
/// new_owner_id); `order` is immutable once published.
struct IndexSequence {
    std::uint64_t owner = 0;
    std::vector<std::uint32_t> order;
};

/// State that algorithms derive from one MemberSnapshot, kept with the snapshot so that it
/// lives exactly as long as any pick can read it: filled by the first pick that needs it,
/// freed with the snapshot. Copies, moves and assignments start empty (the nodes they come
/// with may differ). Freed by librpclb, so a snapshot may outlive the plugin that filled
/// its cache: what it holds is built by librpclb (AlgorithmState::count_table).
///
/// Thread safety: `counts` is set once with a compare-exchange; safe from any thread.
class SnapshotCache {
public:
    SnapshotCache() = default;
    SnapshotCache(const SnapshotCache&) noexcept {}
    SnapshotCache& operator=(const SnapshotCache&) noexcept;
    ~SnapshotCache();

    /// The call counters of the snapshot's members (least_connections, power_of_two);
    /// nullptr until a pick sets it.
    std::atomic<const std::shared_ptr<const CountTable>*> counts{nullptr};

    /// An index sequence (weighted_round_robin); nullptr until a pick sets it.
    std::atomic<const IndexSequence*> sequence{nullptr};

    /// The load readings of the snapshot's members (least_cpu); nullptr until a pick or a
    /// poller sets it (AlgorithmState::attach_readings).
    std::atomic<const std::shared_ptr<const ReadingTable>*> readings{nullptr};

    /// Stores `made` (allocated with `new`) in `sequence` if that is still empty and
    /// returns it; otherwise deletes `made` and returns what `sequence` holds. Either way
    /// the result lives as long as the snapshot.
    const IndexSequence* adopt(IndexSequence* made) noexcept;
};
}  // namespace detail

/// An immutable view of a balancer's members at one moment: distinct node names in
/// ascending order, and a version that changes whenever the set changes. Algorithms may
/// cache state derived from `nodes` and key it by `version` (seed §10.2), or keep it
/// in `cache`, which dies with the snapshot. A snapshot serves one balancer (a group's
/// snapshots do): the counting algorithms of another balancer picking from it rebuild
/// their table on every pick (correct, but it allocates). Never change `nodes` of a
/// snapshot that has been picked from; make a new one.
struct MemberSnapshot {
    std::vector<std::string> nodes;
    std::uint64_t version = 0;
    /// What picks derived from `nodes` (see detail::SnapshotCache); not part of the value.
    mutable detail::SnapshotCache cache;
};

/// Which way a membership change went.
enum class NodeChange { joined, left };

}  // namespace rpclb
