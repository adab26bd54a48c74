// The Random selection algorithm.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <string>

namespace rpclb::plugins {

/// Picks a member uniformly at random (predecessor-compatibility §2.1), from the calling
/// thread's own generator. Takes no options.
///
/// Thread safety: shared objects safe for concurrent picks once `init` has returned; a
/// pick writes only thread-local state.
class Random final : public SelectionAlgorithm {
public:
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// A uniformly random member; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

private:
    std::string balancer_;
};

}  // namespace rpclb::plugins
