// The defaults ClusterOptions takes from the environment and from chance
// (include/rpclb/cluster_options.hpp): the cookie from RPCLB_COOKIE, a client node's
// generated name, and the Cluster constructor applying both before its check.
#define BOOST_TEST_MODULE cluster_options
#include <rpclb/cluster.hpp>
#include <rpclb/cluster_options.hpp>
#include <rpclb/detail/options_check.hpp>

#include <boost/test/unit_test.hpp>

#include "support/env.hpp"

#include <regex>
#include <set>
#include <stdexcept>
#include <string>

using rpclb::test::ScopedEnv;

namespace {

const std::regex client_name_shape("client-[0-9a-f]{16}@[^@]+");

rpclb::ClusterOptions client_options() {
    rpclb::ClusterOptions o;
    o.client = true;
    o.cookie = "secret";
    o.worker_threads = 1;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cluster_options)

BOOST_AUTO_TEST_CASE(environment_cookie_reads_rpclb_cookie) {
    {
        ScopedEnv env("RPCLB_COOKIE", "from-the-environment");
        BOOST_TEST(rpclb::environment_cookie() == "from-the-environment");
    }
    ScopedEnv unset("RPCLB_COOKIE", std::nullopt);
    BOOST_TEST(rpclb::environment_cookie().empty());
}

BOOST_AUTO_TEST_CASE(with_defaults_takes_the_cookie_from_rpclb_cookie_when_none_is_given) {
    ScopedEnv env("RPCLB_COOKIE", "from-the-environment");
    rpclb::ClusterOptions o;
    o.name = "a@127.0.0.1";
    BOOST_TEST(rpclb::with_defaults(o).cookie == "from-the-environment");
    // A given cookie wins over the environment.
    o.cookie = "given";
    BOOST_TEST(rpclb::with_defaults(o).cookie == "given");
}

BOOST_AUTO_TEST_CASE(cluster_constructor_reads_rpclb_cookie) {
    ScopedEnv env("RPCLB_COOKIE", "from-the-environment");
    rpclb::ClusterOptions o;
    o.name = "a@127.0.0.1";
    o.worker_threads = 1;
    rpclb::Cluster node(o);
    BOOST_TEST(node.options().cookie == "from-the-environment");
}

BOOST_AUTO_TEST_CASE(cluster_constructor_refuses_no_cookie_without_rpclb_cookie) {
    ScopedEnv unset("RPCLB_COOKIE", std::nullopt);
    rpclb::ClusterOptions o;
    o.name = "a@127.0.0.1";
    BOOST_CHECK_EXCEPTION(rpclb::Cluster{o}, std::invalid_argument, [](const std::invalid_argument& e) {
        return std::string(e.what()).find("cookie") != std::string::npos;
    });
}

BOOST_AUTO_TEST_CASE(unique_client_name_is_a_valid_node_name_and_differs_each_time) {
    std::set<std::string> names;
    for (int i = 0; i < 1000; ++i) {
        const auto name = rpclb::unique_client_name();
        BOOST_TEST_REQUIRE(std::regex_match(name, client_name_shape), name);
        names.insert(name);
    }
    BOOST_TEST(names.size() == 1000u);
    auto o = client_options();
    o.name = rpclb::unique_client_name();
    const auto problem = rpclb::detail::check(o);
    BOOST_TEST(!problem.has_value(), (problem ? problem->message() : ""));
}

BOOST_AUTO_TEST_CASE(client_without_name_gets_a_unique_name) {
    const auto o = client_options();
    rpclb::Cluster first(o);
    rpclb::Cluster second(o);
    BOOST_TEST(std::regex_match(first.name(), client_name_shape), first.name());
    BOOST_TEST(first.options().name == first.name());
    BOOST_TEST(first.name() != second.name());
}

BOOST_AUTO_TEST_CASE(client_with_a_name_keeps_it) {
    auto o = client_options();
    o.name = "tool@127.0.0.1";
    BOOST_TEST(rpclb::with_defaults(o).name == "tool@127.0.0.1");
    rpclb::Cluster node(o);
    BOOST_TEST(node.name() == "tool@127.0.0.1");
}

BOOST_AUTO_TEST_CASE(serving_node_without_name_is_refused) {
    // Peers dial a serving node by the name it announces: it has to be given.
    auto o = client_options();
    o.client = false;
    BOOST_TEST(rpclb::with_defaults(o).name.empty());
    BOOST_CHECK_EXCEPTION(rpclb::Cluster{o}, std::invalid_argument, [](const std::invalid_argument& e) {
        return std::string(e.what()).find("name") != std::string::npos;
    });
}

BOOST_AUTO_TEST_SUITE_END()
