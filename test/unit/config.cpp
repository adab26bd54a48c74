// Node configuration from and to JSON (include/rpclb/config.hpp): every key, the defaults,
// an error naming each bad field, unknown keys, files, and the round trip.
#define BOOST_TEST_MODULE config
#include <rpclb/config.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/env.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace std::chrono_literals;
using rpclb::ErrorCode;
using rpclb::NodeConfig;

namespace {

boost::json::value parse(std::string_view text) { return boost::json::parse(text); }

std::string show(const rpclb::ErrorMessage& e) { return boost::json::serialize(e.to_json()); }

// Asserts that `result` failed with bad_request naming `field`, with `reason` in the message.
template <class T>
void check_field_error(const rpclb::Result<T>& result, const std::string& field, std::string_view reason) {
    BOOST_TEST_REQUIRE(!result.has_value(), "accepted; expected an error naming " << field);
    const auto& e = result.error();
    BOOST_TEST((e.code == ErrorCode::bad_request), show(e));
    const auto prefix = "config field \"" + field + "\": ";
    BOOST_TEST(e.message.find(prefix) != std::string::npos, show(e));
    BOOST_TEST(e.message.find(reason) != std::string::npos, show(e));
    const auto* f = e.details.if_contains("field");
    BOOST_TEST_REQUIRE(f != nullptr, show(e));
    BOOST_TEST(f->as_string() == field, show(e));
}

rpclb::Result<NodeConfig> node(std::string_view text) { return rpclb::node_config_from_json(parse(text)); }

// A temporary directory removed at the end of the test.
struct TempDir {
    TempDir() {
        auto pattern = (std::filesystem::temp_directory_path() / "rpclb-config-XXXXXX").string();
        BOOST_TEST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::filesystem::path write(const std::string& name, std::string_view text) const {
        const auto file = path / name;
        std::ofstream(file, std::ios::binary) << text;
        return file;
    }
    std::filesystem::path path;
};

// The example of the configuration page, every key set away from its default.
constexpr std::string_view full_config = R"({
    "name": "a@10.0.0.1", "listen": "10.0.0.1:7001", "seeds": ["10.0.0.2:7001", "10.0.0.3:7001"],
    "cookie": "secret", "client": true, "plugins": ["/opt/p1", "/opt/p2"],
    "network_threads": 3, "worker_threads": 16, "idle_timeout_ms": 4000,
    "handshake_timeout_ms": 6000, "reconnect_interval_ms": 250, "stop_timeout_ms": 0,
    "max_message_size": 2048, "call_directly": true, "retry": false, "retry_count": 7,
    "excluded_node_patterns": ["test", "canary"], "log_level": "debug",
    "balancers": [
        {"name": "workers", "algorithm": "weighted_round_robin",
         "algorithm_opts": {"weights": {"a@127.0.0.1": 3, "b@127.0.0.1": 1}},
         "node_match_list": ["web", "/^w[0-9]+@/"], "drain_timeout_ms": 500,
         "outlier_detection": {"consecutive_local_failures": 3, "failure_percentage": 80,
                               "base_ejection_time_ms": 1000, "max_ejection_percent": 34}},
        {"name": "cache", "algorithm": "hash_ring", "node_match_list": "all"}
    ]
})";

}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(every_key_is_parsed) {
    const auto c = node(full_config);
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    const auto& o = c->cluster;
    BOOST_TEST(o.name == "a@10.0.0.1");
    BOOST_TEST(o.listen == "10.0.0.1:7001");
    BOOST_TEST((o.seeds == std::vector<std::string>{"10.0.0.2:7001", "10.0.0.3:7001"}));
    BOOST_TEST(o.cookie == "secret");
    BOOST_TEST(o.client);
    BOOST_TEST((o.plugin_path == std::vector<std::filesystem::path>{"/opt/p1", "/opt/p2"}));
    BOOST_TEST(o.network_threads == 3u);
    BOOST_TEST(o.worker_threads == 16u);
    BOOST_TEST(o.idle_timeout.count() == 4000);
    BOOST_TEST(o.handshake_timeout.count() == 6000);
    BOOST_TEST(o.reconnect_interval.count() == 250);
    BOOST_TEST(o.stop_timeout.count() == 0);
    BOOST_TEST(o.max_message_size == 2048u);
    BOOST_TEST(o.call_directly);
    BOOST_TEST(!o.retry);
    BOOST_TEST(o.retry_count == 7u);
    BOOST_TEST((o.excluded_node_patterns == std::vector<std::string>{"test", "canary"}));
    BOOST_TEST(c->log_level == "debug");

    BOOST_TEST_REQUIRE(c->balancers.size() == 2u);
    const auto& w = c->balancers[0];
    BOOST_TEST(w.name == "workers");
    BOOST_TEST(w.algorithm == "weighted_round_robin");
    BOOST_TEST(boost::json::serialize(w.algorithm_opts) == R"({"weights":{"a@127.0.0.1":3,"b@127.0.0.1":1}})");
    BOOST_TEST(!w.node_match_list.all);
    BOOST_TEST_REQUIRE(w.node_match_list.filters.size() == 2u);
    BOOST_TEST(w.drain_timeout.count() == 500);
    BOOST_TEST(w.outlier_detection.consecutive_local_failures == 3u);
    BOOST_TEST(w.outlier_detection.consecutive_remote_failures == 5u);  // the default
    BOOST_TEST(w.outlier_detection.failure_percentage == 80u);
    BOOST_TEST(w.outlier_detection.base_ejection_time.count() == 1000);
    BOOST_TEST(w.outlier_detection.max_ejection_percent == 34u);
    const auto& cache = c->balancers[1];
    BOOST_TEST(cache.algorithm == "hash_ring");
    BOOST_TEST(cache.node_match_list.all);
}

