// The RoundRobin selection algorithm.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstdint>
#include <string>

namespace rpclb::plugins {

/// Picks members in turn (predecessor-compatibility §2.2): each pick takes the next value
/// of one cursor and returns that value modulo the number of members. The cursor starts at
/// a random value for each instance, so that many short-lived clients do not all start on
/// the first member; from then on N consecutive picks, from any threads, reach N members.
/// A membership change re-maps the cursor through the new size. Option `start` (integer
/// ≥ 0) sets the cursor's first value instead: `{"start": 0}` starts on the first member.
///
/// Thread safety: distinct objects safe; shared objects safe for concurrent picks once
/// `init` has returned. A pick is one shared `fetch_add`: no lock, no allocation.
class RoundRobin final : public SelectionAlgorithm {
public:
    void init(const AlgorithmContext& context, const boost::json::object& options) override;

    /// The next member in turn; `service_unavailable` for an empty list.
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;

private:
    std::string balancer_;
    std::atomic<std::uint64_t> cursor_{0};
};

}  // namespace rpclb::plugins
