#define BOOST_TEST_MODULE groups
#include <rpclb/detail/wire.hpp>
#include <rpclb/groups.hpp>

#include <boost/test/unit_test.hpp>

#include <malloc.h>

#include "support/wait.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wire = rpclb::detail::wire;
using rpclb::Groups;
using rpclb::NodeChange;

namespace {

// Two nodes' Groups joined by a queue of frames, as the mesh would carry them.
struct Pair {
    Groups a{"a@h"};
    Groups b{"b@h"};
    std::deque<std::pair<Groups*, std::string>> in_flight;  // (receiver, frame)
    bool connected = false;

    Pair() {
        a.set_broadcast([this](std::string f) { if (connected) in_flight.emplace_back(&b, std::move(f)); });
        b.set_broadcast([this](std::string f) { if (connected) in_flight.emplace_back(&a, std::move(f)); });
    }
    void connect() {
        connected = true;
        in_flight.emplace_back(&b, a.local_sync_frame());
        in_flight.emplace_back(&a, b.local_sync_frame());
        deliver();
    }
    void deliver() {
        while (!in_flight.empty()) {
            auto [to, text] = std::move(in_flight.front());
            in_flight.pop_front();
            const auto& from = to == &a ? b.local_node() : a.local_node();
            auto frame = wire::decode(text);
            BOOST_REQUIRE(frame.has_value());
            if (auto* s = std::get_if<wire::GroupSync>(&*frame)) to->apply_sync(from, s->groups);
            else if (auto* j = std::get_if<wire::GroupJoin>(&*frame)) to->apply_join(from, j->group, j->meta);
            else if (auto* l = std::get_if<wire::GroupLeave>(&*frame)) to->apply_leave(from, l->group);
            else BOOST_FAIL("unexpected frame " << text);
        }
    }
    void lose() {  // the connection drops: each side removes the other
        connected = false;
        in_flight.clear();
        a.remove_node("b@h");
        b.remove_node("a@h");
    }
};

std::vector<std::string> nodes(const Groups& g, const std::string& group) { return g.members(group)->nodes; }

}  // namespace

BOOST_AUTO_TEST_SUITE(groups)

BOOST_AUTO_TEST_CASE(full_sync_on_connect_shares_existing_memberships) {
    Pair p;
    p.a.join("w", {{"algorithm", "round_robin"}});
    p.b.join("w");
    p.b.join("x");
    BOOST_TEST(nodes(p.a, "w") == std::vector<std::string>{"a@h"});
    p.connect();
    BOOST_TEST(nodes(p.a, "w") == (std::vector<std::string>{"a@h", "b@h"}));
    BOOST_TEST(nodes(p.b, "w") == (std::vector<std::string>{"a@h", "b@h"}));
    BOOST_TEST(nodes(p.a, "x") == std::vector<std::string>{"b@h"});
    auto meta = p.b.announcement("w", "a@h");
    BOOST_REQUIRE(meta.has_value());
    BOOST_TEST(meta->at("algorithm").as_string() == "round_robin");
}

BOOST_AUTO_TEST_CASE(deltas_after_connect_replicate_join_and_leave) {
    Pair p;
    p.connect();
    p.a.join("w");
    p.deliver();
    BOOST_TEST(nodes(p.b, "w") == std::vector<std::string>{"a@h"});
    p.a.leave("w");
    p.deliver();
    BOOST_TEST(nodes(p.b, "w").empty());
}

BOOST_AUTO_TEST_CASE(members_are_distinct_and_versioned) {
    Groups g{"a@h"};
    g.join("w");
    const auto v1 = g.members("w")->version;
    g.join("w", {{"k", 1}});  // joining again only replaces the announcement
    BOOST_TEST(g.members("w")->nodes.size() == 1u);
    g.apply_join("c@h", "w", {});
    BOOST_TEST(g.members("w")->nodes.size() == 2u);
    BOOST_TEST(g.members("w")->version != v1);
    BOOST_TEST(g.members("unknown")->nodes.empty());
}

BOOST_AUTO_TEST_CASE(lost_peer_leaves_every_group_and_monitors_hear_it) {
    Pair p;
    p.b.join("w");
    p.b.join("x");
    std::vector<std::pair<NodeChange, std::string>> seen;
    const auto id = p.a.monitor("w", [&](const std::string&, NodeChange c, const std::vector<std::string>& n) {
        for (const auto& node : n) seen.emplace_back(c, node);
    });
    p.connect();
    BOOST_REQUIRE_EQUAL(seen.size(), 1u);
    BOOST_TEST((seen[0].first == NodeChange::joined));
    BOOST_TEST(seen[0].second == "b@h");
    p.lose();
    BOOST_TEST(nodes(p.a, "w").empty());
    BOOST_TEST(nodes(p.a, "x").empty());
    BOOST_REQUIRE_EQUAL(seen.size(), 2u);
    BOOST_TEST((seen[1].first == NodeChange::left));
    p.a.demonitor(id);
    p.connect();
    BOOST_TEST(seen.size() == 2u);  // demonitored: no more callbacks
    BOOST_TEST(nodes(p.a, "w") == std::vector<std::string>{"b@h"});
}

