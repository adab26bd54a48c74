// A table of objects shared by name that lives as long as their holders: what
// AlgorithmState's node readings and NodeLoads' load records both keep.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace rpclb::detail {

template <class T>
using WeakByName = std::map<std::string, std::weak_ptr<T>, std::less<>>;

/// The live object of `name` in `table`, else a new one from `make()` (a shared_ptr<T>),
/// stored weakly so that it is freed with its last holder. Entries of freed objects are
/// swept whenever the table has doubled since the last sweep (`swept_size`): amortised
/// O(1) per insertion, and never more than twice the objects alive. Not thread-safe: the
/// caller holds its table's lock.
template <class T, class Make>
std::shared_ptr<T> find_or_make(WeakByName<T>& table, std::size_t& swept_size, std::string_view name, Make&& make) {
    auto it = table.find(name);
    if (it != table.end())
        if (auto alive = it->second.lock()) return alive;
    std::shared_ptr<T> made = make();
    if (it != table.end()) {
        it->second = made;
        return made;
    }
    if (table.size() >= 2 * swept_size) {
        std::erase_if(table, [](const auto& entry) { return entry.second.expired(); });
        swept_size = table.size();
    }
    table.emplace(std::string(name), made);
    return made;
}

/// Sweeps the entries of freed objects now; returns how many are alive.
template <class T>
std::size_t sweep(WeakByName<T>& table, std::size_t& swept_size) {
    std::erase_if(table, [](const auto& entry) { return entry.second.expired(); });
    swept_size = table.size();
    return table.size();
}

}  // namespace rpclb::detail
