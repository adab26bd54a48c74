// Load-balanced calls from a client node to real rpclb-node processes: the algorithms
// announced by the members, the empty-balancer error, and draining on SIGTERM.
#define BOOST_TEST_MODULE load_balancing
#include <boost/test/unit_test.hpp>

#include "support/load.hpp"
#include "support/node.hpp"

#include <rpclb/cluster_async.hpp>

#include <boost/json/serialize.hpp>

#include <atomic>
#include <csignal>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;
using rpclb::CallResult;
using rpclb::ErrorCode;

namespace {

// One blocking call through a balancer, as the caller saw it.
struct CallRecord {
    steady_clock::time_point sent, completed;
    std::string peer;  // the member it was sent to last (CallOptions::peer)
    CallResult result;
};

// `threads` threads make blocking demo.sleep [2] calls through `balancer` one after the
// other (a CallLoad), recording each, until the object goes (or stop()): joined on every exit.
class RecordedLoad {
public:
    RecordedLoad(rpclb::Cluster& client, std::string balancer, int threads)
        : load_(client, std::move(balancer), threads, [this](rpclb::Cluster& c, int, const CallOptions& given) {
              CallRecord r;
              auto options = given;
              options.timeout = 5s;
              options.peer = &r.peer;
              r.sent = steady_clock::now();
              r.result = c.call("demo", "sleep", {2}, options);
              r.completed = steady_clock::now();
              auto result = r.result;
              std::lock_guard lock(mutex_);
              records_.push_back(std::move(r));
              return result;
          }) {}

    void stop() { load_.finish(); }
    std::size_t completed() { return load_.total(); }
    std::size_t served_by(const std::string& node) { return load_.served_by(node); }
    // Every call made, once stop() has returned.
    const std::vector<CallRecord>& records() const { return records_; }

private:
    std::mutex mutex_;
    std::vector<CallRecord> records_;
    rpclb::test::CallLoad load_;  // last: its threads stop before the records go
};

// Three nodes hosting w (round_robin) and r (random), b and c seeded with a; a client
// seeded with a that hosts no balancer and has seen all members of both.
struct ThreeMembers : Harness {
    ThreeMembers() {
        const std::vector<std::string> balancers{"w=round_robin", "r=random"};
        a = start_node({.name = "a", .balancers = balancers});
        b = start_node({.name = "b", .seeds = {a->address()}, .balancers = balancers});
        c = start_node({.name = "c", .seeds = {a->address()}, .balancers = balancers});
        client = start_client({a->address()});
        if (!wait_for_connected(*client, all()) || !wait_for_members(*client, "w", all()) ||
            !wait_for_members(*client, "r", all()))
            throw std::runtime_error("the client did not see all members of w and r within 5 s");
    }

    std::vector<std::string> all() const { return sorted({a->name(), b->name(), c->name()}); }

    Node& node_named(const std::string& name) {
        for (auto* n : {a.get(), b.get(), c.get()})
            if (n->name() == name) return *n;
        throw std::invalid_argument("no node " + name);
    }

