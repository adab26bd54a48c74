// The CallDirect selection algorithm: run load-balanced calls on the calling node.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstddef>
#include <string>

namespace rpclb::plugins {

/// Runs every load-balanced call on the calling node itself (predecessor-compatibility
/// §2.8): `local()` is true, so the balancer does not select at all. A pick asked for anyway
/// (`select_node`) returns the local node's index in the member list, key or no key;
/// `choose_nodes` is the default random sample. Takes no options.
///
/// Errors: `service_unavailable` "call_direct: the local node <name> is not a member"
/// (details `load_balancer`, `node`) when the list lacks the local node, which the
/// predecessor returned anyway; "no members registered" for an empty list.
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