BOOST_AUTO_TEST_CASE(absent_keys_take_the_documented_defaults) {
    const auto c = node("{}");
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    const rpclb::ClusterOptions d;
    const auto& o = c->cluster;
    BOOST_TEST(o.name.empty());
    BOOST_TEST(o.cookie.empty());
    BOOST_TEST(o.listen == "127.0.0.1:0");
    BOOST_TEST(o.seeds.empty());
    BOOST_TEST(!o.client);
    BOOST_TEST(o.plugin_path.empty());
    BOOST_TEST(o.network_threads == 1u);
    BOOST_TEST(o.worker_threads == 2u);
    BOOST_TEST(o.idle_timeout == 3s);
    BOOST_TEST(o.handshake_timeout == 5s);
    BOOST_TEST(o.reconnect_interval == 1s);
    BOOST_TEST(o.stop_timeout == 15s);
    BOOST_TEST(o.max_message_size == 16u * 1024u * 1024u);
    BOOST_TEST(!o.call_directly);
    BOOST_TEST(o.retry);
    BOOST_TEST(o.retry_count == 5u);
    BOOST_TEST(o.excluded_node_patterns.empty());
    BOOST_TEST(c->log_level == "info");
    BOOST_TEST(c->balancers.empty());

    const auto b = rpclb::load_balancer_options_from_json(parse(R"({"name": "w"})"));
    BOOST_TEST_REQUIRE(b.has_value(), show(b.error()));
    BOOST_TEST(b->algorithm == "peak_ewma");  // the default
    BOOST_TEST(b->algorithm_opts.empty());
    BOOST_TEST(b->node_match_list.all);
    BOOST_TEST(b->drain_timeout == 15s);
}

BOOST_AUTO_TEST_CASE(absent_keys_keep_the_given_defaults) {
    NodeConfig defaults;
    defaults.cluster.worker_threads = 4;
    defaults.cluster.cookie = "from-env";
    defaults.log_level = "warning";
    defaults.balancers.push_back({.name = "old"});
    const auto c = rpclb::node_config_from_json(parse(R"({"name": "a@h", "balancers": [{"name": "new"}]})"),
                                                defaults);
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    BOOST_TEST(c->cluster.name == "a@h");
    BOOST_TEST(c->cluster.worker_threads == 4u);
    BOOST_TEST(c->cluster.cookie == "from-env");
    BOOST_TEST(c->log_level == "warning");
    BOOST_TEST_REQUIRE(c->balancers.size() == 1u);  // a given list replaces the default list
    BOOST_TEST(c->balancers[0].name == "new");

    const auto kept = rpclb::node_config_from_json(parse("{}"), defaults);
    BOOST_TEST_REQUIRE(kept.has_value());
    BOOST_TEST_REQUIRE(kept->balancers.size() == 1u);
    BOOST_TEST(kept->balancers[0].name == "old");
}

