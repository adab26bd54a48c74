// The HashRing selection algorithm (consistent hashing) and the ring it reads.
#pragma once

#include <rpclb/selection_algorithm.hpp>

// Header-only xxHash: the functions are compiled into each user (the plugin, its tests,
// a benchmark), so nothing has to link libxxhash.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace rpclb::plugins {

/// An immutable consistent-hash ring over a member list (reference §2.6 with §10.3).
///
/// Every member gets `weight` virtual nodes; virtual node `i` of member `N` sits at point
/// `XXH3_64bits("N#i")` (the decimal `i`, 0 ≤ i < weight) in the 64-bit hash space. A key
/// hashes to `h = XXH3_64bits(key bytes)` and is owned by the member at the first point
/// ≥ h, wrapping to the lowest point. Points are sorted by (point, member name), so the
/// owner *name* of every key depends only on the member set, never on list order: every
/// node of a cluster computes the same owner. Owners are reported as indices into the list
/// the ring was built from (`nodes()`).
///
/// Construction hashes `members × weight` strings and sorts them (about 55 µs for 8
/// members at weight 128): it allocates and belongs off the pick path. A look-up doesn't
/// allocate: a bucket index over the top bits of the hash, about one point per bucket,
/// leads to the answer in one or two comparisons (the result is exactly a binary search's).
/// Memory: 16 bytes per virtual node plus the names. A benchmark or test can build and
/// time a ring directly:
///
///     ConsistentHashRing ring(std::vector<std::string>{"a@h", "b@h"}, 128);
///     std::size_t owner = ring.owner_of("user:42");   // index into ring.nodes()
///
/// Thread safety: distinct objects safe; shared objects safe (const after construction).
class ConsistentHashRing {
public:
    /// Builds the ring of `nodes` (distinct names, any order, at most 2^32 − 1 of them)
    /// with `weight` ≥ 1 virtual nodes each. `version` and `source` identify the member
    /// snapshot the ring stands for (see `matches`). Throws std::bad_alloc.
    ConsistentHashRing(std::span<const std::string> nodes, std::uint32_t weight,
                       std::uint64_t version = 0, const MemberSnapshot* source = nullptr)
        : nodes_(nodes.begin(), nodes.end()), version_(version), source_(source) {
        struct VirtualNode {
            std::uint64_t point;
            std::uint32_t member;
        };
        std::vector<VirtualNode> ring;
        ring.reserve(nodes_.size() * weight);
        std::string label;
        for (std::uint32_t member = 0; member < nodes_.size(); ++member) {
            label.assign(nodes_[member]).push_back('#');
            const std::size_t prefix = label.size();
            for (std::uint32_t i = 0; i < weight; ++i) {
                char digits[16];
                const auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
                label.resize(prefix);
                label.append(digits, end);
                ring.push_back({hash(label), member});
            }
        }
        // A tie between two members' points (a 64-bit collision) goes to the smaller name,
        // so the outcome doesn't depend on the order the members were listed in.
        std::sort(ring.begin(), ring.end(), [this](const VirtualNode& x, const VirtualNode& y) {
            return std::forward_as_tuple(x.point, nodes_[x.member], x.member) <
                   std::forward_as_tuple(y.point, nodes_[y.member], y.member);
        });
        points_.reserve(ring.size());
        owners_.reserve(ring.size());
        for (const auto& v : ring) {
            points_.push_back(v.point);
            owners_.push_back(v.member);
        }
        // The bucket index: about one point per bucket, so a look-up reads one bucket and
        // one or two points instead of binary-searching the whole ring.
        while ((std::size_t{1} << bucket_bits_) < points_.size() && bucket_bits_ < 32) ++bucket_bits_;
        buckets_.resize(std::size_t{1} << bucket_bits_);
        std::size_t at = 0;
        for (std::size_t b = 0; b < buckets_.size(); ++b) {
            const std::uint64_t start = bucket_bits_ == 0 ? 0 : std::uint64_t{b} << (64 - bucket_bits_);
            while (at < points_.size() && points_[at] < start) ++at;
            buckets_[b] = static_cast<std::uint32_t>(at);
        }
    }

    /// The hash of a key or a virtual-node label: XXH3_64bits of its bytes, seed 0.
    static std::uint64_t hash(std::string_view bytes) noexcept {
        return XXH3_64bits(bytes.data(), bytes.size());
    }

    /// Index into `nodes()` of the owner of hash `h`; 0 when the ring is empty.
    std::size_t owner(std::uint64_t h) const noexcept {
        if (points_.empty()) return 0;
        return owners_[first_point_at_or_after(h)];
    }

    /// Index into `nodes()` of the owner of `key`; 0 when the ring is empty.
    std::size_t owner_of(std::string_view key) const noexcept { return owner(hash(key)); }

    /// Appends to `out` up to `count` distinct members (indices into `nodes()`), walking
    /// clockwise from the owner of `h` and wrapping around: `min(count, nodes().size())`
    /// of them, the first being `owner(h)`. Throws std::bad_alloc.
    void replicas(std::uint64_t h, std::size_t count, std::vector<std::size_t>& out) const {
        const std::size_t take = std::min(count, nodes_.size());
        if (take == 0 || points_.empty()) return;
        std::vector<bool> taken(nodes_.size());
        std::size_t found = 0;
        std::size_t at = first_point_at_or_after(h);
        // Every member has at least one point, so one lap finds them all.
        for (std::size_t step = 0; step < points_.size() && found < take; ++step) {
            const std::uint32_t member = owners_[at];
            if (!taken[member]) {
                taken[member] = true;
                out.push_back(member);
                ++found;
            }
            if (++at == points_.size()) at = 0;
        }
    }

