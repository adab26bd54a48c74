// Bad configuration given to rpclb-node: each gets a clear error and the node keeps
// serving everything else.
#define BOOST_TEST_MODULE bad_config
#include "support/node.hpp"

#include <boost/test/unit_test.hpp>

using namespace std::chrono_literals;
using namespace rpclb::test;

BOOST_FIXTURE_TEST_SUITE(bad_config, Harness)

BOOST_AUTO_TEST_CASE(unknown_algorithm_and_missing_plugin_directory_are_reported_and_node_serves) {
    auto a = start_node({.name = "a",
                         .balancers = {"good=round_robin", "broken=no_such_algorithm"},
                         .extra_args = {"--plugins", "/nonexistent/rpclb-plugins"}});
    auto client = start_client({a->address()});
    BOOST_REQUIRE(wait_for_members(*client, "good", {"a@127.0.0.1"}));

    // The unknown algorithm names the balancer, the plugin file and where it looked.
    BOOST_TEST(eventually([&] { return a->log_contains("cannot start balancer \"broken=no_such_algorithm\""); }, 3s),
               a->log());
    BOOST_TEST(a->log_contains("librpclb_no_such_algorithm.so"));
    // The missing directory is named once at start.
    BOOST_TEST(a->log_contains("/nonexistent/rpclb-plugins"));
    BOOST_TEST(a->log_contains("does not exist"));

    // The balancer that failed has no members, with the usual clear error...
    rpclb::CallOptions options;
    options.timeout = 2s;
    options.load_balancer = "broken";
    auto broken = client->call("demo", "node", {}, options);
    BOOST_REQUIRE(!broken.has_value());
    BOOST_TEST((broken.error().code == rpclb::ErrorCode::service_unavailable));
    BOOST_TEST(broken.error().message == "no members registered");
    // ...and everything else keeps working.
    options.load_balancer = "good";
    auto good = client->call("demo", "node", {}, options);
    BOOST_REQUIRE(good.has_value());
    BOOST_TEST(good->as_string() == "a@127.0.0.1");
    BOOST_TEST(a->process().running());
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

BOOST_AUTO_TEST_SUITE_END()