BOOST_AUTO_TEST_CASE(plugins_is_one_directory_or_a_list) {
    const auto one = node(R"({"plugins": "/opt/rpclb/plugins"})");
    BOOST_TEST_REQUIRE(one.has_value());
    BOOST_TEST((one->cluster.plugin_path == std::vector<std::filesystem::path>{"/opt/rpclb/plugins"}));
    const auto none = node(R"({"plugins": []})");
    BOOST_TEST_REQUIRE(none.has_value());
    BOOST_TEST(none->cluster.plugin_path.empty());
}

BOOST_AUTO_TEST_CASE(retry_count_infinity_is_unlimited_retries) {
    const auto c = node(R"({"retry_count": "infinity"})");
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    BOOST_TEST(c->cluster.retry_count == rpclb::unlimited_retries);
    BOOST_TEST(rpclb::to_json(c->cluster, rpclb::Secrets::omit).at("retry_count") == "infinity");
    const auto zero = node(R"({"retry_count": 0})");
    BOOST_TEST_REQUIRE(zero.has_value());
    BOOST_TEST(zero->cluster.retry_count == 0u);
}

BOOST_AUTO_TEST_CASE(node_match_list_takes_substrings_and_slash_delimited_regexes) {
    const auto b = rpclb::load_balancer_options_from_json(
        parse(R"({"name": "w", "node_match_list": ["web", "/^w[0-9]+@/"]})"));
    BOOST_TEST_REQUIRE(b.has_value(), show(b.error()));
    const auto& list = b->node_match_list;
    BOOST_TEST_REQUIRE(list.filters.size() == 2u);
    BOOST_TEST(!list.filters[0].is_regex());
    BOOST_TEST(list.filters[1].is_regex());
    BOOST_TEST(list.filters[1].text() == "^w[0-9]+@");
    BOOST_TEST(list.matches("myweb@h"));      // substring
    BOOST_TEST(list.matches("w12@h"));        // regex
    BOOST_TEST(!list.matches("worker@h"));    // neither

    const auto empty = rpclb::load_balancer_options_from_json(parse(R"({"name": "w", "node_match_list": []})"));
    BOOST_TEST_REQUIRE(empty.has_value());
    BOOST_TEST(!empty->node_match_list.all);
    BOOST_TEST(!empty->node_match_list.matches("a@h"));
}

