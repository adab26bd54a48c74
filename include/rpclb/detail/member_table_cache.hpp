// Per-member-list tables for selection algorithms: built off the hot path, read lock-free.
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// Caches a `Table` derived from a balancer's member list (counter pointers, an expanded
/// sequence), so a pick pays for it only when the membership changed (seed §10.2:
/// cached state is re-checked on every pick by comparing the membership version).
///
/// `get(members, build)` returns the table for `members`. When `members.version` is the
/// version the latest table was published for, that costs one atomic load and two
/// compares. Otherwise it takes a mutex, finds the table built earlier for an equal node
/// list or calls `build(nodes)` to make one, and publishes it as the latest.
///
/// Lifetime: a table lives as long as the cache, so a reader that got one never sees it
/// freed. Tables are keyed by node list, and a list seen again (a node that leaves and
/// comes back) gets its old table back: memory grows with the number of distinct member
/// lists, not with the number of membership changes.
///
/// Thread safety: distinct objects safe; shared objects safe. `build` runs with the
/// cache's mutex held, so calls of `build` never overlap.
template <class Table>
class MemberTableCache {
public:
    /// The table for `members.nodes`.
    ///
    /// `build` is called as `Table build(std::span<const std::string> nodes)` with a copy
    /// of the names that lives as long as the cache (a table may keep views into it).
    /// Returns nullptr when building failed (memory ran out, `build` threw); the caller
    /// then reports `table_build_error`. Never throws.
    ///
    /// The fast path trusts `version`: two snapshots with the same version must hold the
    /// same nodes (MemberSnapshot's contract). A size mismatch is caught anyway, so a
    /// broken caller gets a rebuild rather than an index out of range.
    template <class Build>
    const Table* get(const MemberSnapshot& members, Build&& build) noexcept {
        const Entry* entry = latest_.load(std::memory_order_acquire);
        if (entry && entry->version.load(std::memory_order_relaxed) == members.version &&
            entry->size == members.nodes.size()) [[likely]]
            return &entry->table;
        return rebuild(members, build);
    }

private:
    struct Entry {
        template <class Build>
        Entry(const std::vector<std::string>& nodes, Build& build)
            : size(nodes.size()), table(build(std::span<const std::string>(nodes))) {}

        const std::size_t size;
        const Table table;
        // Which snapshot version this entry was last published for. It may change while a
        // reader holds the entry, but only to a version with the same node list.
        std::atomic<std::uint64_t> version{0};
    };

    template <class Build>
    const Table* rebuild(const MemberSnapshot& members, Build& build) noexcept {
        try {
            std::lock_guard lock(mutex_);
            auto [it, inserted] = entries_.try_emplace(members.nodes);
            if (inserted) {
                try {
                    // The map's key is the stable copy of the names handed to `build`.
                    it->second = std::make_unique<Entry>(it->first, build);
                } catch (...) {
                    entries_.erase(it);
                    throw;
                }
            }
            Entry& entry = *it->second;
            entry.version.store(members.version, std::memory_order_relaxed);
            latest_.store(&entry, std::memory_order_release);
            return &entry.table;
        } catch (...) {
            return nullptr;
        }
    }

    std::atomic<const Entry*> latest_{nullptr};
    std::mutex mutex_;
    std::map<std::vector<std::string>, std::unique_ptr<Entry>> entries_;
};

/// The error a pick returns when its member table could not be built (memory ran out).
inline ErrorMessage table_build_error(std::string_view balancer) {
    return ErrorMessage{ErrorCode::internal_server_error,
                        "out of memory building the member table",
                        boost::json::object{{"load_balancer", balancer}}};
}

}  // namespace rpclb::detail
