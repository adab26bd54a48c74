// The consistent-hash ring of the hash_ring plugin: an immutable value over a member list.
#pragma once

// Header-only xxHash: the functions are compiled into each user (the plugin, its tests,
// a benchmark), so nothing has to link libxxhash.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace rpclb::plugins {

/// An immutable consistent-hash ring over a member list (predecessor-compatibility §2.6,
/// §10.3). Virtual node `i` of member `N` sits at `XXH3_64bits("N#i")` (decimal `i`,
/// 0 ≤ i < weight); a key is owned by the member at the first point ≥ XXH3_64bits(key),
/// wrapping around. Ties sort by member name, so the owner depends only on the member set
/// and every node computes the same one. Owners are indices into `nodes()`.
///
/// Construction allocates (members × weight hashes and a sort) and belongs off the pick
/// path; look-ups allocate nothing.
///
/// Thread safety: distinct objects safe; shared objects safe (const after construction).
class ConsistentHashRing {
public:
    /// Builds the ring of `nodes` (distinct names, any order, at most 2^32 − 1 of them)
    /// with `weight` ≥ 1 virtual nodes each. Throws std::bad_alloc.
    ConsistentHashRing(std::span<const std::string> nodes, std::uint32_t weight)
        : nodes_(nodes.begin(), nodes.end()) {
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

    /// The first member clockwise from the owner of `h` (the owner included) for which
    /// `has_room(member)` is true, checking at most one lap of the ring; `owner(h)` when
    /// none has. No allocation.
    template <class HasRoom>
    std::size_t first_with_room(std::uint64_t h, HasRoom&& has_room) const {
        if (points_.empty()) return 0;
        std::size_t at = first_point_at_or_after(h);
        const std::size_t owner = owners_[at];
        for (std::size_t step = 0; step < points_.size(); ++step) {
            if (has_room(std::size_t{owners_[at]})) return owners_[at];
            if (++at == points_.size()) at = 0;
        }
        return owner;
    }

    /// The members, in the order the ring was built with (owner indices refer to it).
    const std::vector<std::string>& nodes() const noexcept { return nodes_; }

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
};

}  // namespace rpclb::plugins
