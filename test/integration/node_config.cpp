// rpclb-node --config FILE: nodes and balancers started from JSON files, flags that
// override the file, and bad files refused with exit status 2.
#define BOOST_TEST_MODULE node_config
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/port.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value_from.hpp>

#include <fstream>
#include <thread>
#include <map>

using namespace rpclb::test;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

// Every node here gets a wrong RPCLB_COOKIE: the file's cookie must win over it (the
// documented precedence), or the client, which holds test_cookie, never connects.
const std::pair<std::string, std::string> wrong_cookie_env{"RPCLB_COOKIE", "not-the-cluster-cookie"};

// The file of node `short_name`@127.0.0.1 hosting `workers` with weights a:3, b:1.
json::object weighted_node_file(const std::string& short_name, std::vector<std::string> seeds) {
    return json::object{
        {"name", short_name + "@127.0.0.1"},
        {"listen", "127.0.0.1:0"},
        {"seeds", json::value_from(seeds)},
        {"cookie", test_cookie},
        {"plugins", plugin_dir().string()},
        {"log_level", "info"},
        {"balancers", json::array{json::object{
                          {"name", "workers"},
                          {"algorithm", "weighted_round_robin"},
                          {"algorithm_opts", {{"weights", {{"a@127.0.0.1", 3}, {"b@127.0.0.1", 1}}}}},
                          {"node_match_list", "all"},
                          {"drain_timeout_ms", 15000},
                      }}},
    };
}

struct ConfigHarness : Harness {
    // Writes `text` to <dir>/<file_name>.
    std::filesystem::path write(const std::string& file_name, const std::string& text) {
        const auto path = dir() / file_name;
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }

    // Starts rpclb-node --config <dir>/<short_name>.json with `config` in it, plus `flags`;
    // stderr to <dir>/<short_name>.log.
    std::unique_ptr<Process> spawn(const std::string& short_name, const json::object& config,
                                   std::vector<std::string> flags = {}) {
        const auto file = write(short_name + ".json", json::serialize(config));
        flags.insert(flags.begin(), {"--config", file.string()});
        return std::make_unique<Process>(bin_dir() / "rpclb-node", flags, std::vector{wrong_cookie_env},
                                         dir() / (short_name + ".log"));
    }

    // spawn(), then waits up to 10 s for the `listening on` line.
    std::pair<std::unique_ptr<Process>, ListenAddress> start(const std::string& short_name, const json::object& config,
                                                             std::vector<std::string> flags = {}) {
        auto p = spawn(short_name, config, std::move(flags));
        const auto line = p->wait_for_line("listening on ", Process::Clock::now() + 10s);
        const auto address = line ? parse_listening_line(*line) : std::nullopt;
        if (!address)
            throw std::runtime_error(short_name + " did not report its listener; stderr:\n" + p->stderr_text());
        return {std::move(p), *address};
    }
};

// `count` blocking demo.node calls through `balancer`, one after the other: who answered.
std::vector<std::string> routed_sequence(rpclb::Cluster& client, const std::string& balancer, int count) {
    std::vector<std::string> sequence;
    for (int i = 0; i < count; ++i) {
        std::string peer;
        rpclb::CallOptions options;
        options.load_balancer = balancer;
        options.timeout = 5s;
        options.peer = &peer;
        const auto r = client.call("demo", "node", {}, options);
        BOOST_TEST_REQUIRE(r.has_value(), "call " << i << ": " << json::serialize(r.error().to_json()));
        BOOST_TEST_REQUIRE(r->as_string() == peer);
        sequence.push_back(peer);
    }
    return sequence;
}

std::map<std::string, int> tally(const std::vector<std::string>& sequence) {
    std::map<std::string, int> counts;
    for (const auto& n : sequence) ++counts[n];
    return counts;
}

const std::vector<std::string> a_and_b{"a@127.0.0.1", "b@127.0.0.1"};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(node_config, ConfigHarness)

BOOST_AUTO_TEST_CASE(balancer_from_the_file_routes_with_the_file_weights) {
    auto [a, a_address] = start("a", weighted_node_file("a", {}));
    auto [b, b_address] = start("b", weighted_node_file("b", {a_address.text()}));
    auto client = start_client({a_address.text()});
    BOOST_TEST_REQUIRE(wait_for_connected(*client, a_and_b), "connected: " << client->connected_nodes().size());
    BOOST_TEST_REQUIRE(wait_for_members(*client, "workers", a_and_b));

    // Smooth weighted round robin over 3:1 is exact on every cycle of four picks.
    const auto counts = tally(routed_sequence(*client, "workers", 40));
    BOOST_TEST(counts.at("a@127.0.0.1") == 30);
    BOOST_TEST(counts.at("b@127.0.0.1") == 10);
}

