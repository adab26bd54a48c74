#include <rpclb/detail/log.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/groups.hpp>

#include <algorithm>
#include <set>

namespace rpclb {

Groups::Groups(std::string local_node) : local_node_(std::move(local_node)) {}

void Groups::set_broadcast(Broadcast broadcast) {
    std::lock_guard lock(mutex_);
    broadcast_ = std::move(broadcast);
}

void Groups::join(const std::string& group, boost::json::object meta) {
    std::vector<Change> changes;
    Broadcast broadcast;
    {
        std::lock_guard lock(mutex_);
        local_[group] = meta;
        set_member(group, local_node_, meta, changes);
        broadcast = broadcast_;
        enqueue(changes);
    }
    if (broadcast) broadcast(detail::wire::encode(detail::wire::GroupJoin{group, std::move(meta)}));
    deliver();
}

void Groups::leave(const std::string& group) {
    std::vector<Change> changes;
    Broadcast broadcast;
    {
        std::lock_guard lock(mutex_);
        if (local_.erase(group) == 0) return;
        set_member(group, local_node_, std::nullopt, changes);
        broadcast = broadcast_;
        enqueue(changes);
    }
    if (broadcast) broadcast(detail::wire::encode(detail::wire::GroupLeave{group}));
    deliver();
}

std::shared_ptr<const MemberSnapshot> Groups::members(std::string_view group) const {
    static const auto empty = std::make_shared<const MemberSnapshot>();
    std::lock_guard lock(mutex_);
    auto it = groups_.find(group);
    return it == groups_.end() ? empty : it->second.snapshot;
}

std::optional<boost::json::object> Groups::announcement(std::string_view group,
                                                        std::string_view node) const {
    std::lock_guard lock(mutex_);
    auto g = groups_.find(group);
    if (g == groups_.end()) return std::nullopt;
    auto m = g->second.members.find(node);
    if (m == g->second.members.end()) return std::nullopt;
    return m->second;
}

std::vector<std::string> Groups::local_groups() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& [name, meta] : local_) names.push_back(name);
    return names;
}

std::size_t Groups::group_count() const {
    std::lock_guard lock(mutex_);
    return groups_.size();
}

std::vector<std::string> Groups::group_names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& [name, group] : groups_)
        if (!group.members.empty()) names.push_back(name);
    return names;
}

std::uint64_t Groups::monitor(const std::string& group, MonitorCallback callback) {
    std::lock_guard lock(monitor_mutex_);
    const auto id = next_monitor_++;
    monitors_.emplace(id, std::make_pair(group, std::move(callback)));
    return id;
}

std::uint64_t Groups::monitor_announcements(const std::string& group, MonitorCallback callback) {
    std::lock_guard lock(monitor_mutex_);
    const auto id = next_monitor_++;
    monitors_.emplace(id, std::make_pair(group, std::move(callback)));
    announcement_monitors_.insert(id);
    return id;
}

void Groups::set_observer(MonitorCallback observer) {
    std::lock_guard lock(monitor_mutex_);
    observer_ = std::move(observer);
}

void Groups::demonitor(std::uint64_t id) {
    std::unique_lock lock(monitor_mutex_);
    monitors_.erase(id);
    announcement_monitors_.erase(id);
    // A run of this callback on another thread must end first; a callback that removes
    // itself just finishes.
    if (deliverer_ != std::this_thread::get_id())
        callback_done_.wait(lock, [&] { return running_ != id; });
}

std::string Groups::local_sync_frame() const {
    detail::wire::GroupSync sync;
    std::lock_guard lock(mutex_);
    for (const auto& [name, meta] : local_) sync.groups.emplace_back(name, meta);
    return detail::wire::encode(sync);
}

void Groups::apply_sync(const std::string& node,
                        const std::vector<std::pair<std::string, boost::json::object>>& groups) {
    if (node == local_node_) return;
    std::vector<Change> changes;
    {
        std::lock_guard lock(mutex_);
        std::set<std::string, std::less<>> listed;
        for (const auto& [group, meta] : groups) {
            listed.insert(group);
            set_member(group, node, meta, changes);
        }
        std::vector<std::string> stale;
        for (const auto& [name, g] : groups_)
            if (g.members.contains(node) && !listed.contains(name)) stale.push_back(name);
        for (const auto& name : stale) set_member(name, node, std::nullopt, changes);
        enqueue(changes);
    }
    deliver();
}

void Groups::apply_join(const std::string& node, const std::string& group, boost::json::object meta) {
    if (node == local_node_) return;
    std::vector<Change> changes;
    {
        std::lock_guard lock(mutex_);
        set_member(group, node, std::move(meta), changes);
        enqueue(changes);
    }
    deliver();
}

