#include <rpclb/algorithm_state.hpp>

namespace rpclb {

AlgorithmState& AlgorithmState::instance() {
    static AlgorithmState state;
    return state;
}

std::atomic<std::int64_t>& AlgorithmState::counter(std::string_view balancer, std::string_view key) {
    std::string name;
    name.reserve(balancer.size() + key.size() + 1);
    name.append(balancer).push_back('\n');  // '\n' cannot occur in a node or balancer name
    name.append(key);
    std::lock_guard lock(mutex_);
    auto it = counters_.find(name);
    if (it != counters_.end()) return *it->second;
    auto& slot = counter_storage_.emplace_back().value;
    counters_.emplace(std::move(name), &slot);
    return slot;
}

NodeReading& AlgorithmState::reading(std::string_view node) {
    std::lock_guard lock(mutex_);
    auto it = readings_.find(node);
    if (it != readings_.end()) return *it->second;
    auto& slot = reading_storage_.emplace_back().reading;
    readings_.emplace(std::string(node), &slot);
    return slot;
}

}  // namespace rpclb
