// The CallDirect selection algorithm: run load-balanced calls on the calling node.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstddef>
#include <string>

namespace rpclb::plugins {

/// Sends every load-balanced call to the calling node itself (seed §2.8).
///
/// `local()` is true, so a balancer runs its load-balanced calls and casts on this node
/// without selecting at all. A pick asked for anyway (`select_node`) returns the index of
/// the local node (`AlgorithmContext::local_node`) in the member list, key or no key.
/// `choose_nodes` is the default random sample of members. Takes no options.
///
/// Differences from the seed, on purpose: the seed returns the local node even when it is
/// not in the list; a pick here can only return an index into the list, so when the local
/// node is not a member the pick fails with `service_unavailable` "call_direct: the local
/// node <name> is not a member" (details: `load_balancer`, `node`). An empty member list
/// gives `service_unavailable` "no members registered" naming the balancer (§10.6).
///
/// A pick compares the name at the index found last time and scans the list only when the
/// local node has moved: no lock, no allocation.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned.
class CallDirect final : public SelectionAlgorithm {
public:
    /// Remembers the balancer's and the local node's names. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of the local node in `members.nodes`; `service_unavailable` when the list is
    /// empty or doesn't contain it.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

    /// Always true: calls run where they are made.
    bool local() const override { return true; }

private:
    std::string balancer_;
    std::string local_node_;
    // Where the local node was in the last list seen; a hint, so relaxed is enough.
    std::atomic<std::size_t> last_index_{0};
};

}  // namespace rpclb::plugins