BOOST_AUTO_TEST_CASE(full_sync_drops_memberships_the_peer_no_longer_has) {
    Pair p;
    p.b.join("w");
    p.connect();
    p.lose();
    p.b.join("x");  // while disconnected b leaves w and joins x
    p.b.leave("w");
    p.a.apply_join("b@h", "w", {});  // a stale view of b
    p.connect();
    BOOST_TEST(nodes(p.a, "w").empty());
    BOOST_TEST(nodes(p.a, "x") == std::vector<std::string>{"b@h"});
}

BOOST_AUTO_TEST_CASE(frames_about_the_local_node_are_ignored) {
    Groups g{"a@h"};
    g.apply_join("a@h", "w", {});
    BOOST_TEST(g.members("w")->nodes.empty());
    g.join("w");
    g.remove_node("a@h");
    BOOST_TEST(g.members("w")->nodes == std::vector<std::string>{"a@h"});
}

BOOST_AUTO_TEST_CASE(churned_node_and_group_names_leave_no_entries_behind) {
    // Thousands of distinct nodes come, join a group of their own and a shared one, and
    // go (half by leaving, half by being lost): the table holds the same entries after as
    // before, and the heap keeps nothing per name.
    Groups g{"a@h"};
    g.join("kept");
    const auto groups_before = g.group_count();
    constexpr int churned = 4000;
    std::size_t halfway = 0;
    for (int i = 0; i < churned; ++i) {
        if (i == churned / 2) halfway = mallinfo2().uordblks;
        const auto node = "churned" + std::to_string(i) + "@h";
        const auto own = "own" + std::to_string(i);
        g.apply_join(node, own, {{"algorithm", "random"}});
        g.apply_join(node, "kept", {});
        BOOST_TEST_REQUIRE(g.group_count() == groups_before + 1);
        BOOST_TEST_REQUIRE(g.members("kept")->nodes.size() == 2u);
        if (i % 2 == 0) {
            g.apply_leave(node, own);
            g.apply_leave(node, "kept");
        } else {
            g.remove_node(node);
        }
    }
    BOOST_TEST(g.group_count() == groups_before);
    BOOST_TEST(nodes(g, "kept") == std::vector<std::string>{"a@h"});
    const double per_name = (static_cast<double>(mallinfo2().uordblks) - static_cast<double>(halfway)) /
                            (churned - churned / 2);
    BOOST_TEST_MESSAGE(per_name << " heap bytes kept per churned name");
    BOOST_TEST(per_name < 16.0);
}

// A lost peer is out of every monitor's view (every balancer's snapshot) when
// remove_node returns, even while another thread is still telling the monitors of an
// earlier change: the applying thread waits for that thread to tell them of its change
// too. (Two threads: the case is one thread delivering while another applies.)
BOOST_AUTO_TEST_CASE(remove_node_returns_once_monitors_heard_it_while_another_thread_delivers) {
    Groups g("a@h");
    g.apply_join("gone@h", "w", {});
    std::mutex mutex;
    std::condition_variable cv;
    bool first_running = false, release_first = false, gone_left = false;
    g.monitor("w", [&](const std::string&, NodeChange change, const std::vector<std::string>& nodes) {
        std::unique_lock lock(mutex);
        if (change == NodeChange::joined && nodes.front() == "first@h") {
            first_running = true;
            cv.notify_all();
            cv.wait(lock, [&] { return release_first; });  // holds the delivery up
        }
        if (change == NodeChange::left && nodes.front() == "gone@h") gone_left = true;
    });
    std::thread deliverer([&] { g.apply_join("first@h", "w", {}); });
    struct Release {  // lets the deliverer go and joins it on every exit
        std::mutex& m;
        std::condition_variable& cv;
        bool& release;
        std::thread& t;
        ~Release() {
            {
                std::lock_guard lock(m);
                release = true;
            }
            cv.notify_all();
            t.join();
        }
    } release{mutex, cv, release_first, deliverer};
    {
        std::unique_lock lock(mutex);
        BOOST_TEST_REQUIRE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return first_running; }));
    }
    std::atomic<bool> returned{false};
    bool heard_when_returned = false;
    std::thread remover([&] {
        g.remove_node("gone@h");
        std::lock_guard lock(mutex);
        heard_when_returned = gone_left;
        returned = true;
    });
    // Held up behind the first delivery, remove_node must not return: it does at once when
    // it leaves its change to the delivering thread without waiting.
    const bool held = rpclb::test::consistently([&] { return !returned.load(); }, std::chrono::milliseconds(200));
    {
        std::lock_guard lock(mutex);
        release_first = true;
    }
    cv.notify_all();
    remover.join();
    BOOST_TEST(held, "remove_node returned while its change was still queued behind another delivery");
    BOOST_TEST(heard_when_returned, "remove_node returned before the monitor heard the node leave");
    BOOST_TEST(g.members("w")->nodes == std::vector<std::string>{"first@h"});
}

BOOST_AUTO_TEST_SUITE_END()
