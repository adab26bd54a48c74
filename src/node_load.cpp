#include <rpclb/node_load.hpp>

#include "weak_by_name.hpp"

namespace rpclb {

NodeLoads& NodeLoads::instance() {
    // Never destroyed: a link or a pick still running while the process exits keeps
    // valid references.
    static NodeLoads* loads = new NodeLoads;
    return *loads;
}

std::shared_ptr<NodeLoad> NodeLoads::of_locked(std::string_view node) {
    return detail::find_or_make(loads_, swept_size_, node, [] { return std::make_shared<NodeLoad>(); });
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
    return detail::sweep(loads_, swept_size_);
}

}  // namespace rpclb