BOOST_AUTO_TEST_CASE(invalid_regex_names_the_list_element) {
    const auto c = node(R"({"balancers": [{"name": "w", "node_match_list": ["web", "/(unclosed/"]}]})");
    check_field_error(c, "balancers[0].node_match_list[1]", "invalid regex /(unclosed/: ");
}

BOOST_AUTO_TEST_CASE(each_bad_field_is_named_with_the_reason) {
    struct Case {
        const char* json;
        const char* field;
        const char* reason;
    };
    const Case cases[] = {
        {R"({"name": "a"})", "name", "must be short@host"},
        {R"({"name": "a@b@c"})", "name", "must be short@host"},
        {R"({"name": 3})", "name", "must be a string, got 3"},
        {R"({"listen": 7001})", "listen", "must be a string"},
        {R"({"listen": "nonsense"})", "listen", "must be HOST:PORT with HOST an IP address or localhost, got \"nonsense\""},
        {R"({"listen": "example.com:7001"})", "listen", "(\"example.com\" is not an IP address)"},
        {R"({"listen": "127.0.0.1:70000"})", "listen", "(port 0..65535)"},
        {R"({"max_batch_frames": 0})", "max_batch_frames", "must be in 1..1024, got 0"},
        {R"({"admin": {"listen": "garbage"}})", "admin.listen", "must be HOST:PORT"},
        {R"({"admin": {"listen": "127.0.0.1:0", "forward_timeout_ms": 0}})", "admin.forward_timeout_ms",
         "must be at least 1 (milliseconds), got 0"},
        {R"({"seeds": "127.0.0.1:7001"})", "seeds", "must be an array of strings, got a string"},
        {R"({"seeds": ["127.0.0.1:7001", 7002]})", "seeds[1]", "must be a string"},
        {R"({"cookie": null})", "cookie", "must be a string, got null"},
        {R"({"client": "yes"})", "client", "must be true or false"},
        {R"({"plugins": 1})", "plugins", "must be a string or an array of strings"},
        {R"({"plugins": ["/a", false]})", "plugins[1]", "must be a string"},
        {R"({"network_threads": 0})", "network_threads", "must be in 1..64, got 0"},
        {R"({"network_threads": 65})", "network_threads", "must be in 1..64, got 65"},
        {R"({"network_threads": -1})", "network_threads", "must be a non-negative integer, got -1"},
        {R"({"worker_threads": 1025})", "worker_threads", "must be in 1..1024"},
        {R"({"worker_threads": 2.5})", "worker_threads", "must be a non-negative integer"},
        {R"({"idle_timeout_ms": 0})", "idle_timeout_ms", "must be in 1..4294967295 (milliseconds), got 0"},
        {R"({"idle_timeout_ms": "3s"})", "idle_timeout_ms", "must be a non-negative integer (milliseconds)"},
        {R"({"handshake_timeout_ms": 0})", "handshake_timeout_ms", "must be in 1.."},
        {R"({"reconnect_interval_ms": 0})", "reconnect_interval_ms", "must be in 1.."},
        {R"({"stop_timeout_ms": -1})", "stop_timeout_ms", "must be a non-negative integer (milliseconds)"},
        {R"({"stop_timeout_ms": 4294967296})", "stop_timeout_ms", "must be in 0..4294967295"},
        {R"({"max_message_size": 1023})", "max_message_size", "must be at least 1024"},
        {R"({"call_directly": 1})", "call_directly", "must be true or false, got 1"},
        {R"({"retry": "no"})", "retry", "must be true or false"},
        {R"({"retry_count": -1})", "retry_count", "must be a non-negative integer or \"infinity\""},
        {R"({"retry_count": "forever"})", "retry_count", "must be a non-negative integer or \"infinity\""},
        {R"({"excluded_node_patterns": "test"})", "excluded_node_patterns", "must be an array of strings"},
        {R"({"log_level": "loud"})", "log_level", "must be trace, debug, info, warning, error or fatal"},
        {R"({"log_level": 1})", "log_level", "must be a string"},
        {R"({"balancers": {"name": "w"}})", "balancers", "must be an array of balancer objects"},
        {R"({"balancers": ["w"]})", "balancers[0]", "must be an object"},
        {R"({"balancers": [{"algorithm": "random"}]})", "balancers[0].name", "is required"},
        {R"({"balancers": [{"name": ""}]})", "balancers[0].name", "must not be empty"},
        {R"({"balancers": [{"name": "a\u0001b"}]})", "balancers[0].name", "control characters"},
        {R"({"balancers": [{"name": "w", "algorithm": ""}]})", "balancers[0].algorithm", "must not be empty"},
        {R"({"balancers": [{"name": "w", "algorithm_opts": []}]})", "balancers[0].algorithm_opts",
         "must be an object, got an array"},
        {R"({"balancers": [{"name": "w", "node_match_list": "any"}]})", "balancers[0].node_match_list",
         "must be \"all\" or an array of strings"},
        {R"({"balancers": [{"name": "w", "node_match_list": [1]}]})", "balancers[0].node_match_list[0]",
         "must be a string"},
        {R"({"balancers": [{"name": "w", "drain_timeout_ms": -1}]})", "balancers[0].drain_timeout_ms",
         "must be a non-negative integer (milliseconds), got -1"},
        {R"({"balancers": [{"name": "w", "outlier_detection": {"max_ejection_percent": 101}}]})",
         "balancers[0].outlier_detection.max_ejection_percent", "must be a percentage, 0 to 100, got 101"},
        {R"({"balancers": [{"name": "w", "outlier_detection": {"consecutive": 3}}]})",
         "balancers[0].outlier_detection.consecutive", "unknown key"},
        {R"({"balancers": [{"name": "w"}, {"name": "v"}, {"name": "w"}]})", "balancers[2].name",
         "duplicate balancer name \"w\" (also balancers[0])"},
    };
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.json) { check_field_error(node(c.json), c.field, c.reason); }
    }
}

