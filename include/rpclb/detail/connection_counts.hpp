// In-flight call counts per member, shared by the least_connections and power_of_two plugins.
#pragma once

#include <rpclb/algorithm_state.hpp>
#include <rpclb/detail/in_flight_count.hpp>
#include <rpclb/detail/member_table_cache.hpp>
#include <rpclb/selection_algorithm.hpp>

// Header-only xxHash, as plugins/hash_ring uses it: nothing has to link libxxhash.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// The in-flight count of every member of one balancer (seed §2.4, §2.5 and §10.4).
///
/// Counts are the balancer's `AlgorithmState::in_flight(balancer, node)`
/// (detail::InFlightCount: sharded by thread, never below zero), so they survive a restart
/// of the balancer and are shared by every algorithm instance on the same balancer name (as
/// the seed's `{:conn, name, node}` slots are).
///
/// A pick calls `counts(members)` (the counts of `members.nodes`, index-aligned, cached per
/// member list) and `acquire` on the chosen one. `release` finds a node's count in a hash
/// index of every node this object has ever handed out — one XXH3 hash of the name and
/// about one probe — so a call picked before a membership change is still released after it; a
/// node never handed out is ignored. `reset` sets counts to zero (a node left).
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// `counts` and `release` take no lock and allocate nothing, except that the first
/// `counts` call for a new member list builds its table (taking this object's and
/// AlgorithmState's mutexes); `reset` takes AlgorithmState's mutex.
class ConnectionCounts {
public:
    using Counts = std::vector<InFlightCount>;

    /// Binds the counts to `balancer`. Call once, before anything else.
    void init(std::string balancer) { balancer_ = std::move(balancer); }

    /// The balancer's name, for errors.
    const std::string& balancer() const noexcept { return balancer_; }

    /// Counts of `members.nodes`, in the same order; nullptr when memory ran out while
    /// building them after a membership change. `members.nodes` must not be empty.
    const Counts* counts(const MemberSnapshot& members) noexcept {
        return tables_.get(members, [this](std::span<const std::string> nodes) { return build(nodes); });
    }

    /// Counts one call fewer in flight on `node`; never below zero. Ignores a node this
    /// object never handed out.
    void release(std::string_view node) noexcept {
        const Index* index = index_.load(std::memory_order_acquire);
        if (!index) return;
        if (const InFlightCount* count = index->find(node)) count->release();
    }

    /// Sets the counts of `nodes` to zero (they left the group). Never throws; a node
    /// whose count can't be created for want of memory is skipped.
    void reset(std::span<const std::string> nodes) noexcept {
        for (const auto& node : nodes) {
            try {
                AlgorithmState::instance().in_flight(balancer_, node).reset();
            } catch (...) {
            }
        }
    }

private:
    // Open addressing with linear probing over a power-of-two table at most half full.
    struct Index {
        struct Entry {
            std::size_t hash = 0;
            std::string_view name;  // data() == nullptr: empty entry
            InFlightCount count;
        };
        std::vector<Entry> entries;
        std::size_t known = 0;

        // Equal names, compared 8 bytes at a time in line: node names are short, and a
        // call to memcmp through the PLT costs more than the comparison.
        static bool same_name(std::string_view a, std::string_view b) noexcept {
            const std::size_t size = a.size();
            if (size != b.size()) return false;
            std::size_t i = 0;
            for (; i + 8 <= size; i += 8) {
                std::uint64_t x, y;
                std::memcpy(&x, a.data() + i, 8);
                std::memcpy(&y, b.data() + i, 8);
                if (x != y) return false;
            }
            for (; i < size; ++i)
                if (a[i] != b[i]) return false;
            return true;
        }

        // XXH3 reads short names (node names are short) in a few wide loads.
        static std::size_t hash_of(std::string_view name) noexcept {
            return static_cast<std::size_t>(XXH3_64bits(name.data(), name.size()));
        }

        const InFlightCount* find(std::string_view name) const noexcept {
            const std::size_t hash = hash_of(name);
            const std::size_t mask = entries.size() - 1;
            for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
                const Entry& entry = entries[i];
                if (!entry.name.data()) return nullptr;
                if (entry.hash == hash && same_name(entry.name, name)) return &entry.count;
            }
        }

