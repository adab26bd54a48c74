#include <rpclb/node_load.hpp>

namespace rpclb {

NodeLoads& NodeLoads::instance() {
    // Never destroyed: a link or a pick still running while the process exits keeps
    // valid references.
    static NodeLoads* loads = new NodeLoads;
    return *loads;
}

// Entries whose record is gone are swept whenever the map has doubled since the last
// sweep: amortised O(1) per insertion, and never more than twice the records alive.
std::shared_ptr<NodeLoad> NodeLoads::of_locked(std::string_view node) {
    auto it = loads_.find(node);
    if (it != loads_.end())
        if (auto alive = it->second.lock()) return alive;
    auto made = std::make_shared<NodeLoad>();
    if (it != loads_.end()) {
        it->second = made;
        return made;
    }
    if (loads_.size() >= 2 * swept_size_) {
        std::erase_if(loads_, [](const auto& entry) { return entry.second.expired(); });
        swept_size_ = loads_.size();
    }
    loads_.emplace(std::string(node), made);
    return made;
}

std::shared_ptr<NodeLoad> NodeLoads::of(std::string_view node) {
    std::lock_guard lock(mutex_);
    return of_locked(node);
}

NodeLoadTable NodeLoads::of(const std::vector<std::string>& nodes) {
    NodeLoadTable table;
    table.reserve(nodes.size());
    std::lock_guard lock(mutex_);
    for (const auto& node : nodes) table.push_back(of_locked(node));
    return table;
}

std::size_t NodeLoads::entries() {
    std::lock_guard lock(mutex_);
    std::erase_if(loads_, [](const auto& entry) { return entry.second.expired(); });
    swept_size_ = loads_.size();
    return loads_.size();
}

}  // namespace rpclb