BOOST_AUTO_TEST_CASE(message_has_the_documented_shape) {
    const auto c = node(R"({"balancers": [{"name": "w", "drain_timeout_ms": -1}]})");
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().message ==
               R"(config field "balancers[0].drain_timeout_ms": must be a non-negative integer (milliseconds), got -1)");
    BOOST_TEST(boost::json::serialize(c.error().details) == R"({"field":"balancers[0].drain_timeout_ms"})");
}

BOOST_AUTO_TEST_CASE(unknown_key_is_named_even_beside_other_errors) {
    check_field_error(node(R"({"idle_timout_ms": 5000})"), "idle_timout_ms", "unknown key (known keys: name,");
    // The misspelt "name" would also make the balancer's name missing: the typo is reported.
    check_field_error(node(R"({"balancers": [{"nmae": "w"}]})"), "balancers[0].nmae", "unknown key");
    check_field_error(node(R"({"worker_threads": 0, "wrokers": 4})"), "wrokers", "unknown key");
    // NodeConfig keys are not ClusterOptions keys.
    check_field_error(rpclb::cluster_options_from_json(parse(R"({"log_level": "info"})")), "log_level",
                      "unknown key");
}

BOOST_AUTO_TEST_CASE(document_that_is_not_an_object_is_refused) {
    const auto c = node("[1, 2]");
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().message == "config: the document must be a JSON object, got an array");
    BOOST_TEST(c.error().details.at("field") == "");
}

BOOST_AUTO_TEST_CASE(validate_requires_name_and_cookie) {
    auto c = node("{}");
    BOOST_TEST_REQUIRE(c.has_value());
    check_field_error(rpclb::validate(*c), "name", "must be short@host");
    c->cluster.name = "a@h";
    check_field_error(rpclb::validate(*c), "cookie", "must not be empty");
    c->cluster.cookie = "secret";
    BOOST_TEST(rpclb::validate(*c).has_value());
    c->balancers.push_back({.name = "w", .drain_timeout = -1ms});
    check_field_error(rpclb::validate(*c), "balancers[0].drain_timeout_ms", "must be in 0..4294967295");
}

BOOST_AUTO_TEST_CASE(config_refuses_what_the_cluster_constructor_refuses) {
    // The constructor would take a missing cookie from the environment.
    const rpclb::test::ScopedEnv no_cookie("RPCLB_COOKIE", std::nullopt);
    const auto base = [] {
        rpclb::ClusterOptions o;
        o.name = "a@127.0.0.1";
        o.cookie = "secret";
        return o;
    };
    const std::pair<const char*, void (*)(rpclb::ClusterOptions&)> cases[] = {
        {"name", [](rpclb::ClusterOptions& o) { o.name = "a"; }},
        {"cookie", [](rpclb::ClusterOptions& o) { o.cookie.clear(); }},
        {"network_threads", [](rpclb::ClusterOptions& o) { o.network_threads = 0; }},
        {"worker_threads", [](rpclb::ClusterOptions& o) { o.worker_threads = 2000; }},
        {"idle_timeout_ms", [](rpclb::ClusterOptions& o) { o.idle_timeout = 0ms; }},
        {"max_message_size", [](rpclb::ClusterOptions& o) { o.max_message_size = 10; }},
        {"listen", [](rpclb::ClusterOptions& o) { o.listen = "localhost:x"; }},
    };
    for (const auto& [field, spoil] : cases) {
        BOOST_TEST_CONTEXT(field) {
            NodeConfig c;
            c.cluster = base();
            spoil(c.cluster);
            BOOST_CHECK_THROW(rpclb::Cluster{c.cluster}, std::invalid_argument);
            check_field_error(rpclb::validate(c), field, "");
            const auto problem = rpclb::detail::check(c.cluster);
            BOOST_TEST_REQUIRE(problem.has_value());
            BOOST_TEST(problem->field == field);
        }
    }
}

