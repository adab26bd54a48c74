#include <rpclb/algorithm_state.hpp>

#include "weak_by_name.hpp"

namespace rpclb {

AlgorithmState& AlgorithmState::instance() {
    // Never destroyed: a thread still picking while the process exits keeps valid references.
    static AlgorithmState* state = new AlgorithmState;
    return *state;
}

std::atomic<std::int64_t>& AlgorithmState::counter(std::string_view scope, std::string_view key) {
    // '\n' cannot occur in a node or balancer name.
    std::string name;
    name.reserve(scope.size() + key.size() + 1);
    name.append(scope).push_back('\n');
    name.append(key);
    std::lock_guard lock(mutex_);
    if (auto it = counters_.find(name); it != counters_.end()) return *it->second;
    auto& made = counter_storage_.emplace_back(0);
    counters_.emplace(std::move(name), &made);
    return made;
}

std::shared_ptr<NodeReading> AlgorithmState::reading_locked(std::string_view node) {
    return detail::find_or_make(readings_, readings_swept_size_, node, [] {
        // Each reading on its own cache line: pollers write different nodes' readings.
        struct alignas(64) Slot {
            NodeReading reading;
        };
        auto slot = std::make_shared<Slot>();
        return std::shared_ptr<NodeReading>(slot, &slot->reading);
    });
}

std::shared_ptr<NodeReading> AlgorithmState::reading(std::string_view node) {
    std::lock_guard lock(mutex_);
    return reading_locked(node);
}

ReadingTable AlgorithmState::readings(const std::vector<std::string>& nodes) {
    ReadingTable table;
    table.reserve(nodes.size());
    std::lock_guard lock(mutex_);
    for (const auto& node : nodes) table.push_back(reading_locked(node));
    return table;
}

std::size_t AlgorithmState::reading_entries() {
    std::lock_guard lock(mutex_);
    return detail::sweep(readings_, readings_swept_size_);
}

}  // namespace rpclb
