// Replicated named groups of nodes: the `:pg` equivalent.
#pragma once

#include <rpclb/member_snapshot.hpp>

#include <boost/json/object.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rpclb {

/// Named groups of nodes, replicated to every connected node (Erlang's `:pg`, strong
/// eventual consistency). A node joins or leaves groups for itself; the mesh sends a
/// full sync of a node's groups when a connection is established and deltas afterwards;
/// when a peer is lost all its memberships leave at once and monitors are told.
///
/// Each membership carries an announcement (a JSON object): a LoadBalancer announces its
/// algorithm and options so nodes without an instance of it can route the same way.
///
/// Thread safety: distinct objects safe; shared objects safe. Monitor callbacks run on the
/// thread that applied a change (a network or control thread), one at a time, in the
/// order changes were applied, with no lock of Groups held: they may read Groups and call
/// monitor/demonitor, but should not block (they hold up the thread that applied the
/// change, and every later notification). A change's monitors have all run when the call
/// that applied it returns (join, leave, apply_*, remove_node): when another thread is
/// running callbacks of earlier changes, the applying thread waits for it to run these too.
/// Only a change applied from inside a callback is told after that call returns (once the
/// callback's own run ends).
class Groups {
public:
    /// Called with the group, the direction, and the nodes that joined or left it.
    using MonitorCallback =
        std::function<void(const std::string& group, NodeChange change,
                            const std::vector<std::string>& nodes)>;

    /// Sends a frame to every established peer (set by the mesh).
    using Broadcast = std::function<void(std::string frame)>;

    explicit Groups(std::string local_node);

    const std::string& local_node() const noexcept { return local_node_; }

    /// The local node joins `group` announcing `meta`. Joining again replaces `meta`; when
    /// it differs, the announcement monitors of `group` (here and on every node) are told
    /// (monitor_announcements()); the membership and its snapshot stay as they are.
    void join(const std::string& group, boost::json::object meta = {});

    /// The local node leaves `group`; no effect when it is not a member.
    void leave(const std::string& group);

    /// Distinct member node names in ascending order, with a version that changes with
    /// the set. Never null (an unknown group gives an empty snapshot).
    std::shared_ptr<const MemberSnapshot> members(std::string_view group) const;

    /// What `node` announced when it joined `group`; nullopt when it is not a member.
    std::optional<boost::json::object> announcement(std::string_view group,
                                                    std::string_view node) const;

    /// Names of the groups the local node is in.
    std::vector<std::string> local_groups() const;

    /// Groups with at least one member, any node's: the entries the table holds, since
    /// the entry of a group whose last member leaves is freed at once (so names that
    /// come and go cost nothing once gone). Takes the table's mutex.
    std::size_t group_count() const;
    /// Names of every group with at least one member, as this node knows them, ascending.
    std::vector<std::string> group_names() const;

    /// Registers `callback` for changes of `group`. Returns an id for demonitor().
    ///
    /// During the node's own Cluster::stop() the callback hears NodeChange::left for every
    /// member of `group`: this node's own membership as its balancers leave, then each
    /// peer's as its connection closes. Those are this node's view emptying, not the members
    /// stopping. An empty or unknown group has an empty members() snapshot, never an error.
    std::uint64_t monitor(const std::string& group, MonitorCallback callback);
    /// Registers `callback` for new announcements of members of `group` that stay members
    /// (a member joined again with a different `meta`): it gets NodeChange::joined and the
    /// node, under the same serialisation as monitors. monitor() callbacks are not told of
    /// these. Returns an id for demonitor().
    std::uint64_t monitor_announcements(const std::string& group, MonitorCallback callback);

    /// Removes a monitor; after it returns the callback is not running and won't run
    /// (except when called from that very callback, which then finishes its run).
    void demonitor(std::uint64_t id);

    /// Installs the one observer of every group's changes (the Cluster publishes them as
    /// `membership.join` / `membership.leave`); an empty function removes it. Called like
    /// a monitor, under the same serialisation (so, like monitors, not for a member's new
    /// announcement).
    void set_observer(MonitorCallback observer);

    // ---- used by the mesh -------------------------------------------------------------

    /// Installs the function that sends deltas to every peer.
    void set_broadcast(Broadcast broadcast);

    /// The "gsync" frame of the local node's memberships.
    std::string local_sync_frame() const;

    /// `node` says it is in exactly `groups` (a full sync).
    void apply_sync(const std::string& node,
                    const std::vector<std::pair<std::string, boost::json::object>>& groups);

    /// `node` joined `group` announcing `meta`.
    void apply_join(const std::string& node, const std::string& group, boost::json::object meta);

    /// `node` left `group`.
    void apply_leave(const std::string& node, const std::string& group);

    /// `node` runs as `incarnation` (the mesh's identity of one process under a name: a
    /// restarted node has a new one), set when a link to it is established, before its
    /// memberships are applied, and for the local node at the start. Kept when the node
    /// leaves, so that a member that comes back is told apart from a restart of it.
    void set_incarnation(const std::string& node, std::string incarnation);

    /// The incarnation of each of `nodes`, index-aligned; "" for a node whose incarnation is
    /// not known (no link has told it). Takes the table's mutex once.
    std::vector<std::string> incarnations(const std::vector<std::string>& nodes) const;

    /// `node` is gone: it leaves every group at once. When it returns, every monitor of
    /// those groups has been told (so every balancer's snapshot is without `node`).
    void remove_node(const std::string& node);

private:
    struct Group {
        std::map<std::string, boost::json::object, std::less<>> members;  // node -> meta
        std::shared_ptr<const MemberSnapshot> snapshot;
    };
    struct Change {
        std::string group;
        NodeChange change;
        std::vector<std::string> nodes;
        bool announced = false;  // a member's new announcement: for announcement monitors only
    };

    // Applies one membership edit under mutex_; records the change in `changes`.
    void set_member(const std::string& group, const std::string& node,
                    std::optional<boost::json::object> meta, std::vector<Change>& changes);
    // Queues `changes` for the monitors, in the order they were applied: called with
    // mutex_ held (lock order: mutex_, then monitor_mutex_).
    void enqueue(std::vector<Change>& changes);
    // Runs the queued notifications with no lock held, unless another thread is already
    // running them: that thread runs these too, in order, and this one waits until it has
    // (unless this thread is that one, inside a callback).
    void deliver();

    std::string local_node_;
    mutable std::mutex mutex_;
    std::map<std::string, Group, std::less<>> groups_;
    std::map<std::string, boost::json::object> local_;  // local memberships
    std::map<std::string, std::string, std::less<>> incarnations_;  // node -> incarnation
    Broadcast broadcast_;
    std::uint64_t next_version_ = 1;

    // Guards what follows; never held while a callback runs.
    std::mutex monitor_mutex_;
    std::condition_variable callback_done_;  // a callback returned (demonitor, deliver wait on it)
    std::map<std::uint64_t, std::pair<std::string, MonitorCallback>> monitors_;
    std::set<std::uint64_t> announcement_monitors_;  // ids in monitors_ from monitor_announcements
    std::uint64_t next_monitor_ = 1;
    MonitorCallback observer_;
    std::deque<Change> pending_;      // changes not yet delivered, in order
    std::uint64_t queued_ = 0;        // changes ever queued
    std::uint64_t delivered_ = 0;     // changes whose callbacks have all run
    bool delivering_ = false;         // a thread is running callbacks
    std::thread::id deliverer_;       // ... this one
    std::uint64_t running_ = 0;       // the monitor whose callback runs now (0: none)
};

}  // namespace rpclb