BOOST_AUTO_TEST_CASE(listen_takes_ip_addresses_and_localhost) {
    using rpclb::detail::parse_listen_address;
    BOOST_TEST(parse_listen_address("localhost:7009").address().to_string() == "127.0.0.1");
    BOOST_TEST(parse_listen_address("localhost:7009").port() == 7009);
    BOOST_TEST(parse_listen_address("[::1]:0").address().is_v6());
    BOOST_TEST(parse_listen_address("0.0.0.0:1").address().is_unspecified());
    BOOST_CHECK_THROW(parse_listen_address("host.example:1"), std::invalid_argument);
    BOOST_CHECK_THROW(parse_listen_address("127.0.0.1:"), std::invalid_argument);
    rpclb::ClusterOptions client;
    client.name = "c@127.0.0.1";
    client.cookie = "secret";
    client.client = true;
    client.listen = "ignored";  // a client node has no listener
    BOOST_TEST(!rpclb::detail::check(client).has_value());
}

BOOST_AUTO_TEST_CASE(round_trip_through_json_gives_the_same_config) {
    const auto first = node(full_config);
    BOOST_TEST_REQUIRE(first.has_value(), show(first.error()));
    const auto json = rpclb::to_json(*first, rpclb::Secrets::include);
    // Through text, as the admin console would show it.
    const auto second = node(boost::json::serialize(json));
    BOOST_TEST_REQUIRE(second.has_value(), show(second.error()));
    BOOST_TEST(rpclb::to_json(*second, rpclb::Secrets::include) == json, boost::json::serialize(json));
    BOOST_TEST(second->cluster.cookie == "secret");
    BOOST_TEST(second->balancers[0].node_match_list.filters[1].is_regex());
    BOOST_TEST(json.at("balancers").at(0).at("node_match_list") == parse(R"(["web", "/^w[0-9]+@/"])"));
    BOOST_TEST(json.at("balancers").at(1).at("node_match_list") == "all");

    // The defaults survive too, and Boost.JSON's value_from / value_to do the same.
    const auto defaults = boost::json::value_to<NodeConfig>(boost::json::value_from(NodeConfig{}));
    BOOST_TEST(rpclb::to_json(defaults, rpclb::Secrets::include) == rpclb::to_json(NodeConfig{}, rpclb::Secrets::include));
}

BOOST_AUTO_TEST_CASE(tls_section_is_read_checked_and_written) {
    const auto c = node(R"({"tls": {"cert": "a.pem", "key": "a.key", "ca": "ca.pem", "min_version": "1.2"}})");
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    const auto& tls = c->cluster.tls;
    BOOST_TEST(tls.cert == "a.pem");
    BOOST_TEST(tls.key == "a.key");
    BOOST_TEST(tls.ca == "ca.pem");
    BOOST_TEST((tls.min_version == rpclb::TlsVersion::v1_2));
    BOOST_TEST(tls.enabled());
    BOOST_TEST(rpclb::to_json(*c, rpclb::Secrets::omit).at("tls") ==
               parse(R"({"cert": "a.pem", "key": "a.key", "ca": "ca.pem", "min_version": "1.2"})"));
    // Off and TLS 1.3 by default.
    BOOST_TEST(!NodeConfig{}.cluster.tls.enabled());
    BOOST_TEST((NodeConfig{}.cluster.tls.min_version == rpclb::TlsVersion::v1_3));

    check_field_error(node(R"({"tls": {"min_version": "1.1"}})"), "tls.min_version", R"(must be "1.2" or "1.3")");
    check_field_error(node(R"({"tls": {"min_version": 1.3}})"), "tls.min_version", "must be");
    check_field_error(node(R"({"tls": {"certificate": "a.pem"}})"), "tls.certificate",
                      "unknown key (known keys: cert, key, ca, min_version)");
    check_field_error(node(R"({"tls": "on"})"), "tls", "must be an object");
    check_field_error(node(R"({"tls": {"cert": 1}})"), "tls.cert", "must be a string");

    // The files are read by validate(), not by the loader.
    auto complete = *c;
    complete.cluster.name = "a@127.0.0.1";
    complete.cluster.cookie = "secret";
    check_field_error(rpclb::validate(complete), "tls.cert", "\"a.pem\": cannot read: No such file or directory");
    complete.cluster.tls = {};
    complete.cluster.tls.ca = "ca.pem";
    check_field_error(rpclb::validate(complete), "tls.cert", "is required when tls.key or tls.ca is set");
}

