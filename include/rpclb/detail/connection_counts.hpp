// In-flight call counts per member, shared by the least_connections and power_of_two plugins.
#pragma once

#include <rpclb/algorithm_state.hpp>
#include <rpclb/detail/member_table_cache.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// The in-flight count of every member of one balancer (reference §2.4, §2.5 and §10.4).
///
/// Counts live in AlgorithmState under the key `"conn:" + node` of the balancer, so they
/// survive a restart of the balancer and are shared by every algorithm instance on the same
/// balancer name (as the seed's `{:conn, name, node}` slots are).
///
/// A pick calls `counters(members)` (the counters of `members.nodes`, index-aligned, cached
/// per member list) and `acquire` on the chosen one. `release` finds a node's counter
/// in an index of every node this object has ever handed out, so a call picked before a
/// membership change is still released after it; a node never handed out is ignored.
/// A count never goes below zero; `reset` sets counts to zero (a node left).
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// `counters`, `acquire` and `release` take no lock and allocate nothing, except that the
/// first `counters` call for a new member list builds its table (taking this object's and
/// AlgorithmState's mutexes); `reset` takes AlgorithmState's mutex.
class ConnectionCounts {
public:
    using Counter = std::atomic<std::int64_t>;
    using Counters = std::vector<Counter*>;

    /// The AlgorithmState key of `node`'s count.
    static std::string key(std::string_view node) {
        std::string k("conn:");
        k.append(node);
        return k;
    }

    /// Binds the counts to `balancer`. Call once, before anything else.
    void init(std::string balancer) { balancer_ = std::move(balancer); }

    /// The balancer's name, for errors.
    const std::string& balancer() const noexcept { return balancer_; }

    /// Counters of `members.nodes`, in the same order; nullptr when memory ran out while
    /// building them after a membership change. `members.nodes` must not be empty.
    const Counters* counters(const MemberSnapshot& members) noexcept {
        return tables_.get(members, [this](std::span<const std::string> nodes) { return build(nodes); });
    }

    /// Counts one more call in flight on `counter`.
    static void acquire(Counter& counter) noexcept { counter.fetch_add(1, std::memory_order_relaxed); }

    /// Counts one call fewer in flight on `node`; never below zero. Ignores a node this
    /// object never handed out.
    void release(std::string_view node) noexcept {
        const Index* index = index_.load(std::memory_order_acquire);
        if (!index) return;
        auto it = std::lower_bound(index->begin(), index->end(), node,
                                   [](const auto& entry, std::string_view n) { return entry.first < n; });
        if (it == index->end() || it->first != node) return;
        Counter& counter = *it->second;
        // A plain decrement could go below zero when a release follows a reset (the node
        // left while the call was in flight); the seed's counts can go negative (§10.4).
        std::int64_t value = counter.load(std::memory_order_relaxed);
        while (value > 0 &&
               !counter.compare_exchange_weak(value, value - 1, std::memory_order_relaxed)) {
        }
    }

    /// Sets the counts of `nodes` to zero (they left the group). Never throws; a node
    /// whose counter can't be created for want of memory is skipped.
    void reset(std::span<const std::string> nodes) noexcept {
        for (const auto& node : nodes) {
            try {
                AlgorithmState::instance().counter(balancer_, key(node)).store(0, std::memory_order_relaxed);
            } catch (...) {
            }
        }
    }

private:
    // Sorted by name; views into names_.
    using Index = std::vector<std::pair<std::string_view, Counter*>>;

    // Runs with tables_' mutex held, which also serialises every change of index_.
    Counters build(std::span<const std::string> nodes) {
        auto& state = AlgorithmState::instance();
        Counters result;
        result.reserve(nodes.size());
        for (const auto& node : nodes) result.push_back(&state.counter(balancer_, key(node)));

        const Index* old = index_.load(std::memory_order_relaxed);
        auto next = std::make_unique<Index>(old ? *old : Index{});
        const std::size_t known = next->size();
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            auto it = std::lower_bound(next->begin(), next->begin() + known, nodes[i],
                                       [](const auto& entry, std::string_view n) { return entry.first < n; });
            if (it != next->begin() + known && it->first == nodes[i]) continue;
            next->emplace_back(names_.emplace_back(nodes[i]), result[i]);
        }
        if (next->size() == known) return result;
        std::sort(next->begin(), next->end());
        // Readers may still hold the old index: keep every version until destruction. Each
        // new version adds a node never seen before, so there are few of them.
        index_.store(indices_.emplace_back(std::move(next)).get(), std::memory_order_release);
        return result;
    }

    std::string balancer_;
    MemberTableCache<Counters> tables_;
    std::atomic<const Index*> index_{nullptr};
    std::deque<std::string> names_;                 // stable storage for the index's views
    std::vector<std::unique_ptr<const Index>> indices_;  // every published index
};

}  // namespace rpclb::detail
