// Discovery through etcd without etcd: the `discovery` option's URL and its check, the
// config key, the lease TTL, and the JSON of etcd's v3 gateway (src/membership/etcd_codec)
// read from answers as etcd 3.4 writes them. The HTTP side runs against a real etcd in
// test/integration/etcd_discovery.cpp.
#define BOOST_TEST_MODULE etcd_discovery
#include <rpclb/cluster.hpp>
#include <rpclb/config.hpp>
#include <rpclb/detail/discovery_url.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>

#include "membership/etcd_codec.hpp"
#include "membership/etcd_discovery.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

namespace etcd = rpclb::detail::etcd;
using rpclb::detail::parse_discovery_url;
using namespace std::chrono_literals;

namespace {

rpclb::ClusterOptions options_with(std::string discovery) {
    rpclb::ClusterOptions o;
    o.name = "a@127.0.0.1";
    o.cookie = "secret";
    o.worker_threads = 1;
    o.discovery = std::move(discovery);
    return o;
}

// The message parse_discovery_url throws for `url`; "" when it accepts it.
std::string refusal(const std::string& url) {
    try {
        parse_discovery_url(url);
        return {};
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
}

boost::json::value answer(const char* text) { return boost::json::parse(text); }

}  // namespace

BOOST_AUTO_TEST_SUITE(etcd_discovery)

BOOST_AUTO_TEST_CASE(discovery_url_gives_host_port_and_prefix) {
    auto url = parse_discovery_url("etcd://127.0.0.1:2379/rpclb");
    BOOST_TEST(url.host == "127.0.0.1");
    BOOST_TEST(url.port == 2379);
    BOOST_TEST(url.prefix == "rpclb");
    BOOST_TEST(url.key_of("a@h") == "rpclb/a@h");
    BOOST_TEST(url.authority() == "127.0.0.1:2379");

    url = parse_discovery_url("etcd://[::1]:2379/teams/billing/");
    BOOST_TEST(url.host == "::1");
    BOOST_TEST(url.prefix == "teams/billing");  // trailing '/' removed
    BOOST_TEST(url.authority() == "[::1]:2379");

    url = parse_discovery_url("etcd://etcd.default.svc.cluster.local:12379/x");
    BOOST_TEST(url.host == "etcd.default.svc.cluster.local");
    BOOST_TEST(url.port == 12379);
}

BOOST_AUTO_TEST_CASE(discovery_url_refuses_what_is_not_etcd_host_port_prefix) {
    const std::pair<const char*, const char*> cases[] = {
        {"http://127.0.0.1:2379/rpclb", "the only scheme is etcd://"},
        {"127.0.0.1:2379/rpclb", "the only scheme is etcd://"},
        {"etcd://127.0.0.1:2379", "no /PREFIX"},
        {"etcd://127.0.0.1:2379/", "PREFIX is empty"},
        {"etcd://127.0.0.1:2379///", "PREFIX is empty"},
        {"etcd://127.0.0.1/rpclb", "no :PORT"},
        {"etcd://[::1]/rpclb", "no :PORT"},
        {"etcd://127.0.0.1:0/rpclb", "PORT must be in 1..65535"},
        {"etcd://127.0.0.1:65536/rpclb", "PORT must be in 1..65535"},
        {"etcd://127.0.0.1:http/rpclb", "PORT must be in 1..65535"},
        {"etcd://:2379/rpclb", "no HOST:PORT"},
        {"etcd://::1:2379/rpclb", "an IPv6 address goes in brackets"},
        {"etcd://user:pw@10.0.0.1:2379/rpclb", "is not a host"},
        {"etcd://10.0.0.1:2379/a b", "PREFIX holds a space"},
        {"etcd://10.0.0.1:2379/a?x=1", "'?'"},
        {"etcd://10.0.0.1:2379/a#x", "'#'"},
        {"etcd://10.0.0.1:2379/a\nb", "a control character"},
    };
    for (const auto& [url, why] : cases) {
        const auto message = refusal(url);
        BOOST_TEST(message.find(why) != std::string::npos, url << " gave \"" << message << "\"");
        BOOST_TEST(message.find("must be etcd://HOST:PORT/PREFIX") == 0u, message);
    }
    BOOST_TEST(refusal("etcd://h:1/" + std::string(rpclb::detail::max_discovery_prefix, 'p')).empty());
    BOOST_TEST(refusal("etcd://h:1/" + std::string(rpclb::detail::max_discovery_prefix + 1, 'p')).find("longer than") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(option_check_names_the_discovery_field) {
    BOOST_TEST(!rpclb::detail::check(options_with("")).has_value());
    BOOST_TEST(!rpclb::detail::check(options_with("etcd://127.0.0.1:2379/rpclb")).has_value());
    const auto problem = rpclb::detail::check(options_with("etcd://127.0.0.1/rpclb"));
    BOOST_TEST_REQUIRE(problem.has_value());
    BOOST_TEST(problem->field == "discovery");
    BOOST_TEST(problem->flag() == "--discovery");
    BOOST_TEST(problem->message().find("discovery must be etcd://HOST:PORT/PREFIX") == 0u, problem->message());
    BOOST_CHECK_EXCEPTION(rpclb::Cluster{options_with("etcd:/x")}, std::invalid_argument,
                          [](const std::invalid_argument& e) {
                              return std::string(e.what()).starts_with("discovery must be etcd://");
                          });
}

BOOST_AUTO_TEST_CASE(config_file_reads_and_writes_discovery) {
    auto o = rpclb::cluster_options_from_json(answer(R"({"discovery": "etcd://10.0.0.9:2379/rpclb"})"));
    BOOST_TEST_REQUIRE(o.has_value());
    BOOST_TEST(o->discovery == "etcd://10.0.0.9:2379/rpclb");
    BOOST_TEST(rpclb::to_json(*o, rpclb::Secrets::omit).at("discovery").as_string() == "etcd://10.0.0.9:2379/rpclb");

    auto bad = rpclb::cluster_options_from_json(answer(R"({"discovery": "etcd://10.0.0.9/rpclb"})"));
    BOOST_TEST_REQUIRE(!bad.has_value());
    BOOST_TEST(bad.error().details.at("field").as_string() == "discovery");
    BOOST_TEST(bad.error().message.find("no :PORT") != std::string::npos, bad.error().message);
    bad = rpclb::cluster_options_from_json(answer(R"({"discovery": 7})"));
    BOOST_TEST(!bad.has_value());
}

BOOST_AUTO_TEST_CASE(lease_ttl_is_three_idle_timeouts_in_whole_seconds_and_at_least_two) {
    BOOST_TEST(rpclb::detail::lease_ttl(3000ms).count() == 9);
    BOOST_TEST(rpclb::detail::lease_ttl(1000ms).count() == 3);
    BOOST_TEST(rpclb::detail::lease_ttl(1001ms).count() == 4);
    BOOST_TEST(rpclb::detail::lease_ttl(100ms).count() == 2);
}

BOOST_AUTO_TEST_CASE(base64_round_trips_and_refuses_what_is_not_base64) {
    for (const auto& bytes : std::vector<std::string>{"", "r", "rp", "rpc", "rpclb/a@127.0.0.1", std::string("\0\xff\x10", 3)}) {
        const auto text = etcd::base64_encode(bytes);
        BOOST_TEST(text.size() % 4 == 0u);
        const auto back = etcd::base64_decode(text);
        BOOST_TEST_REQUIRE(back.has_value());
        BOOST_TEST(*back == bytes);
    }
    BOOST_TEST(etcd::base64_encode("rpclb/a") == "cnBjbGIvYQ==");
    BOOST_TEST(!etcd::base64_decode("cnBjbGIvYQ=").has_value());   // not a multiple of 4
    BOOST_TEST(!etcd::base64_decode("cnBj*GIvYQ==").has_value());  // not in the alphabet
    BOOST_TEST(!etcd::base64_decode("cn=jbGIvYQ==").has_value());  // padding inside
}

BOOST_AUTO_TEST_CASE(prefix_range_end_covers_exactly_the_prefix) {
    BOOST_TEST(etcd::prefix_range_end("rpclb/") == "rpclb0");
    BOOST_TEST(etcd::prefix_range_end(std::string("a\xff", 2)) == "b");
    BOOST_TEST(etcd::prefix_range_end(std::string("\xff", 1)) == std::string(1, '\0'));
}

BOOST_AUTO_TEST_CASE(requests_carry_base64_keys_and_string_ids) {
    const auto put = boost::json::parse(etcd::put_request("rpclb/a@h", "127.0.0.1:5", 4111120452802203655));
    BOOST_TEST(put.at("key").as_string() == etcd::base64_encode("rpclb/a@h"));
    BOOST_TEST(put.at("value").as_string() == etcd::base64_encode("127.0.0.1:5"));
    BOOST_TEST(put.at("lease").as_string() == "4111120452802203655");
    const auto watch = boost::json::parse(etcd::watch_request("rpclb/", 7));
    const auto& create = watch.at("create_request");
    BOOST_TEST(create.at("range_end").as_string() == etcd::base64_encode("rpclb0"));
    BOOST_TEST(create.at("start_revision").as_string() == "7");
    BOOST_TEST(boost::json::parse(etcd::grant_request(9s)).at("TTL").as_int64() == 9);
}

BOOST_AUTO_TEST_CASE(answers_read_as_etcd_writes_them) {
    // Captured from etcd 3.4.23's gateway.
    const auto grant = etcd::parse_grant(answer(
        R"({"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"},"ID":"4111120452802203653","TTL":"2"})"));
    BOOST_TEST(grant.lease == 4111120452802203653);
    BOOST_TEST(grant.ttl == 2);
    BOOST_TEST(etcd::parse_keepalive(answer(R"({"result":{"header":{"revision":"2"},"ID":"41","TTL":"5"}})")) == 5);
    // A lease that is gone: no TTL.
    BOOST_TEST(etcd::parse_keepalive(answer(R"({"result":{"header":{"revision":"2"},"ID":"123"}})")) == 0);

    const auto range = etcd::parse_range(answer(
        R"({"header":{"revision":"2"},"kvs":[{"key":"cnBjbGIvYQ==","create_revision":"2","mod_revision":"2","version":"1","value":"MTI3LjAuMC4xOjU=","lease":"41"}],"count":"1"})"));
    BOOST_TEST(range.revision == 2);
    BOOST_TEST(!range.more);
    BOOST_TEST_REQUIRE(range.kvs.size() == 1u);
    BOOST_TEST(range.kvs[0].key == "rpclb/a");
    BOOST_TEST(range.kvs[0].value == "127.0.0.1:5");
    BOOST_TEST(etcd::parse_range(answer(R"({"header":{"revision":"2"}})")).kvs.empty());

    const auto created = etcd::parse_watch(answer(R"({"result":{"header":{"revision":"2"},"created":true}})"));
    BOOST_TEST(created.created);
    BOOST_TEST(created.events.empty());
    const auto events = etcd::parse_watch(answer(
        R"({"result":{"header":{"revision":"5"},"events":[{"kv":{"key":"cnBjbGIvYg==","create_revision":"3","mod_revision":"3","version":"1","value":"MTI3LjAuMC4xOjY=","lease":"4"}},{"type":"DELETE","kv":{"key":"cnBjbGIvYQ==","mod_revision":"5"}}]}})"));
    BOOST_TEST_REQUIRE(events.events.size() == 2u);
    BOOST_TEST(!events.events[0].deleted);
    BOOST_TEST(events.events[0].kv.key == "rpclb/b");
    BOOST_TEST(events.events[0].kv.value == "127.0.0.1:6");
    BOOST_TEST(events.events[0].kv.lease == 4);  // what tells this node's key overwritten without its lease
    BOOST_TEST(events.events[1].deleted);
    BOOST_TEST(events.events[1].kv.lease == 0);
    BOOST_TEST(events.events[1].kv.key == "rpclb/a");
    const auto canceled = etcd::parse_watch(
        answer(R"({"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"4"}})"));
    BOOST_TEST(canceled.canceled);
    BOOST_TEST(canceled.compact_revision == 4);

    const auto error = etcd::error_message(answer(
        R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})"));
    BOOST_TEST_REQUIRE(error.has_value());
    BOOST_TEST(*error == "etcdserver: requested lease not found");
    BOOST_TEST(etcd::error_message(answer(R"({"error":{"grpc_code":1,"message":"context canceled"}})")).value() ==
               "context canceled");
    BOOST_TEST(!etcd::error_message(answer(R"({"header":{}})")).has_value());
}

BOOST_AUTO_TEST_CASE(answers_etcd_would_not_send_are_refused_with_what_is_wrong) {
    const std::pair<const char*, const char*> grants[] = {
        {R"([1,2])", "is not a JSON object"},
        {R"({"TTL":"2"})", "no lease ID"},
        {R"({"ID":"x1","TTL":"2"})", "\"ID\" is not an integer"},
        {R"({"ID":"1"})", "no TTL"},
    };
    for (const auto& [text, why] : grants) {
        try {
            etcd::parse_grant(answer(text));
            BOOST_ERROR(text << " was accepted");
        } catch (const etcd::BadAnswer& e) {
            BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, text << ": " << e.what());
        }
    }
    BOOST_CHECK_THROW(etcd::parse_range(answer(R"({"kvs":[]})")), etcd::BadAnswer);  // no header
    BOOST_CHECK_THROW(etcd::parse_range(answer(R"({"header":{"revision":"2"},"kvs":{}})")), etcd::BadAnswer);
    BOOST_CHECK_THROW(etcd::parse_range(answer(R"({"header":{"revision":"2"},"kvs":[{"key":"!!!!"}]})")),
                      etcd::BadAnswer);
    BOOST_CHECK_THROW(etcd::parse_watch(answer(R"({"header":{}})")), etcd::BadAnswer);  // no result
    BOOST_CHECK_THROW(etcd::parse_watch(answer(R"({"result":{"events":[{"type":"MOVE","kv":{}}]}})")),
                      etcd::BadAnswer);
    BOOST_CHECK_THROW(etcd::parse_watch(answer(R"({"result":{"events":[{"type":"PUT"}]}})")), etcd::BadAnswer);
    BOOST_CHECK_THROW(etcd::parse_keepalive(answer(R"({"result":{"TTL":true}})")), etcd::BadAnswer);
}

BOOST_AUTO_TEST_CASE(node_list_keeps_valid_entries_of_other_nodes) {
    etcd::NodeList list("rpclb", "a@h");
    std::vector<std::string> problems;
    list.reset({{"rpclb/a@h", "127.0.0.1:1"},       // this node
                {"rpclb/b@h", "127.0.0.1:2"},
                {"rpclb/c@h", "127.0.0.1:3"},
                {"rpclb/nohost", "127.0.0.1:4"},    // not short@host
                {"rpclb/d@h", "127.0.0.1"},         // no port
                {"rpclb/e@h", "dns:e.svc:7001"},    // not an address
                {"rpclb/f@h", "127.0.0.1:0"}},      // port 0
               problems);
    const std::map<std::string, std::string, std::less<>> expected{{"b@h", "127.0.0.1:2"}, {"c@h", "127.0.0.1:3"}};
    BOOST_TEST((list.nodes() == expected));
    BOOST_TEST(problems.size() == 4u);
    for (const auto& p : problems) BOOST_TEST_MESSAGE(p);

    problems.clear();
    BOOST_TEST(list.apply({{false, {"rpclb/d@h", "127.0.0.1:4"}}}, problems));
    BOOST_TEST(list.nodes().at("d@h") == "127.0.0.1:4");
    BOOST_TEST(!list.apply({{false, {"rpclb/d@h", "127.0.0.1:4"}}}, problems));  // the same again
    BOOST_TEST(list.apply({{true, {"rpclb/b@h", ""}}}, problems));
    BOOST_TEST(!list.nodes().contains("b@h"));
    BOOST_TEST(!list.apply({{true, {"rpclb/zz@h", ""}}}, problems));  // not listed
    // A node whose new value cannot be dialled is no longer listed at its old one.
    BOOST_TEST(list.apply({{false, {"rpclb/c@h", "garbage"}}}, problems));
    BOOST_TEST(!list.nodes().contains("c@h"));
    BOOST_TEST(problems.size() == 1u);
    // Control characters in a key are escaped in the problem, which is logged.
    problems.clear();
    list.apply({{false, {"rpclb/x\ny", "127.0.0.1:9"}}}, problems);
    BOOST_TEST_REQUIRE(problems.size() == 1u);
    BOOST_TEST(problems[0].find('\n') == std::string::npos, problems[0]);
}

BOOST_AUTO_TEST_CASE(node_list_holds_at_most_max_nodes_and_says_how_many_it_left_out) {
    etcd::NodeList list("rpclb", "a@h");
    std::vector<etcd::KeyValue> kvs;
    for (std::size_t i = 0; i < etcd::NodeList::max_nodes + 10; ++i)
        kvs.push_back({"rpclb/n" + std::to_string(i) + "@h", "127.0.0.1:7"});
    std::vector<std::string> problems;
    list.reset(kvs, problems);
    BOOST_TEST(list.nodes().size() == etcd::NodeList::max_nodes);
    BOOST_TEST_REQUIRE(problems.size() == 1u);
    BOOST_TEST(problems[0] == "10 keys of further nodes left out: at most 65536 nodes are listed");
    // A watch adds none past the bound either, and a listed node still changes address.
    problems.clear();
    BOOST_TEST(!list.apply({{false, {"rpclb/late@h", "127.0.0.1:8"}}}, problems));
    BOOST_TEST(problems.size() == 1u);
    problems.clear();
    BOOST_TEST(list.apply({{false, {"rpclb/n0@h", "127.0.0.1:8"}}}, problems));
    BOOST_TEST(problems.empty());
}

BOOST_AUTO_TEST_SUITE_END()