BOOST_AUTO_TEST_CASE(secrets_omit_leaves_the_cookie_out) {
    const auto c = node(full_config);
    BOOST_TEST_REQUIRE(c.has_value());
    const auto shown = rpclb::to_json(*c, rpclb::Secrets::omit);
    BOOST_TEST(!shown.contains("cookie"));
    BOOST_TEST(boost::json::serialize(shown).find("secret") == std::string::npos);
    BOOST_TEST(rpclb::to_json(*c, rpclb::Secrets::include).at("cookie") == "secret");
}

BOOST_AUTO_TEST_CASE(value_to_throws_call_error_naming_the_field) {
    try {
        (void)boost::json::value_to<rpclb::LoadBalancerOptions>(parse(R"({"name": "w", "algorithm": 3})"));
        BOOST_FAIL("value_to accepted a numeric algorithm");
    } catch (const rpclb::CallError& e) {
        BOOST_TEST(e.error().details.at("field") == "algorithm");
    }
}

BOOST_AUTO_TEST_CASE(file_is_read_with_comments_and_trailing_commas) {
    TempDir dir;
    const auto file = dir.write("node.json", "// a node\n{\"name\": \"a@h\", /* the secret */ \"cookie\": \"s\",}\n");
    const auto c = rpclb::load_node_config(file);
    BOOST_TEST_REQUIRE(c.has_value(), show(c.error()));
    BOOST_TEST(c->cluster.name == "a@h");
    BOOST_TEST(c->cluster.cookie == "s");
}

BOOST_AUTO_TEST_CASE(missing_file_is_named) {
    TempDir dir;
    const auto file = dir.path / "absent.json";
    const auto c = rpclb::load_node_config(file);
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST((c.error().code == ErrorCode::bad_request));
    BOOST_TEST(c.error().message == file.string() + ": cannot read the config file: No such file or directory");
    BOOST_TEST(c.error().details.at("file").as_string() == file.string());
    // A directory is not a file either.
    const auto d = rpclb::load_node_config(dir.path);
    BOOST_TEST_REQUIRE(!d.has_value());
    BOOST_TEST(d.error().message.find("cannot read the config file") != std::string::npos, show(d.error()));
}

BOOST_AUTO_TEST_CASE(invalid_json_is_located_by_line_and_column) {
    TempDir dir;
    const auto file = dir.write("bad.json", "{\"name\": \"a@h\",\n  \"seeds\": [\"x\",, \"y\"]\n}\n");
    const auto c = rpclb::load_node_config(file);
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().message.rfind(file.string() + ":2:17: invalid JSON: ", 0) == 0u, show(c.error()));
    BOOST_TEST(c.error().details.at("line") == 2);
    BOOST_TEST(c.error().details.at("column") == 17);
    BOOST_TEST(c.error().details.at("offset") == 32);

    const auto cut = rpclb::load_node_config(dir.write("cut.json", "{\"name\": \"a@h\",\n"));
    BOOST_TEST_REQUIRE(!cut.has_value());
    BOOST_TEST(cut.error().message.find(":2:1: invalid JSON: ") != std::string::npos, show(cut.error()));
}

// Found with fuzz/admin.cpp (the same case there): 1e400 parses as infinity, which a balancer
// would announce to its peers as `Infinity`, text no JSON parser reads.
BOOST_AUTO_TEST_CASE(numbers_too_large_for_a_double_are_refused) {
    TempDir dir;
    const auto file = dir.write("inf.json", R"({"name": "a@h", "cookie": "s",
        "balancers": [{"name": "w", "algorithm": "weighted_round_robin", "algorithm_opts": {"weights": {"a@h": 1e400}}}]})");
    const auto c = rpclb::load_node_config(file);
    BOOST_TEST_REQUIRE(!c.has_value());
    BOOST_TEST(c.error().message == file.string() + ": invalid JSON: a number is too large for a double", show(c.error()));
}

