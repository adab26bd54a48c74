// The Maglev selection algorithm (Maglev consistent hashing).
#pragma once

#include "../plugin_random.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::plugins {

/// A Maglev lookup table (Eisenbud et al., NSDI 2016): `size` (a prime) entries, each the
/// index of a member, filled by the members in turn, each taking the next free entry of its
/// own permutation (offset h1(name) mod size, skip h2(name) mod (size − 1) + 1). Members
/// are filled in name order, so the table depends on the member set, not on list order.
/// Every member gets ⌊size / members⌋ or one more entries.
///
/// Thread safety: immutable once built.
class MaglevTable {
public:
    /// Builds the table of `nodes` (distinct names, any order, at most size of them).
    /// Throws std::bad_alloc.
    MaglevTable(std::span<const std::string> nodes, std::uint32_t size);

    /// The hash of a key: XXH3_64bits of its bytes, seed 0.
    static std::uint64_t hash(std::string_view bytes) noexcept;

    /// Index into the nodes the table was built from of the owner of hash `h`.
    std::size_t owner(std::uint64_t h) const noexcept { return entries_[h % entries_.size()]; }

    /// Appends up to `count` distinct members: the owner of `h`, then the owners of the
    /// following entries. Throws std::bad_alloc.
    void replicas(std::uint64_t h, std::size_t count, std::size_t members, std::vector<std::size_t>& out) const;

private:
    std::vector<std::uint32_t> entries_;
};

/// Routes each key to the same member while the member set doesn't change, by a Maglev
/// table of the members (MaglevTable): an even spread and a one-read pick, for a build of
/// O(size × log size) (doc/reference/algorithms.md compares it with hash_ring). No key: a
/// random member; `choose_nodes` with a key returns the owner first.
///
/// Option: `table_size`, a prime from 211 to 1,000,003 (default 65,537), grown to the
/// smallest prime above 10 × members when smaller. A bad one throws std::invalid_argument
/// at `init`.
///
/// Thread safety: shared objects safe for concurrent picks and `on_node_change` once
/// `init` has returned.
class Maglev final : public SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = capability::snapshot_state | capability::choose_many;
    static constexpr std::uint32_t default_table_size = 65'537;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

    Result<std::vector<std::size_t>> choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                  const PickOptions& options) override;

    /// For tests and benchmarks: tables built so far. Thread-safe.
    std::uint64_t tables_built() const noexcept { return tables_built_.load(std::memory_order_relaxed); }

private:
    Result<const MaglevTable*> table_of(const MemberSnapshot& members);

    std::string balancer_;
    std::uint32_t table_size_ = default_table_size;
    std::atomic<std::uint64_t> tables_built_{0};
};

}  // namespace rpclb::plugins
