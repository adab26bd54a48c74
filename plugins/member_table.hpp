// Per-member state that outlives snapshots, for the plugins that learn from releases.
#pragma once

#include <rpclb/member_snapshot.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rpclb::plugins {

/// One `T` per member node, keyed by node name, so that a member keeps its `T` across
/// snapshots for as long as some snapshot holds it. A snapshot's row (`of`) is built by the
/// first lookup on that snapshot, under a mutex, and kept in the snapshot
/// (MemberSnapshot::state); later lookups take no lock and allocate nothing.
///
/// Thread safety: shared objects safe.
template <class T>
class MemberTable {
public:
    using Row = std::vector<std::shared_ptr<T>>;

    /// The row of `members`: element i is the `T` of `members.nodes[i]`. `owner` is the
    /// algorithm's snapshot_owner(). Throws std::bad_alloc when the first lookup on a
    /// snapshot cannot build it.
    const Row& of(const MemberSnapshot& members, std::uint64_t owner) {
        return members.state<Row>(owner, [&] {
            Row row;
            row.reserve(members.nodes.size());
            std::lock_guard lock(mutex_);
            // Names that no snapshot holds any more go, so the map stays bounded by the
            // members the balancer has now.
            std::erase_if(by_name_, [](const auto& entry) { return entry.second.use_count() == 1; });
            for (const auto& node : members.nodes) {
                auto& held = by_name_[node];
                if (!held) held = std::make_shared<T>();
                row.push_back(held);
            }
            return row;
        });
    }

    /// The `T` of `node`, or null when no snapshot looked up holds it (for tests).
    std::shared_ptr<T> find(const std::string& node) {
        std::lock_guard lock(mutex_);
        const auto it = by_name_.find(node);
        return it == by_name_.end() ? nullptr : it->second;
    }

private:
    std::mutex mutex_;  // by_name_, only when a snapshot's row is built
    std::map<std::string, std::shared_ptr<T>, std::less<>> by_name_;
};

}  // namespace rpclb::plugins