BOOST_AUTO_TEST_CASE(bad_field_in_a_file_names_file_and_field) {
    TempDir dir;
    const auto file = dir.write("node.json", R"({"balancers": [{"name": "w", "drain_timeout_ms": -1}]})");
    const auto c = rpclb::load_node_config(file);
    check_field_error(c, "balancers[0].drain_timeout_ms", "must be a non-negative integer (milliseconds)");
    BOOST_TEST(c.error().message.rfind(file.string() + ": config field ", 0) == 0u, show(c.error()));
    BOOST_TEST(c.error().details.at("file").as_string() == file.string());
}

// A node name that is not UTF-8 would go into every Hello the node sends, and each peer's
// decoder would refuse those frames as bad JSON, so the node could never join. The options
// check refuses such names (and control characters) up front.
BOOST_AUTO_TEST_CASE(names_that_a_frame_cannot_carry_are_refused) {
    for (const std::string name : {std::string("@127.0.0.1\xae" "0.1"), std::string("a@127.0.0.1\xae"),
                                   std::string("a\n@h"), std::string("a@h\x7f")}) {
        BOOST_TEST_CONTEXT(name) {
            rpclb::ClusterOptions o;
            o.name = name;
            o.cookie = "secret";
            const auto problem = rpclb::detail::check(o);
            BOOST_TEST_REQUIRE(problem.has_value());
            BOOST_TEST(problem->field == "name");
            BOOST_CHECK_THROW(rpclb::Cluster{o}, std::invalid_argument);
            rpclb::LoadBalancerOptions lb;
            lb.name = name;
            const auto lb_problem = rpclb::detail::check(lb);
            BOOST_TEST_REQUIRE(lb_problem.has_value());
            BOOST_TEST(lb_problem->field == "name");
        }
    }
    rpclb::ClusterOptions ok;
    ok.name = "n\xc3\xb6" "de@h\xe2\x82\xac";  // "nöde@h€": UTF-8 is fine
    ok.cookie = "secret";
    BOOST_TEST(!rpclb::detail::check(ok).has_value());
}

BOOST_AUTO_TEST_CASE(a_node_name_longer_than_the_handshake_allows_is_refused) {
    rpclb::ClusterOptions o;
    o.cookie = "secret";
    o.name = "n@" + std::string(rpclb::detail::max_node_name - 2, 'h');
    BOOST_TEST(!rpclb::detail::check(o).has_value());
    o.name += "h";
    const auto problem = rpclb::detail::check(o);
    BOOST_TEST_REQUIRE(problem.has_value());
    BOOST_TEST(problem->field == "name");
    BOOST_TEST(problem->reason.find("at most 1024 bytes") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(valid_utf8_follows_rfc_3629) {
    using rpclb::detail::valid_utf8;
    BOOST_TEST(valid_utf8(""));
    BOOST_TEST(valid_utf8("plain ascii"));
    BOOST_TEST(valid_utf8("\xc3\xb6\xe2\x82\xac\xf0\x9f\x98\x80"));  // ö € 😀
    BOOST_TEST(valid_utf8("\xf4\x8f\xbf\xbf"));                    // U+10FFFF
    BOOST_TEST(!valid_utf8("\xae"));                               // lone continuation byte
    BOOST_TEST(!valid_utf8("\xc3"));                               // truncated
    BOOST_TEST(!valid_utf8("\xe2\x82"));                           // truncated
    BOOST_TEST(!valid_utf8("\xc0\xaf"));                           // overlong '/'
    BOOST_TEST(!valid_utf8("\xe0\x80\xaf"));                       // overlong
    BOOST_TEST(!valid_utf8("\xed\xa0\x80"));                       // surrogate U+D800
    BOOST_TEST(!valid_utf8("\xf4\x90\x80\x80"));                   // above U+10FFFF
    BOOST_TEST(!valid_utf8("\xff"));
}

BOOST_AUTO_TEST_SUITE_END()