void Groups::apply_leave(const std::string& node, const std::string& group) {
    if (node == local_node_) return;
    std::vector<Change> changes;
    {
        std::lock_guard lock(mutex_);
        set_member(group, node, std::nullopt, changes);
        enqueue(changes);
    }
    deliver();
}

void Groups::set_incarnation(const std::string& node, std::string incarnation) {
    std::lock_guard lock(mutex_);
    incarnations_[node] = std::move(incarnation);
}

std::vector<std::string> Groups::incarnations(const std::vector<std::string>& nodes) const {
    std::vector<std::string> out;
    out.reserve(nodes.size());
    std::lock_guard lock(mutex_);
    for (const auto& node : nodes) {
        const auto it = incarnations_.find(node);
        out.push_back(it == incarnations_.end() ? std::string() : it->second);
    }
    return out;
}

void Groups::remove_node(const std::string& node) {
    if (node == local_node_) return;
    std::vector<Change> changes;
    {
        std::lock_guard lock(mutex_);
        std::vector<std::string> names;
        for (const auto& [name, g] : groups_)
            if (g.members.contains(node)) names.push_back(name);
        for (const auto& name : names) set_member(name, node, std::nullopt, changes);
        enqueue(changes);
    }
    deliver();
}

void Groups::set_member(const std::string& group, const std::string& node,
                        std::optional<boost::json::object> meta, std::vector<Change>& changes) {
    auto& g = groups_[group];
    bool changed = false;
    NodeChange direction = NodeChange::joined;
    if (meta) {
        auto [it, inserted] = g.members.try_emplace(node);
        // A member that announces something new (its balancer changed algorithm) is told
        // to the monitors as joining again, so routing-only balancers re-read it; its
        // snapshot stays.
        if (!inserted && it->second != *meta) changes.push_back(Change{group, NodeChange::joined, {node}, true});
        it->second = std::move(*meta);
        changed = inserted;
    } else {
        changed = g.members.erase(node) > 0;
        direction = NodeChange::left;
    }
    if (!changed && g.snapshot) return;
    if (changed) changes.push_back(Change{group, direction, {node}});
    if (g.members.empty()) {
        groups_.erase(group);  // members() of an unknown group is the empty snapshot
        return;
    }
    auto snapshot = std::make_shared<MemberSnapshot>();
    snapshot->nodes.reserve(g.members.size());
    for (const auto& [name, m] : g.members) snapshot->nodes.push_back(name);
    snapshot->version = next_version_++;
    g.snapshot = std::move(snapshot);
}

void Groups::enqueue(std::vector<Change>& changes) {
    if (changes.empty()) return;
    std::lock_guard lock(monitor_mutex_);
    for (auto& change : changes) pending_.push_back(std::move(change));
    queued_ += changes.size();
    changes.clear();
}

void Groups::deliver() {
    std::unique_lock lock(monitor_mutex_);
    if (delivering_) {
        // That thread delivers ours too, after its own. Unless it is this one (a callback
        // changed membership), wait for it: the caller's change must have reached every
        // monitor when it returns (a lost peer out of every balancer before the calls it
        // was serving fail).
        if (deliverer_ == std::this_thread::get_id()) return;
        const auto ours = queued_;
        callback_done_.wait(lock, [&] { return delivered_ >= ours; });
        return;
    }
    delivering_ = true;
    deliverer_ = std::this_thread::get_id();
    while (!pending_.empty()) {
        const auto change = std::move(pending_.front());
        pending_.pop_front();
        RPCLB_LOG("groups", debug) << change.nodes.front()
                                   << (change.announced                         ? " announced again in "
                                       : change.change == NodeChange::joined ? " joined "
                                                                              : " left ")
                                   << change.group;
        std::vector<std::pair<std::uint64_t, MonitorCallback>> targets;
        if (observer_ && !change.announced) targets.emplace_back(0, observer_);
        for (const auto& [id, entry] : monitors_)
            if (entry.first == change.group && announcement_monitors_.contains(id) == change.announced)
                targets.emplace_back(id, entry.second);
        for (const auto& [id, callback] : targets) {
            if (id != 0 && !monitors_.contains(id)) continue;  // removed meanwhile
            running_ = id;
            lock.unlock();
            try {
                callback(change.group, change.change, change.nodes);
            } catch (const std::exception& e) {
                RPCLB_LOG("groups", error) << "monitor of " << change.group << " threw: " << e.what();
            } catch (...) {
                RPCLB_LOG("groups", error) << "monitor of " << change.group << " threw";
            }
            lock.lock();
            running_ = 0;
            callback_done_.notify_all();
        }
        ++delivered_;
        callback_done_.notify_all();
    }
    delivering_ = false;
    deliverer_ = {};
}

}  // namespace rpclb
