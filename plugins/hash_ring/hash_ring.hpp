// The HashRing selection algorithm (consistent hashing) and the rings it keeps.
#pragma once

#include "consistent_hash_ring.hpp"

#include <rpclb/detail/thread_slot.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace rpclb {
class AlgorithmHost;
}

namespace rpclb::plugins {

/// Routes each key to the same member for as long as the member set doesn't change
/// (seed §2.6, with the improvements of §10.2 and §10.3).
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
/// Rings are keyed by the member *set*: a ring is built over the sorted names, so a set
/// seen before gets its ring back whatever the snapshot's version or list order.
///
/// - Built off the hot path: `on_node_change` builds (or takes back) the ring of the new
///   set and makes it current. The set is the balancer's members as its host reports them
///   (`AlgorithmContext::host`, with their version); without a host, the set is
///   tracked from the notifications, starting from the first snapshot a pick built a ring
///   for. A keyed pick that finds no ring for its snapshot (before any notification, a
///   snapshot the notifications haven't caught up with, a direct caller) builds it itself
///   under a mutex: the exception, which only picks missing a ring wait on.
/// - Checked on every keyed pick: each kept ring remembers the last snapshot version seen
///   with exactly its (sorted) list; a pick compares its snapshot's version and size with
///   the current ring's, then the other kept rings', and otherwise compares names (no
///   allocation) and records the version on a match. A list in another order (outside
///   MemberSnapshot's contract) is matched by set on every pick and owners are found in it
///   by name.
/// - Bounded memory: the `kept_rings` (4) most recently current rings are kept. A rolling
///   restart flips between the full set and the set less one node, and picks may still
///   hold the snapshot before the last change: two rings cover that, four leave room for
///   two overlapping restarts, at 16 bytes per virtual node each (0.5 MB for 256 members
///   at weight 128). An evicted ring is freed once no pick is reading it (hazard pointers,
///   one per thread slot): at the eviction or at a later change. At most one ring per
///   thread slot can be held back that way; a thread without a slot (more threads than
///   slots) holds back every evicted ring while it is inside a keyed pick.
/// - The pick path takes no lock and allocates nothing once its ring exists: atomic loads,
///   and one store of the thread's hazard pointer before and after reading the ring.
///
/// Differences from the seed, on purpose: the hash is XXH3 of the key's bytes, not Erlang's
/// `phash2`, so rings don't agree with the Elixir library's; the ring depends on the member
/// set only (the seed's list order decides collisions); the replica walk wraps around and
/// always returns `min(count, members)` members (the seed stops at the end of the ring);
/// an empty member list gives `service_unavailable` "no members registered" (§10.6).
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks and
/// `on_node_change` once `init` has returned.
class HashRing final : public SelectionAlgorithm {
public:
    static constexpr std::uint32_t default_weight = 128;
    static constexpr std::uint32_t max_weight = 4096;
    /// How many rings are kept for reuse (see the class comment).
    static constexpr std::size_t kept_rings = 4;

    HashRing();
    ~HashRing() override;
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

    /// Builds or takes back the ring of the new member set and makes it current. Never
    /// throws (out of memory, the picks build the ring instead).
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override;

    /// Virtual nodes per member, as configured.
    std::uint32_t weight() const noexcept { return weight_; }

    /// For tests and benchmarks: how many rings this algorithm has built so far (by
    /// `on_node_change` and by picks). Inline, so a test can call it on the plugin's
    /// object through a static_cast. Thread safety: safe from any thread.
    std::uint64_t rings_built() const noexcept { return rings_built_.load(std::memory_order_relaxed); }

private:
    // A kept ring and the last snapshot version seen with exactly its list, plus one (0:
    // none yet). The version may change while a pick reads the entry, but only to another
    // version of the same list (MemberSnapshot: one version, one list).
    struct Entry {
        Entry(std::span<const std::string> sorted, std::uint32_t weight) : ring(sorted, weight) {}
        const ConsistentHashRing ring;
        mutable std::atomic<std::uint64_t> version_plus_one{0};
    };
    // The pointer a thread slot's pick is reading; the entry it names isn't freed.
    struct alignas(detail::per_thread_alignment) Hazard {
        std::atomic<const Entry*> entry{nullptr};
    };
    class Reader;

    // A kept entry for a snapshot; `in_order` when the snapshot lists the entry's ring's
    // nodes in the same order (owner indices are then indices into it).
    struct Found {
        const Entry* entry;
        bool in_order;
    };

    // The entry for `members`, building it when none is kept; entry nullptr when memory ran
    // out. The entry stays readable while `reader` lives.
    Found ring_for(Reader& reader, const MemberSnapshot& members) noexcept;
    // The kept entry for `members`, found without a lock; entry nullptr when there is none.
    Found find(Reader& reader, const MemberSnapshot& members) noexcept;
    // Builds (or finds) the entry for `members` under mutex_ and makes it current.
    Found build_for(Reader& reader, const MemberSnapshot& members) noexcept;
    // Under mutex_: the kept entry for the sorted set `sorted`, made current, building it
    // if needed. Throws std::bad_alloc.
    Entry* make_current(const std::vector<std::string>& sorted);
    // Under mutex_: frees the evicted entries no pick is reading.
    void free_unread();

    std::string balancer_;
    AlgorithmHost* host_ = nullptr;
    std::uint32_t weight_ = default_weight;

    alignas(detail::per_thread_alignment) std::atomic<Entry*> current_{nullptr};
    std::array<std::atomic<Entry*>, kept_rings> kept_{};  // owned; written under mutex_
    const std::size_t slot_count_;
    const std::unique_ptr<Hazard[]> hazards_;
    alignas(detail::per_thread_alignment) std::atomic<std::size_t> slotless_readers_{0};
    std::atomic<std::uint64_t> rings_built_{0};

    std::mutex mutex_;  // builds and every write of the kept entries
    std::array<std::uint64_t, kept_rings> made_current_at_{};  // under mutex_
    std::uint64_t changes_ = 0;                                // under mutex_
    std::vector<std::unique_ptr<Entry>> evicted_;              // under mutex_, still read
    std::vector<std::string> tracked_;  // under mutex_: the set from notifications, sorted
    bool notified_ = false;             // under mutex_: a notification has come
};

}  // namespace rpclb::plugins
