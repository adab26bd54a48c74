// A rolling restart under continuous load loses no call (doc/explanation/
// draining-and-retries.md, seed §10.7): three rpclb-node processes host balancer `workers`; a client keeps
// calling through it from several threads while each node in turn is stopped with SIGTERM
// (it leaves, refuses new work with `draining`, drains, says bye) and started again.
#define BOOST_TEST_MODULE rolling_restart
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

constexpr int load_threads = 16;

// Calls `workers` in a loop from several threads until stopped; remembers every error.
class Load {
public:
    explicit Load(rpclb::Cluster& client) {
        for (int i = 0; i < load_threads; ++i)
            threads_.emplace_back([this, &client, i] {
                rpclb::CallOptions options;
                options.load_balancer = "workers";
                options.timeout = 10s;
                while (!stop_) {
                    // Many short calls at once, so that SIGTERM finds calls in flight and on the wire.
                    // Even threads: instant calls, many on the wire at SIGTERM; odd threads:
                    // 3 ms calls, running on the node when SIGTERM comes.
                    auto r = i % 2 == 0 ? client.call("demo", "node", {}, options)
                                        : client.call("demo", "sleep", {3}, options);
                    std::lock_guard lock(mutex_);
                    if (r) {
                        ++served_[std::string(r->as_string())];
                    } else {
                        errors_.push_back(r.error().message + " " + boost::json::serialize(r.error().details));
                    }
                }
            });
    }

    ~Load() { finish(); }

    void finish() {
        stop_ = true;
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    std::size_t served_by(const std::string& node) {
        std::lock_guard lock(mutex_);
        return served_[node];
    }

    std::size_t total() {
        std::lock_guard lock(mutex_);
        std::size_t n = errors_.size();
        for (const auto& [node, count] : served_) n += count;
        return n;
    }

    std::vector<std::string> errors() {
        std::lock_guard lock(mutex_);
        return errors_;
    }

private:
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::map<std::string, std::size_t> served_;
    std::vector<std::string> errors_;
    std::vector<std::thread> threads_;
};

bool is_member(rpclb::Cluster& client, const std::string& node) {
    auto members = client.get_members("workers");
    return members && std::find(members->begin(), members->end(), node) != members->end();
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(rolling_restart, Harness)

BOOST_AUTO_TEST_CASE(restarting_every_node_in_turn_under_load_loses_no_call) {
    std::map<std::string, std::unique_ptr<Node>> nodes;
    const std::vector<std::string> names{"a", "b", "c"};
    nodes["a"] = start_node({.name = "a", .balancers = {"workers=round_robin"}});
    nodes["b"] = start_node({.name = "b", .seeds = {nodes["a"]->address()}, .balancers = {"workers=round_robin"}});
    nodes["c"] = start_node({.name = "c", .seeds = {nodes["a"]->address()}, .balancers = {"workers=round_robin"}});
    auto client = start_client({nodes["a"]->address(), nodes["b"]->address(), nodes["c"]->address()});
    BOOST_REQUIRE(wait_for_members(*client, "workers", {"a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"}, 10s));

    Load load(*client);
    for (const auto& name : names) {
        const auto full = name + "@127.0.0.1";
        // Let calls flow to the node before it goes.
        const auto before = load.served_by(full);
        BOOST_REQUIRE(eventually([&] { return load.served_by(full) >= before + 20; }, 10s));

        auto& node = nodes[name];
        BOOST_REQUIRE(node->process().signal(SIGTERM));
        const auto status = node->process().wait_exit(Process::Clock::now() + 30s);
        BOOST_REQUIRE_MESSAGE(status.has_value(), name << " did not exit after SIGTERM");
        BOOST_TEST(*status == 0, name << " exited with " << *status);
        BOOST_REQUIRE(eventually([&] { return !is_member(*client, full); }, 5s));

        // Back under the same name (a new incarnation), seeded from a live node.
        const auto& seed = nodes[name == "a" ? "b" : "a"];
        node = start_node({.name = name, .seeds = {seed->address()}, .balancers = {"workers=round_robin"}});
        BOOST_REQUIRE_MESSAGE(eventually([&] { return is_member(*client, full); }, 10s),
                              full << " did not rejoin workers");
        const auto rejoined = load.served_by(full);
        BOOST_REQUIRE_MESSAGE(eventually([&] { return load.served_by(full) >= rejoined + 20; }, 10s),
                              full << " serves no calls after its restart");
    }
    load.finish();

    const auto errors = load.errors();
    BOOST_TEST(errors.empty(), errors.size() << " of " << load.total() << " calls failed; first: "
                                             << (errors.empty() ? "" : errors.front()));
    BOOST_TEST_MESSAGE(load.total() << " calls, " << errors.size() << " errors");
    BOOST_TEST(load.total() > 300u);
}

BOOST_AUTO_TEST_SUITE_END()