        void insert(std::size_t hash, std::string_view name, InFlightCount count) {
            const std::size_t mask = entries.size() - 1;
            std::size_t i = hash & mask;
            while (entries[i].name.data()) i = (i + 1) & mask;
            entries[i] = Entry{hash, name, count};
            ++known;
        }
    };

    // Runs with tables_' mutex held, which also serialises every change of index_.
    Counts build(std::span<const std::string> nodes) {
        auto& state = AlgorithmState::instance();
        Counts result;
        result.reserve(nodes.size());
        for (const auto& node : nodes) result.push_back(state.in_flight(balancer_, node));

        const Index* old = index_.load(std::memory_order_relaxed);
        std::vector<std::size_t> fresh;  // positions in `nodes` of names not in the index
        for (std::size_t i = 0; i < nodes.size(); ++i)
            if (!old || !old->find(nodes[i])) fresh.push_back(i);
        if (fresh.empty()) return result;

        const std::size_t known = (old ? old->known : 0) + fresh.size();
        auto next = std::make_unique<Index>();
        next->entries.resize(std::bit_ceil(2 * known));
        if (old)
            for (const auto& entry : old->entries)
                if (entry.name.data()) next->insert(entry.hash, entry.name, entry.count);
        for (std::size_t i : fresh) {
            const std::string_view name = names_.emplace_back(nodes[i]);
            next->insert(Index::hash_of(name), name, result[i]);
        }
        // Readers may still hold the old index: keep every version until destruction. Each
        // new version adds a node never seen before, so there are few of them.
        index_.store(indices_.emplace_back(std::move(next)).get(), std::memory_order_release);
        return result;
    }

    std::string balancer_;
    MemberTableCache<Counts> tables_;
    std::atomic<const Index*> index_{nullptr};
    std::deque<std::string> names_;                      // stable storage for the index's views
    std::vector<std::unique_ptr<const Index>> indices_;  // every published index
};

/// The base of the algorithms that count calls in flight (least_connections and
/// power_of_two; seed §2.4, §2.5, §10.4): their counts, their `release_node` and
/// `on_node_change`, and the frame of their picks.
///
/// The counts are ConnectionCounts: the balancer's process-wide
/// `AlgorithmState::in_flight(balancer, node)`, so they survive a restart of the balancer
/// and every counting algorithm on the same balancer name shares them, as in the seed. Each
/// count is kept per thread (InFlightTable): a pick adds its call to its own thread's row
/// with a plain store; a release, from any thread (such as the network thread a call
/// completes on), takes one call off a row that holds one, so it cancels the pick exactly
/// and no count goes below zero. A member that leaves (`on_node_change(left, nodes)`) has
/// its count reset to 0; `joined` changes nothing (an unknown member counts 0). A pick
/// reads counts with InFlightCount::estimate: the picking thread's own calls as they are
/// now; other threads' calls as they are now while the thread picks at the pace of real
/// calls, and through a view a few periods old at most while it picks back to back.
/// Choosing and counting are two steps, so two concurrent picks may choose the same member
/// (as in the seed).
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has bound the
/// counts. A pick takes no lock and allocates nothing, except that the first pick after a
/// membership change builds the count table; `release_node` is one hash look-up and one
/// compare-exchange; `on_node_change` takes AlgorithmState's mutex.
class CountingAlgorithm : public SelectionAlgorithm {
public:
    /// Resets the counts of nodes that left; ignores joins. Never throws.
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override {
        if (change == NodeChange::left) counts_.reset(nodes);
    }

    /// One call fewer in flight on `node`, never below zero; ignores a node never picked.
    void release_node(std::string_view node) override { counts_.release(node); }

protected:
    /// The frame of a pick: `service_unavailable` for an empty list (§10.6),
    /// `internal_server_error` when memory ran out building the count table, else the
    /// index `choose(counts, pick)` returns, counted as one more call in flight. `pick`
    /// comes from InFlightCount::begin_pick(max_age).
    /// `counts` is index-aligned with `members.nodes` and not empty; `choose` reads a
    /// count as `counts[i].estimate(pick)`.
    template <class Choose>
    Result<std::size_t> pick_counted(const MemberSnapshot& members, std::uint64_t max_age, Choose&& choose) {
        if (members.nodes.empty()) return empty_members_error(counts_.balancer());
        const ConnectionCounts::Counts* counts = counts_.counts(members);
        if (!counts) return table_build_error(counts_.balancer());
        const std::size_t chosen = choose(*counts, (*counts)[0].begin_pick(max_age));
        (*counts)[chosen].acquire();
        return chosen;
    }

    ConnectionCounts counts_;
};

}  // namespace rpclb::detail
