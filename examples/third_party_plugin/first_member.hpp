// The FirstMember selection algorithm: an out-of-tree rpclb plugin.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace acme {

/// Always picks the first member in list order (`members.nodes[0]`, the smallest node
/// name, since rpclb sorts members by name).
///
/// A deliberately trivial algorithm that shows everything a third-party plugin needs:
/// the hooks to override, option checking in `init`, the empty-list error, and the
/// RPCLB_PLUGIN line in first_member.cpp. Useful in its own right as a primary/standby
/// rule: every call goes to one node while it is a member, and moves to the next name as
/// soon as that node leaves.
///
/// Options: none. Any key in `algorithm_opts` is refused by `init` with
/// std::invalid_argument naming it, which fails the balancer's start.
///
/// Picks: `choose_from_nodes` returns index 0; `choose_nodes(count)` returns the first
/// `min(count, size)` members in list order; `PickOptions::key` is ignored. An empty
/// member list gives `service_unavailable` "no members registered" naming the balancer.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned. A pick reads nothing but its arguments: no lock, no allocation.
class FirstMember final : public rpclb::SelectionAlgorithm {
public:
    /// Remembers the balancer's name for errors. Throws std::invalid_argument when
    /// `options` holds any key.
    void init(const rpclb::AlgorithmContext& context, const boost::json::object& options) override;

    /// 0, or `service_unavailable` when `members.nodes` is empty.
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                 const rpclb::PickOptions& options) override;

    /// 0, 1, ..., min(count, size) − 1, or `service_unavailable` when the list is empty.
    rpclb::Result<std::vector<std::size_t>> choose_nodes(const rpclb::MemberSnapshot& members,
                                                         std::size_t count,
                                                         const rpclb::PickOptions& options) override;

private:
    std::string balancer_;
};

}  // namespace acme