    /// True when this ring stands for `members`: the same version and the same list in
    /// the same order. Cheap when `members` is the snapshot the ring was built from (the
    /// usual case: a balancer hands the same published snapshot to every pick); otherwise
    /// the names are compared, without allocating.
    bool matches(const MemberSnapshot& members) const noexcept {
        if (members.version != version_ || members.nodes.size() != nodes_.size()) return false;
        return &members == source_ || members.nodes == nodes_;
    }

    /// Like `matches`, always comparing the names (for when `members` may be a new
    /// snapshot at the address of the one the ring was built from).
    bool same_members(const MemberSnapshot& members) const noexcept {
        return members.version == version_ && members.nodes == nodes_;
    }

    /// The members, in the order the ring was built with (owner indices refer to it).
    const std::vector<std::string>& nodes() const noexcept { return nodes_; }

    /// The version of the snapshot the ring was built from.
    std::uint64_t version() const noexcept { return version_; }

    /// The number of virtual nodes: members × weight.
    std::size_t size() const noexcept { return points_.size(); }

private:
    // The index of the lowest point ≥ h, or 0 (the wrap) when there is none. Equal to
    // std::lower_bound over points_, started at h's bucket.
    std::size_t first_point_at_or_after(std::uint64_t h) const noexcept {
        // Two shifts, so that 0 bucket bits gives bucket 0 without a 64-bit shift.
        std::size_t at = buckets_[(h >> 1) >> (63 - bucket_bits_)];
        while (at < points_.size() && points_[at] < h) ++at;
        return at == points_.size() ? 0 : at;
    }

    std::vector<std::uint64_t> points_;   // ascending
    std::vector<std::uint32_t> owners_;   // owners_[i] owns points_[i]
    std::vector<std::uint32_t> buckets_;  // buckets_[b]: first point in bucket b or later
    unsigned bucket_bits_ = 0;            // the top bucket_bits_ bits of a hash pick its bucket
    std::vector<std::string> nodes_;
    std::uint64_t version_;
    const MemberSnapshot* source_;        // identity only, never dereferenced
};

/// Routes each key to the same member for as long as the member set doesn't change
/// (reference §2.6, with the improvements of §10.2 and §10.3).
///
/// Option (`algorithm_opts`): `weight`, the number of virtual nodes per member, an integer
/// in 1 … 4096, default 128 (the seed's default). Anything else for `weight` throws
/// std::invalid_argument at `init`; other keys are ignored.
///
/// A pick with a key returns the owner of the key on the `ConsistentHashRing` of the
/// current members. A pick without a key returns a uniformly random member (as the seed).
/// `choose_nodes` with a key walks the ring clockwise from the key's point, wrapping
/// around, and returns `min(count, members)` distinct members whose first is the single
/// pick's answer; without a key it is a random sample.
///
/// The ring is built on the first keyed pick that sees a member snapshot it doesn't match
/// (another `version`, or another list under the same version), under a mutex, and then
/// published through an atomic pointer; every later pick checks the version and reads the
/// ring without a lock or an allocation. Rings built earlier stay allocated until the
/// algorithm is destroyed (a picking thread may still be reading one), one per member list
/// seen; a list seen again reuses its ring.
///
/// Differences from the seed, on purpose: the hash is XXH3 of the key's bytes, not Erlang's
/// `phash2`, so rings don't agree with the Elixir library's; the ring depends on the member
/// set only (the seed's list order decides collisions); the replica walk wraps around and
/// always returns `min(count, members)` members (the seed stops at the end of the ring);
/// `on_node_change` isn't needed because every pick checks the snapshot's version; an empty
/// member list gives `service_unavailable` "no members registered" (§10.6).
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned.
class HashRing final : public SelectionAlgorithm {
public:
    static constexpr std::uint32_t default_weight = 128;
    static constexpr std::uint32_t max_weight = 4096;

    HashRing() = default;
    HashRing(const HashRing&) = delete;
    HashRing& operator=(const HashRing&) = delete;

    /// Reads `weight`; throws std::invalid_argument naming it when it isn't an integer in
    /// 1 … 4096.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The key's owner, or a random member without a key. `service_unavailable` when the
    /// list is empty; `internal_server_error` if building a ring runs out of memory.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// The key's replicas (see the class comment), or a random sample without a key.
    Result<std::vector<std::size_t>> choose_nodes(const MemberSnapshot& members,
                                                  std::size_t count,
                                                  const PickOptions& options) override;

    /// Virtual nodes per member, as configured.
    std::uint32_t weight() const noexcept { return weight_; }

private:
    // The ring for `members`; builds it when the published one doesn't match.
    const ConsistentHashRing* ring_for(const MemberSnapshot& members);
    const ConsistentHashRing* rebuild(const MemberSnapshot& members);

    std::string balancer_;
    std::uint32_t weight_ = default_weight;
    std::atomic<const ConsistentHashRing*> ring_{nullptr};
    std::mutex rebuild_mutex_;
    std::vector<std::unique_ptr<const ConsistentHashRing>> rings_;  // under rebuild_mutex_
};

}  // namespace rpclb::plugins
