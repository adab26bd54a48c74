// The Random selection algorithm (the seed's default).
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace rpclb::plugins {

/// Picks a member uniformly at random (seed §2.1, the seed's default algorithm).
///
/// Stateless apart from the balancer's name: ignores `PickOptions::key`; a single member
/// is always picked; `choose_nodes` is the default random sample of distinct members.
/// An empty member list gives `service_unavailable` "no members registered" naming the
/// balancer (seed §10.6), where the seed crashes.
///
/// Each thread draws from its own generator, so a pick takes no lock and allocates
/// nothing.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned.
class Random final : public SelectionAlgorithm {
public:
    /// Remembers the balancer's name for errors. Takes no options.
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// Index of a uniformly chosen member of `members.nodes`; `service_unavailable` when
    /// the list is empty.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                          const PickOptions& options) override;

private:
    std::string balancer_;
};

}  // namespace rpclb::plugins
