// The pick path allocates nothing: round_robin, weighted_round_robin, least_connections,
// power_of_two, peak_ewma and hash_ring with bounded loads, on two threads at once, once
// each thread's first pick has run; least_connections, power_of_two and peak_ewma also
// while members fail (doc/how-to/write-a-plugin.md "The hot path"). The global operator
// new of this executable counts every allocation per thread, the plugins' included.
#define BOOST_TEST_MODULE algorithms_pick_path
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>

#include <boost/json/parse.hpp>

#include <array>
#include <chrono>
#include <cstdlib>
#include <latch>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

thread_local std::size_t allocations = 0;

void* counted(std::size_t size, std::size_t alignment = 0) {
    ++allocations;
    if (size == 0) size = 1;
    void* memory = alignment > alignof(std::max_align_t)
                       ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                       : std::malloc(size);
    if (!memory) throw std::bad_alloc();
    return memory;
}

}  // namespace

void* operator new(std::size_t size) { return counted(size); }
void* operator new[](std::size_t size) { return counted(size); }
void* operator new(std::size_t size, std::align_val_t alignment) {
    return counted(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
    return counted(size, static_cast<std::size_t>(alignment));
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }

namespace {

std::string this_balancer(std::string_view algorithm) {
    return std::string(boost::unit_test::framework::current_test_case().p_name) + "/" +
           std::string(algorithm);
}

std::shared_ptr<rpclb::SelectionAlgorithm> load(const std::string& name, std::string_view options_json) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create(name);
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({this_balancer(name), "me@host", nullptr},
                       boost::json::parse(options_json).as_object());
    return *algorithm;
}

rpclb::MemberSnapshot eight_members() {
    rpclb::MemberSnapshot snapshot;
    for (int i = 0; i < 8; ++i) snapshot.nodes.push_back("node" + std::to_string(i) + "@host");
    snapshot.version = 1;
    snapshot.count_calls();
    return snapshot;
}

// A pick and its release as a balancer makes them: counted, and the algorithm told.
void release(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members, std::size_t index) {
    members.calls[index]->release();
    algorithm.release(members, index, rpclb::CallOutcome{});
}

struct Case {
    std::string algorithm;
    std::string options;
    bool releases;  // the algorithm counts calls: release each pick, as a balancer does
};

const std::array<Case, 6> cases{{
    {"round_robin", "{}", false},
    {"weighted_round_robin", R"({"weights": {"node0@host": 3, "node1@host": 2}})", false},
    {"least_connections", "{}", true},
    {"power_of_two", "{}", true},
    {"peak_ewma", "{}", true},
    {"hash_ring", R"({"load_factor": 1.25})", true},
}};

}  // namespace

BOOST_AUTO_TEST_SUITE(pick_path)

BOOST_AUTO_TEST_CASE(picks_and_releases_allocate_nothing_on_two_threads) {
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.algorithm) {
            // A snapshot serves one balancer, as a group's snapshots do (the counting
            // algorithms keep their table in it).
            const auto members = eight_members();
            auto algorithm = load(c.algorithm, c.options);
            constexpr int threads = 2, picks = 20'000;
            std::array<std::size_t, threads> allocated{};
            std::array<int, threads> failed{};
            std::latch warmed(threads);
            rpclb::PickOptions key;
            key.key = "user-42";
            {
                std::vector<std::jthread> workers;
                for (int t = 0; t < threads; ++t)
                    workers.emplace_back([&, t] {
                        // The first pick on a snapshot may build its state: not counted.
                        auto first = algorithm->choose_from_nodes(members, key);
                        if (first) {
                            members.calls[*first]->acquire();
                            if (c.releases) release(*algorithm, members, *first);
                        }
                        warmed.arrive_and_wait();
                        const std::size_t before = allocations;
                        for (int i = 0; i < picks; ++i) {
                            auto index = algorithm->choose_from_nodes(members, key);
                            if (!index) {
                                ++failed[t];
                                continue;
                            }
                            members.calls[*index]->acquire();
                            if (c.releases) release(*algorithm, members, *index);
                        }
                        allocated[t] = allocations - before;
                    });
            }
            for (int t = 0; t < threads; ++t) {
                BOOST_TEST(failed[t] == 0, "thread " << t);
                BOOST_TEST(allocated[t] == 0u, "thread " << t);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(picks_and_releases_with_failure_loads_allocate_nothing) {
    // Every fourth call fails, so picks read the members' failure loads (or costs): once
    // the first pick and the first failure on the snapshot have built its table, nothing
    // allocates.
    rpclb::CallOutcome failure;
    failure.error = rpclb::ErrorCode::service_unavailable;
    failure.origin = rpclb::ErrorOrigin::remote;
    failure.latency = std::chrono::microseconds(100);
    for (const std::string name : {"least_connections", "power_of_two", "peak_ewma"}) {
        BOOST_TEST_CONTEXT(name) {
            const auto members = eight_members();
            auto algorithm = load(name, "{}");
            const auto call = [&](int i) {
                auto index = algorithm->choose_from_nodes(members, {});
                BOOST_TEST_REQUIRE(index.has_value());
                members.calls[*index]->acquire();
                members.calls[*index]->release();
                algorithm->release(members, *index, i % 4 == 0 ? failure : rpclb::CallOutcome{});
            };
            call(0);
            const std::size_t before = allocations;
            for (int i = 1; i < 20'000; ++i) call(i);
            BOOST_TEST(allocations - before == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(allocation_counter_sees_plugin_allocations) {
    // The check above can fail: a new snapshot makes a plugin build its state, and the
    // counter sees that allocation from inside the plugin.
    auto algorithm = load("weighted_round_robin", "{}");
    const auto members = eight_members();
    const std::size_t before = allocations;
    (void)algorithm->choose_from_nodes(members, {});
    BOOST_TEST(allocations > before);
}

BOOST_AUTO_TEST_CASE(balancer_pick_allocates_nothing_select_node_copies_the_name) {
    // LoadBalancer::pick keeps the class's "no allocation" promise through a real balancer
    // on a real node; select_node copies the name, which allocates for a name too long for
    // std::string's inline buffer, as this node's is.
    using namespace std::chrono_literals;
    rpclb::Cluster node(rpclb::test::in_process_node_options("a-node-with-a-long-name@127.0.0.1"));
    node.start();
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.algorithm) {
            auto options = rpclb::test::balancer_options("pick_path_" + c.algorithm, c.algorithm);
            options.algorithm_opts = boost::json::parse(c.options).as_object();
            auto balancer = node.start_balancer(options);
            BOOST_TEST_REQUIRE(rpclb::test::eventually([&] { return balancer->members()->nodes.size() == 1; }, 5s));
            rpclb::PickOptions key;
            key.key = "user-42";
            auto first = balancer->pick(key);  // builds what the algorithm keeps per snapshot
            BOOST_TEST_REQUIRE(first.has_value());
            balancer->track(*first);
            balancer->release(*first, {});
            const std::size_t before = allocations;
            for (int i = 0; i < 1'000; ++i) {
                auto picked = balancer->pick(key);
                BOOST_TEST_REQUIRE(picked.has_value());
                balancer->track(*picked);
                balancer->release(*picked, {});
            }
            BOOST_TEST(allocations - before == 0u);
            const std::size_t before_select = allocations;
            auto selected = balancer->select_node();
            BOOST_TEST_REQUIRE(selected.has_value());
            BOOST_TEST(allocations - before_select > 0u);
            balancer->release_node(*selected);
            node.stop_balancer(options.name);
        }
    }
    node.stop();
}

BOOST_AUTO_TEST_SUITE_END()
