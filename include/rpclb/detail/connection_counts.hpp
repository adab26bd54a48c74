// In-flight call counts per member, shared by the least_connections and power_of_two plugins.
#pragma once

#include <rpclb/algorithm_state.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace rpclb::detail {

/// The in-flight count of every member of one balancer (seed §2.4, §2.5 and §10.4).
///
/// A count is the balancer's `AlgorithmState::in_flight(balancer, node)`: one atomic per
/// node, so it survives a restart of the balancer and every counting algorithm on the same
/// balancer name shares it, as the seed's `{:conn, name, node}` slots are shared. A node
/// that leaves the group is forgotten there (its count goes to 0 and its memory is freed
/// once no table holds it).
///
/// A pick reads the snapshot's CountTable (index-aligned counters), which the first pick
/// on a snapshot builds and stores in the snapshot's cache (MemberSnapshot::cache): the
/// table lives exactly as long as the snapshot, so nothing has to decide when readers are
/// done with it. A release through a snapshot (LoadBalancer::release_node passes its
/// current one) uses its table the same way; a release by name alone looks the counter
/// up in AlgorithmState under its mutex.
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has returned.
/// `cached` and the snapshot form of `release` take no lock and allocate nothing once the
/// snapshot has its table (the first pick on a snapshot builds it under AlgorithmState's
/// mutex); the name form of `release` takes AlgorithmState's mutex.
class ConnectionCounts {
public:
    /// Binds the counts to `balancer`. Call once, before anything else.
    void init(std::string balancer) {
        owner_ = AlgorithmState::instance().balancer_counts(balancer);
        balancer_ = std::move(balancer);
    }

    /// The balancer's name, for errors.
    const std::string& balancer() const noexcept { return balancer_; }

    /// The counters of `members.nodes`, in the same order, when the snapshot already holds
    /// them; else nullptr (then call `attach`).
    const CountTable* cached(const MemberSnapshot& members) const noexcept {
        const auto* held = members.cache.counts.load(std::memory_order_acquire);
        if (held && (*held)->owner == owner_ && (*held)->counts.size() == members.nodes.size()) [[likely]]
            return held->get();
        return nullptr;
    }

    /// Builds the counters of `members.nodes` and stores them in the snapshot's cache when
    /// it is empty. The result holds the table for the caller; nullptr when memory ran out.
    std::shared_ptr<const CountTable> attach(const MemberSnapshot& members) noexcept {
        try {
            auto table = AlgorithmState::instance().count_table(balancer_, members.nodes);
            auto held = std::make_unique<const std::shared_ptr<const CountTable>>(table);
            const std::shared_ptr<const CountTable>* expected = nullptr;
            if (members.cache.counts.compare_exchange_strong(expected, held.get(), std::memory_order_acq_rel))
                held.release();  // the snapshot owns it now
            return table;
        } catch (...) {
            return nullptr;
        }
    }

    /// Counts one call fewer in flight on `members.nodes[index]`, never below zero: through
    /// the snapshot's table when it has one, else by name.
    void release(const MemberSnapshot& members, std::size_t index) noexcept {
        if (const CountTable* table = cached(members)) [[likely]]
            table->counts[index]->release(this_thread_stripe());
        else
            release(members.nodes[index]);
    }

    /// Counts one call fewer in flight on `node`, never below zero, looking it up in
    /// AlgorithmState (under its mutex); a node without a counter (never picked, or it
    /// left) is ignored.
    void release(std::string_view node) noexcept { AlgorithmState::instance().release_in_flight(balancer_, node); }

    /// `nodes` left the group: their counts go to 0 and AlgorithmState forgets them.
    void forget(std::span<const std::string> nodes) noexcept {
        AlgorithmState::instance().forget_in_flight(balancer_, nodes);
    }

private:
    std::string balancer_;
    const BalancerCounts* owner_ = nullptr;
};

/// The base of the algorithms that count calls in flight (least_connections and
/// power_of_two; seed §2.4, §2.5, §10.4): their counts, their `release_node` and
/// `on_node_change`, and the frame of their picks.
///
/// Each member's count is a detail::InFlight (AlgorithmState::in_flight), shared by every
/// thread and striped by thread: a pick compares estimates (detail::StripeViews: its own
/// stripe now, the others as of at most one view period ago) and adds its call to its own
/// stripe with one `fetch_add`; a release, from any thread, takes one off with a
/// compare-exchange that stops at zero. A member that
/// leaves (`on_node_change(left, nodes)`) has its count reset to 0 and forgotten; `joined`
/// changes nothing (an unknown member counts 0). Choosing and counting are two steps, so
/// two concurrent picks may choose the same member (as in the seed).
///
/// Thread safety: distinct objects safe; shared objects safe once `init` has bound the
/// counts. A pick takes no lock and allocates nothing, except that the first pick on a
/// new snapshot builds its count table; `release_node` is described at
/// ConnectionCounts::release; `on_node_change` takes AlgorithmState's mutex.
class CountingAlgorithm : public SelectionAlgorithm {
public:
    /// Resets and forgets the counts of nodes that left; ignores joins. Never throws.
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override {
        if (change == NodeChange::left) counts_.forget(nodes);
    }

    /// One call fewer in flight on `node`, never below zero; ignores a node without a
    /// count. Takes AlgorithmState's mutex: LoadBalancer uses the snapshot form.
    void release_node(std::string_view node) override { counts_.release(node); }

    /// One call fewer in flight on `members.nodes[index]`, never below zero, through the
    /// snapshot's count table: no lock, one compare-exchange.
    void release_node(const MemberSnapshot& members, std::size_t index) override {
        counts_.release(members, index);
    }

protected:
    /// The frame of a pick: `service_unavailable` for an empty list (§10.6),
    /// `internal_server_error` when memory ran out building the count table, else the
    /// index `choose(estimate, size)` returns, counted as one more call in flight.
    /// `estimate(i)` is the picking thread's estimate of the calls in flight on
    /// `members.nodes[i]` (StripeViews::estimate); `size` is the number of members, > 0.
    template <class Choose>
    Result<std::size_t> pick_counted(const MemberSnapshot& members, Choose&& choose) {
        if (members.nodes.empty()) return empty_members_error(counts_.balancer());
        std::shared_ptr<const CountTable> built;  // only when the snapshot had none
        const CountTable* table = counts_.cached(members);
        if (!table) [[unlikely]] {
            built = counts_.attach(members);
            if (!built) return table_build_error(counts_.balancer());
            table = built.get();
        }
        const std::size_t stripe = this_thread_stripe();
        table->views.refresh(table->counts, stripe);
        const auto estimate = [table, stripe](std::size_t i) noexcept {
            return table->views.estimate(table->counts, stripe, i);
        };
        const std::size_t chosen = choose(estimate, table->counts.size());
        table->counts[chosen]->acquire(stripe);
        return chosen;
    }

    ConnectionCounts counts_;
};

}  // namespace rpclb::detail
