// Bad configuration given to rpclb-node: each gets a clear error. A plugin directory that
// does not exist is reported and the node serves; a balancer that cannot start, or a
// listener address or a discovery URL that is not one, stops the node.
#define BOOST_TEST_MODULE bad_config
#include "support/node.hpp"

#include <boost/test/unit_test.hpp>

using namespace std::chrono_literals;
using namespace rpclb::test;

BOOST_FIXTURE_TEST_SUITE(bad_config, Harness)

BOOST_AUTO_TEST_CASE(missing_plugin_directory_is_reported_and_node_serves) {
    auto a = start_node({.name = "a",
                         .balancers = {"good=round_robin"},
                         .extra_args = {"--plugins", "/nonexistent/rpclb-plugins"}});
    auto client = start_client({a->address()});
    BOOST_REQUIRE(wait_for_members(*client, "good", {"a@127.0.0.1"}));

    // The missing directory is named once at start.
    BOOST_TEST(a->log_contains("/nonexistent/rpclb-plugins"));
    BOOST_TEST(a->log_contains("does not exist"));

    rpclb::CallOptions options;
    options.timeout = 2s;
    options.load_balancer = "good";
    auto good = client->call("demo", "node", {}, options);
    BOOST_REQUIRE(good.has_value());
    BOOST_TEST(good->as_string() == "a@127.0.0.1");
    BOOST_TEST(a->process().running());
}

BOOST_AUTO_TEST_CASE(unknown_algorithm_stops_the_node_with_status_1) {
    // A balancer the node was asked for and cannot start: it names the balancer, the
    // plugin file and where it looked, and exits instead of serving without it.
    Process p(bin_dir() / "rpclb-node",
              {"--name", "x@127.0.0.1", "--plugins", plugin_dir().string(), "--balancer", "good=round_robin",
               "--balancer", "broken=no_such_algorithm"},
              {{"RPCLB_COOKIE", test_cookie}}, dir() / "x.log");
    const auto status = p.wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE_MESSAGE(status.has_value(), "rpclb-node still runs; stderr:\n" << p.stderr_text());
    BOOST_TEST(WIFEXITED(*status), describe_status(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    const auto err = p.stderr_text();
    BOOST_TEST(err.find("cannot start balancer \"broken=no_such_algorithm\"") != std::string::npos, err);
    BOOST_TEST(err.find("librpclb_no_such_algorithm.so") != std::string::npos, err);
    BOOST_TEST(err.find(plugin_dir().string()) != std::string::npos, err);
    // It never said it was listening: a script waiting for that line sees the exit.
    BOOST_TEST(!p.wait_for_line("listening on ", Process::Clock::now() + 1s).has_value());
}

BOOST_AUTO_TEST_CASE(the_tools_find_the_plugins_of_their_own_build_tree) {
    // No --plugins and no RPCLB_PLUGIN_PATH: rpclb-node (in <build>/bin) finds
    // <build>/plugins by itself, and a plugin it does not find names that folder.
    const auto build_plugins = std::filesystem::canonical(bin_dir() / ".." / "plugins");
    Process good(bin_dir() / "rpclb-node", {"--name", "g@127.0.0.1", "--balancer", "lb=round_robin"},
                 {{"RPCLB_COOKIE", test_cookie}, {"RPCLB_PLUGIN_PATH", ""}}, dir() / "g.log");
    const auto listening = good.wait_for_line("listening on ", Process::Clock::now() + 10s);
    BOOST_REQUIRE_MESSAGE(listening.has_value(), good.stderr_text());
    BOOST_TEST(good.running());
    // rpclb-call too, routing with an algorithm of its own.
    Process call(bin_dir() / "rpclb-call",
                 {"--seed", listening->substr(std::string("listening on ").size()), "--balancer", "lb", "--algorithm",
                  "round_robin", "demo", "node"},
                 {{"RPCLB_COOKIE", test_cookie}, {"RPCLB_PLUGIN_PATH", ""}}, dir() / "call.log");
    const auto call_status = call.wait_exit(Process::Clock::now() + 20s);
    BOOST_REQUIRE_MESSAGE(call_status.has_value(), "rpclb-call still runs; stderr:\n" << call.stderr_text());
    BOOST_TEST(WEXITSTATUS(*call_status) == 0, call.stderr_text());
    Process bad(bin_dir() / "rpclb-node", {"--name", "b@127.0.0.1", "--balancer", "lb=no_such_algorithm"},
                {{"RPCLB_COOKIE", test_cookie}, {"RPCLB_PLUGIN_PATH", ""}}, dir() / "b.log");
    const auto status = bad.wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE_MESSAGE(status.has_value(), "rpclb-node still runs; stderr:\n" << bad.stderr_text());
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    const auto err = bad.stderr_text();
    BOOST_TEST(err.find(build_plugins.string()) != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(invalid_listen_address_fails_with_a_clear_message) {
    // The node must exit at once with a message naming the address, not hang or crash.
    Process p(bin_dir() / "rpclb-node", {"--name", "x@127.0.0.1", "--listen", "127.0.0.1:abc"},
              {{"RPCLB_COOKIE", test_cookie}}, dir() / "x.log");
    const auto status = p.wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE(status.has_value());
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) != 0);
    BOOST_TEST(p.stderr_text().find("127.0.0.1:abc") != std::string::npos, p.stderr_text());
}

BOOST_AUTO_TEST_CASE(invalid_discovery_url_fails_with_a_clear_message) {
    Process p(bin_dir() / "rpclb-node", {"--name", "x@127.0.0.1", "--discovery", "etcd://127.0.0.1/rpclb"},
              {{"RPCLB_COOKIE", test_cookie}}, dir() / "x.log");
    const auto status = p.wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE(status.has_value());
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 2);
    const auto err = p.stderr_text();
    BOOST_TEST(err.find("\"discovery\": must be etcd://HOST:PORT/PREFIX (no :PORT") != std::string::npos, err);
}

BOOST_AUTO_TEST_SUITE_END()