    std::unique_ptr<Node> a, b, c;
    std::unique_ptr<rpclb::Cluster> client;
};

std::string describe(const CallResult& r) {
    if (r) return "ok: " + boost::json::serialize(*r);
    return boost::json::serialize(r.error().to_json());
}

// Makes `count` blocking demo.node calls through `balancer`, one after the other; the
// answering node of each, in order. Each answer must match the reported peer.
std::vector<std::string> routed_sequence(rpclb::Cluster& client, const std::string& balancer, int count) {
    std::vector<std::string> sequence;
    for (int i = 0; i < count; ++i) {
        std::string peer;
        CallOptions options;
        options.load_balancer = balancer;
        options.timeout = 5s;
        options.peer = &peer;
        const auto r = client.call("demo", "node", {}, options);
        BOOST_TEST_REQUIRE(r.has_value(), "call " << i << " through " << balancer << ": " << describe(r));
        BOOST_TEST_REQUIRE(r->is_string());
        const std::string answered(r->get_string());
        BOOST_TEST_REQUIRE(answered == peer, "peer " << peer << " but " << answered << " answered");
        sequence.push_back(answered);
    }
    return sequence;
}

std::map<std::string, int> tally(const std::vector<std::string>& sequence) {
    std::map<std::string, int> counts;
    for (const auto& n : sequence) ++counts[n];
    return counts;
}

// True when the sequence repeats a fixed order of three distinct nodes (round robin).
bool cyclic_over_three(const std::vector<std::string>& s) {
    if (s.size() < 3 || s[0] == s[1] || s[1] == s[2] || s[0] == s[2]) return false;
    for (std::size_t i = 3; i < s.size(); ++i)
        if (s[i] != s[i - 3]) return false;
    return true;
}

std::string show(const std::map<std::string, int>& counts) {
    std::string out;
    for (const auto& [n, c] : counts) out += n + "=" + std::to_string(c) + " ";
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(load_balancing)

BOOST_FIXTURE_TEST_CASE(round_robin_gives_each_member_an_equal_share, ThreeMembers) {
    const auto sequence = routed_sequence(*client, "w", 300);
    const auto counts = tally(sequence);
    BOOST_TEST_MESSAGE("w: " << show(counts));
    BOOST_TEST(counts.size() == 3u, show(counts));
    for (const auto& name : all()) BOOST_TEST(counts.at(name) == 100, name << ": " << show(counts));
    BOOST_TEST(cyclic_over_three(sequence), "round robin did not take the members in turn");
}

BOOST_FIXTURE_TEST_CASE(random_reaches_every_member, ThreeMembers) {
    const auto sequence = routed_sequence(*client, "r", 300);
    const auto counts = tally(sequence);
    BOOST_TEST_MESSAGE("r: " << show(counts));
    BOOST_TEST_REQUIRE(counts.size() == 3u, show(counts));
    // Binomial(300, 1/3): below 50 is six standard deviations away from the mean of 100.
    for (const auto& name : all()) BOOST_TEST(counts.at(name) >= 50, name << ": " << show(counts));
    BOOST_TEST(!cyclic_over_three(sequence), "r routed in strict turns: the random algorithm was not used");
}

BOOST_FIXTURE_TEST_CASE(unknown_balancer_is_service_unavailable, ThreeMembers) {
    CallOptions options;
    options.load_balancer = "nope";
    options.retry = false;  // with retries the 5 s timeout would end the wait first
    options.timeout = 5s;
    const auto result = client->call("demo", "node", {}, options);
    BOOST_TEST_REQUIRE(!result.has_value(), describe(result));
    BOOST_TEST(result.error().code == ErrorCode::service_unavailable, describe(result));
    BOOST_TEST(result.error().message == "no members registered");
    // error() returns a copy: keep it while a pointer into it is used.
    const auto error = result.error();
    const auto* lb = error.details.if_contains("load_balancer");
    BOOST_TEST_REQUIRE(lb != nullptr, describe(result));
    BOOST_TEST(lb->as_string() == "nope");

    for (const auto& e : {client->get_members("nope").error(), client->select_node("nope").error(),
                          client->cast("", "demo", "node", {}, options).error()}) {
        BOOST_TEST(e.code == ErrorCode::service_unavailable);
        BOOST_TEST(e.message == "no members registered");
    }
}

BOOST_FIXTURE_TEST_CASE(client_without_instance_routes_with_announced_algorithm, ThreeMembers) {
    // The client hosts nothing; every member announces its algorithm.
    BOOST_TEST(client->balancer_names().empty());
    for (const auto& name : all()) {
        const auto w = client->groups().announcement("w", name);
        const auto r = client->groups().announcement("r", name);
        BOOST_TEST_REQUIRE((w && r), name << " announced nothing");
        BOOST_TEST(w->at("algorithm").as_string() == "round_robin");
        BOOST_TEST(r->at("algorithm").as_string() == "random");
    }
    const auto w = client->balancer("w");
    BOOST_TEST_REQUIRE(w.has_value(), w.error().message);
    BOOST_TEST(!(*w)->hosted());
    BOOST_TEST(!(*w)->joined());
    BOOST_TEST((*w)->options().algorithm == "round_robin");
    const auto r = client->balancer("r");
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
    BOOST_TEST((*r)->options().algorithm == "random");

    // 300 calls in flight at once still split exactly: each pick takes its own turn.
    struct Tally {
        std::mutex mutex;
        std::map<std::string, int> counts;
        std::vector<std::string> errors;
        std::atomic<int> left{300};
        std::promise<void> done;
    };
    auto t = std::make_shared<Tally>();
    for (int i = 0; i < 300; ++i) {
        CallOptions options;
        options.load_balancer = "w";
        options.timeout = 10s;
        client->async_call("", "demo", "node", {}, options, [t](CallResult result) {
            {
                std::lock_guard lock(t->mutex);
                if (result && result->is_string())
                    ++t->counts[std::string(result->get_string())];
                else
                    t->errors.push_back(describe(result));
            }
            if (--t->left == 0) t->done.set_value();
        });
    }
    BOOST_TEST_REQUIRE((t->done.get_future().wait_for(20s) == std::future_status::ready),
                       "300 concurrent calls did not finish within 20 s");
    std::lock_guard lock(t->mutex);
    BOOST_TEST(t->errors.empty(), (t->errors.empty() ? "" : t->errors.front()));
    BOOST_TEST(t->counts.size() == 3u, show(t->counts));
    for (const auto& name : all()) BOOST_TEST(t->counts[name] == 100, name << ": " << show(t->counts));
}

BOOST_FIXTURE_TEST_CASE(local_instance_wins_over_announcement, ThreeMembers) {
    rpclb::LoadBalancerOptions options;
    options.name = "w";
    options.algorithm = "random";
    const auto local = client->start_balancer(options);
    BOOST_TEST(local->hosted());
    BOOST_TEST(!local->joined(), "a client node must never join a group");
    BOOST_TEST(members_of(*client, "w") == all(), boost::test_tools::per_element());

    const auto sequence = routed_sequence(*client, "w", 300);
    const auto counts = tally(sequence);
    BOOST_TEST_MESSAGE("w with a local random instance: " << show(counts));
    BOOST_TEST(counts.size() == 3u, show(counts));
    BOOST_TEST(!cyclic_over_three(sequence), "the announced round_robin was used instead of the local instance");
}

BOOST_FIXTURE_TEST_CASE(terminated_member_finishes_in_flight_call, ThreeMembers) {
    // A call routed through w is running on its target when the target is told to stop.
    std::string target;
    auto promise = std::make_shared<std::promise<CallResult>>();
    auto future = promise->get_future();
    CallOptions options;
    options.load_balancer = "w";
    options.timeout = 10s;
    options.peer = &target;
    client->async_call("", "demo", "sleep", {1000}, options,
                       [promise](CallResult r) { promise->set_value(std::move(r)); });
    // `peer` is written before completion, from the routing thread (async_call routes in
    // the caller's thread); a direct call on the same connection answered afterwards
    // proves the sleep request reached the target first.
    BOOST_TEST_REQUIRE(!target.empty(), "the balancer reported no target");
    const auto echo = client->call(target, "demo", "echo", {1}, {.timeout = 5s});
    BOOST_TEST_REQUIRE(echo.has_value(), describe(echo));
    BOOST_TEST_REQUIRE((future.wait_for(0s) == std::future_status::timeout));

    auto& node = node_named(target);
    BOOST_TEST_REQUIRE(node.process().signal(SIGTERM));
    // The node leaves w first, so the client stops routing to it...
    auto others = all();
    others.erase(std::find(others.begin(), others.end(), target));
    BOOST_TEST(wait_for_members(*client, "w", others, 2s), "the draining node did not leave w");
    // ...and lets the call it is serving finish before it exits (doc/explanation/
    // draining-and-retries.md: a stopping node leaves, then drains, then closes).
    BOOST_TEST_REQUIRE((future.wait_for(5s) == std::future_status::ready), "the in-flight call never ended");
    const auto result = future.get();
    BOOST_TEST(result.has_value(), "in-flight call on a draining node: " << describe(result));
    if (result) BOOST_TEST(result->as_string() == target);
    const auto status = node.process().wait_exit(10s);
    BOOST_TEST_REQUIRE(status.has_value(), "the node did not exit within 10 s of SIGTERM");
    BOOST_TEST(WIFEXITED(*status), describe_status(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 0, describe_status(*status));
}

// A member SIGKILLed under a steady load of blocking calls from several threads: the calls
// it was serving fail, each naming why (`details.reason`), and a call sent after the
// first of those failures was delivered never goes to it: the client takes a member whose
// link is lost out of every pick before any caller learns of the loss
// (doc/explanation/draining-and-retries.md, "A lost link").
BOOST_FIXTURE_TEST_CASE(calls_sent_after_a_member_died_never_go_to_it, ThreeMembers) {
    const auto victim = c->name();
    RecordedLoad load(*client, "w", 8);
    BOOST_TEST_REQUIRE(eventually([&] { return load.served_by(victim) >= 100; }, 10s),
                       "the victim served too few calls before the kill");
    c->process().kill();
    const auto killed_at = steady_clock::now();
    BOOST_TEST(wait_for_members(*client, "w", sorted({a->name(), b->name()}), 5s),
               "the killed member did not leave w");
    const auto after_kill = load.completed();
    BOOST_TEST(eventually([&] { return load.completed() >= after_kill + 400; }, 10s),
               "the load stalled after the kill");
    load.stop();

    const auto& records = load.records();
    std::optional<steady_clock::time_point> first_failure;
    std::size_t failures = 0;
    for (const auto& r : records) {
        if (r.result) continue;
        ++failures;
        BOOST_TEST(r.result.error().details.contains("reason"), "a failure without a reason: " << describe(r.result));
        BOOST_TEST(r.peer == victim, "a call to " << r.peer << " failed: " << describe(r.result));
        if (!first_failure || r.completed < *first_failure) first_failure = r.completed;
    }
    BOOST_TEST_MESSAGE(records.size() << " calls, " << failures << " failed (the calls in flight on " << victim
                                      << " when it died)");
    // With no failure, no call went to the victim once it was dead (it would have failed).
    if (!first_failure) return;
    BOOST_TEST(duration_cast<milliseconds>(*first_failure - killed_at).count() < 2000);
    std::size_t later = 0;
    for (const auto& r : records) {
        if (r.sent <= *first_failure) continue;
        ++later;
        BOOST_TEST(r.peer != victim, "a call sent "
                                         << duration_cast<microseconds>(r.sent - *first_failure).count()
                                         << " us after the first failure was delivered went to the dead member: "
                                         << describe(r.result));
    }
    BOOST_TEST(later >= 400u, "too few calls were sent after the first failure: " << later);
}

BOOST_AUTO_TEST_SUITE_END()