BOOST_AUTO_TEST_CASE(name_flag_overrides_the_file_name) {
    auto [a, address] = start("a", weighted_node_file("a", {}), {"--name", "renamed@127.0.0.1"});
    auto client = start_client({address.text()});
    BOOST_TEST_REQUIRE(wait_for_connected(*client, {"renamed@127.0.0.1"}),
                       "connected: " << (client->connected_nodes().empty() ? "nobody" : client->connected_nodes()[0]));
    const auto r = client->call("renamed@127.0.0.1", "demo", "node");
    BOOST_TEST_REQUIRE(r.has_value(), json::serialize(r.error().to_json()));
    BOOST_TEST(r->as_string() == "renamed@127.0.0.1");
    BOOST_TEST(wait_for_members(*client, "workers", {"renamed@127.0.0.1"}));
}

BOOST_AUTO_TEST_CASE(balancer_flag_replaces_the_file_balancer_of_the_same_name) {
    const std::vector<std::string> flag{"--balancer", "workers=round_robin"};
    auto [a, a_address] = start("a", weighted_node_file("a", {}), flag);
    auto [b, b_address] = start("b", weighted_node_file("b", {a_address.text()}), flag);
    auto client = start_client({a_address.text()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "workers", a_and_b));

    // Round robin, not the file's 3:1: the members take turns.
    const auto sequence = routed_sequence(*client, "workers", 40);
    const auto counts = tally(sequence);
    BOOST_TEST(counts.at("a@127.0.0.1") == 20);
    BOOST_TEST(counts.at("b@127.0.0.1") == 20);
    for (std::size_t i = 1; i < sequence.size(); ++i) BOOST_TEST_REQUIRE(sequence[i] != sequence[i - 1]);
}

BOOST_AUTO_TEST_CASE(bad_field_in_the_file_exits_2_naming_file_and_field) {
    auto config = weighted_node_file("a", {});
    config["balancers"].as_array()[0].as_object()["drain_timeout_ms"] = -1;
    auto p = spawn("a", config);
    const auto status = p->wait_exit(Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-node still runs on a bad config");
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
    const auto err = p->stderr_text();
    BOOST_TEST(err == "rpclb-node: " + (dir() / "a.json").string() +
                          ": config field \"balancers[0].drain_timeout_ms\": must be a non-negative integer "
                          "(milliseconds), got -1\n");
    BOOST_TEST(p->stdout_lines().empty());
}

BOOST_AUTO_TEST_CASE(bad_flag_value_over_a_good_file_exits_2_naming_the_field) {
    auto p = spawn("a", weighted_node_file("a", {}), {"--workers", "0"});
    const auto status = p->wait_exit(Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-node still runs with --workers 0");
    BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
    BOOST_TEST(p->stderr_text() == "rpclb-node: config field \"worker_threads\": must be in 1..1024, got 0\n");
}

BOOST_AUTO_TEST_CASE(negative_workers_flag_is_reported_as_given) {
    auto p = spawn("a", weighted_node_file("a", {}), {"--workers", "-1"});
    const auto status = p->wait_exit(Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-node still runs with --workers -1");
    BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
    const auto err = p->stderr_text();
    BOOST_TEST(err.find("rpclb-node: the argument ('-1') for option '--workers' is invalid: must be in 1..1024\n") ==
                   0u,
               err);
    BOOST_TEST(err.find("18446744073709551615") == std::string::npos, err);
}

// A seed that is not HOST:PORT is never dialled and is warned about once, however often
// the node redials its seeds; the node itself runs on.
BOOST_AUTO_TEST_CASE(bad_seed_is_warned_once) {
    // A good seed where nothing listens: each redial round (every reconnect_interval, 1 s)
    // logs "dialling" it at debug, which shows the rounds the bad seeds went through.
    const PortReservation nobody;
    auto started = start("a", weighted_node_file("a", {}),
                         {"--seed", "nonsense", "--seed", "127.0.0.1:99999", "--seed", nobody.address(),
                          "--log-level", "debug"});
    auto& p = started.first;  // a name, not a binding: lambdas capture it (clang-14 builds these tests)
    std::string err;
    const auto count = [&](const std::string& what) {
        std::size_t n = 0;
        for (auto at = err.find(what); at != std::string::npos; at = err.find(what, at + 1)) ++n;
        return n;
    };
    // The first dial and two redial rounds.
    BOOST_TEST_REQUIRE(eventually([&] {
        err = p->stderr_text();
        return count("dialling " + nobody.address()) >= 3u;
    }, 10s, 50ms), err);
    BOOST_TEST(count("seed \"nonsense\" is not HOST:PORT; it is never dialled") == 1u, err);
    BOOST_TEST(count("seed \"127.0.0.1:99999\" has no port in 1..65535; it is never dialled") == 1u, err);
    BOOST_TEST(count(" warning [mesh] seed \"nonsense\"") == 1u, err);
    BOOST_TEST(p->running());
}

BOOST_AUTO_TEST_CASE(missing_config_file_exits_2_naming_it) {
    const auto file = dir() / "absent.json";
    Process p(bin_dir() / "rpclb-node", {"--config", file.string()}, {wrong_cookie_env}, dir() / "absent.log");
    const auto status = p.wait_exit(Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
    BOOST_TEST(p.stderr_text() == "rpclb-node: " + file.string() +
                                      ": cannot read the config file: No such file or directory\n");
}

BOOST_AUTO_TEST_SUITE_END()
