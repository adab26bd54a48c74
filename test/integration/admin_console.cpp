// The admin console with real processes: three rpclb-node with --admin host balancer `w`;
// rpclb-admin, plain HTTP and a raw WebSocket talk to their admin listeners
// (doc/reference/admin-protocol.md, doc/how-to/operate-a-cluster.md).
#define BOOST_TEST_MODULE admin_console
#include <boost/test/unit_test.hpp>

#include <csignal>

#include "support/admin.hpp"
#include "support/load.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using namespace rpclb::test;
namespace json = boost::json;

namespace {

using Cluster3 = AdminCluster3;

}  // namespace

BOOST_AUTO_TEST_SUITE(admin_console)

BOOST_FIXTURE_TEST_CASE(nodes_balancers_and_groups_of_the_whole_cluster, Cluster3) {
    auto r = admin({"nodes"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    for (const auto* n : {"a@127.0.0.1 *", "b@127.0.0.1", "c@127.0.0.1"}) BOOST_TEST(r.out.find(n) != std::string::npos, n);

    r = admin({"--json", "nodes"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    // The in-process client is connected too, with no admin listener to describe it.
    const auto all = r.json().at("nodes").as_array();
    BOOST_TEST_REQUIRE(all.size() == 4u);
    std::vector<json::value> nodes;
    std::copy_if(all.begin(), all.end(), std::back_inserter(nodes),
                 [](const json::value& n) { return !n.as_object().contains("error"); });
    BOOST_TEST_REQUIRE(nodes.size() == 3u);
    for (const auto& n : nodes) {
        BOOST_TEST(n.at("ready").as_bool());
        BOOST_TEST(n.at("connections") == 3);
        BOOST_TEST(n.as_object().contains("admin"));
        if (!n.at("self").as_bool()) BOOST_TEST(n.at("rtt_ms").as_double() >= 0.0);
    }
    // Every connected node, the client without an admin listener included, has answered a
    // timed keep-alive ping (sent as soon as a connection is established).
    BOOST_TEST(eventually([&] {
        const auto answer = admin({"--json", "nodes"});
        if (answer.status != 0) return false;
        const auto doc = answer.json();
        for (const auto& n : doc.at("nodes").as_array()) {
            const auto& o = n.as_object();
            if (o.at("self").as_bool()) continue;
            const auto* rtt = o.if_contains("keepalive_rtt_ms");
            if (!rtt || !rtt->is_double() || rtt->get_double() <= 0.0 || rtt->get_double() > 1000.0) return false;
        }
        return true;
    }, 5s, 200ms), "a connected node has no keep-alive round trip");

    r = admin({"--json", "balancers"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    auto per_node = r.json().as_array();
    // The client has no admin listener: listed with why its balancers are unknown, not
    // left out.
    BOOST_TEST_REQUIRE(per_node.size() == 4u);
    const auto unasked = std::find_if(per_node.begin(), per_node.end(),
                                      [](const json::value& n) { return n.as_object().contains("error"); });
    BOOST_TEST_REQUIRE((unasked != per_node.end()), slurp(r));
    BOOST_TEST(unasked->at("node").as_string() == client->name());
    BOOST_TEST(unasked->at("error") == "no admin listener", slurp(r));
    per_node.erase(unasked);
    for (const auto& answer : per_node) {
        const auto& list = answer.at("balancers").as_array();
        BOOST_TEST_REQUIRE(list.size() == 1u);
        BOOST_TEST(list[0].at("name") == "w");
        BOOST_TEST(list[0].at("algorithm") == "round_robin");
        BOOST_TEST(list[0].at("members").as_array().size() == 3u);
        BOOST_TEST(list[0].at("joined").as_bool());
        // Every member with its calls in flight from that node (none: nodes only serve here).
        const auto& by_member = list[0].at("in_flight_by_member").as_object();
        BOOST_TEST(by_member.size() == 3u);
        for (const auto& [node, n] : by_member) BOOST_TEST(n == 0, node);
    }
    r = admin({"balancers"});
    BOOST_TEST(r.status == 0);
    BOOST_TEST(r.out.find("round_robin") != std::string::npos);
    BOOST_TEST(r.out.find(client->name() + " ") != std::string::npos, r.out);

    r = admin({"--json", "groups"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    const auto groups = r.json().at("groups").as_array();
    BOOST_TEST_REQUIRE(groups.size() == 1u);
    BOOST_TEST(groups[0].at("group") == "w");
    BOOST_TEST(groups[0].at("members").as_array().size() == 3u);

    // The plugins b loaded, asked through a: round_robin, from its file, used by w.
    r = admin({"--json", "plugins", b->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    const auto plugins = r.json().at("plugins").as_array();
    BOOST_TEST_REQUIRE(plugins.size() == 1u, slurp(r));
    BOOST_TEST(plugins[0].at("name") == "round_robin");
    BOOST_TEST(std::string(plugins[0].at("file").as_string()).ends_with("/librpclb_round_robin.so"));
    BOOST_TEST(plugins[0].at("balancers") == json::array{"w"});
    BOOST_TEST(plugins[0].at("abi_version").to_number<int>() > 0);
    r = admin({"plugins"});
    BOOST_TEST(r.status == 0);
    BOOST_TEST(r.out.find("round_robin") != std::string::npos, slurp(r));

    // stats of another node, forwarded by a.
    r = admin({"--json", "stats", c->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.json().at("node") .as_string() == c->name());
    BOOST_TEST(r.json().at("connections") == 3);
    // As text: every line is a key, spaces, and its value, whatever the key's length.
    r = admin({"stats", c->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    std::istringstream lines(r.out);
    int counted = 0;
    for (std::string line; std::getline(lines, line); ++counted) {
        const auto space = line.find(' ');
        BOOST_TEST((space != std::string::npos && space > 0 && line.find_first_not_of(' ', space) != std::string::npos),
                   "key and value run together: " << line);
    }
    BOOST_TEST(counted > 10, slurp(r));
}

BOOST_FIXTURE_TEST_CASE(metrics_and_probes_over_http, Cluster3) {
    for (int i = 0; i < 6; ++i) {
        auto r = client->call("demo", "echo", {i}, {.load_balancer = "w"});
        BOOST_TEST_REQUIRE(r.has_value());
    }
    const auto address = admin_address(*b);
    auto m = http_get(address, "/metrics");
    BOOST_TEST(m.status == 200u);
    BOOST_TEST(m.content_type == "text/plain; version=0.0.4; charset=utf-8");
    BOOST_TEST(m.body.find("rpclb_node_info{node=\"b@127.0.0.1\"") != std::string::npos);
    BOOST_TEST(m.body.find("rpclb_balancer_members{load_balancer=\"w\",algorithm=\"round_robin\"} 3") != std::string::npos);
    BOOST_TEST(m.body.find("rpclb_peers_connected 3") != std::string::npos);  // a, c and the client
    BOOST_TEST(m.body.find("# TYPE rpc_load_balancer_rpc_request_stop_count_total counter") != std::string::npos);

    BOOST_TEST(http_get(address, "/healthz").status == 200u);
    BOOST_TEST(http_get(address, "/readyz").status == 200u);
    BOOST_TEST(http_get(address, "/readyz?verbose=1").status == 200u);
    BOOST_TEST(http_get(address, "/nothing").status == 404u);

    // The same text through the console, forwarded from a to b.
    auto r = admin({"metrics", b->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.out.find("rpclb_node_info{node=\"b@127.0.0.1\"") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(drain_with_calls_running_loses_no_call, Cluster3) {
    // A watcher on b sees its drain begin and end.
    Process watch(bin_dir() / "rpclb-admin",
                  {"--admin", admin_address(*b), "--token", admin_token, "watch", "drain.*", "--count", "2"}, {},
                  dir() / "watch.log");
    BOOST_TEST_REQUIRE(eventually(
        [&] { return http_get(admin_address(*b), "/metrics").body.find("rpclb_admin_subscribers 1\n") != std::string::npos; },
        5s));

    CallLoad load(*client, "w", 8, [](rpclb::Cluster& c, int, const rpclb::CallOptions& o) {
        return c.call("demo", "sleep", {2}, o);
    });
    BOOST_TEST_REQUIRE(eventually([&] { return load.served_by(b->name()) > 20; }, 10s));

    auto r = admin({"drain", b->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.out.find("drained: w") != std::string::npos);
    BOOST_TEST(wait_for_members(*client, "w", {a->name(), c->name()}));
    BOOST_TEST(http_get(admin_address(*b), "/readyz").status == 503u);
    BOOST_TEST(http_get(admin_address(*b), "/healthz").status == 200u);
    // Load keeps flowing to a and c while b is drained.
    const auto on_a = load.served_by(a->name());
    BOOST_TEST(eventually([&] { return load.served_by(a->name()) > on_a + 20; }, 10s));
    const auto on_b = load.served_by(b->name());

    r = admin({"undrain", b->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(wait_for_members(*client, "w", {a->name(), b->name(), c->name()}));
    BOOST_TEST(http_get(admin_address(*b), "/readyz").status == 200u);
    BOOST_TEST(eventually([&] { return load.served_by(b->name()) > on_b + 20; }, 10s));
    load.finish();
    BOOST_TEST(load.errors().empty(), load.errors().size() << " failed calls, first: " << load.errors().front());

    BOOST_TEST_REQUIRE(watch.wait_exit(10s).has_value(), "the watcher did not see two drain events");
    watch.wait_for_line("\x01", Process::Clock::now() + 1s);
    const auto& lines = watch.stdout_lines();
    BOOST_TEST_REQUIRE(lines.size() == 2u);
    BOOST_TEST(lines[0].rfind("drain.begin load_balancer=w", 0) == 0u, lines[0]);
    BOOST_TEST(lines[1].rfind("drain.end", 0) == 0u, lines[1]);
    BOOST_TEST(lines[1].find("outcome=drained") != std::string::npos, lines[1]);
}

BOOST_FIXTURE_TEST_CASE(wrong_token_is_refused_and_counted, Cluster3) {
    auto r = admin({"nodes"}, "not-the-token");
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("unauthorized: wrong token") != std::string::npos, r.err);
    r = run_admin(dir(), {"--admin", admin_address(*a), "nodes"});  // no token at all
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("needs a token") != std::string::npos, r.err);

    // A token in the request itself works on an unauthenticated connection; a wrong one doesn't.
    AdminSocket ws(admin_address(*a));
    auto answer = ws.ask(R"({"id":1,"cmd":"self","token":"wrong"})");
    BOOST_TEST(error_code_of(answer) == "unauthorized");
    answer = ws.ask(R"({"id":2,"cmd":"self","token":")" + admin_token + R"("})");
    BOOST_TEST(answer.at("result").at("name") .as_string() == a->name());
    BOOST_TEST(error_code_of(ws.ask(R"({"id":3,"cmd":"self"})")) == "unauthorized");
    // An auth request authenticates the connection.
    BOOST_TEST(ws.ask(R"({"id":4,"cmd":"auth","token":")" + admin_token + R"("})").contains("result"));
    BOOST_TEST(ws.ask(R"({"id":5,"cmd":"self"})").contains("result"));

    const auto metrics = http_get(admin_address(*a), "/metrics").body;  // no token needed
    BOOST_TEST(metrics.find("rpclb_admin_wrong_tokens_total 4") != std::string::npos, metrics.substr(0, 3000));
}

BOOST_FIXTURE_TEST_CASE(bad_input_is_answered_and_the_node_keeps_serving, Cluster3) {
    AdminSocket ws(admin_address(*a), admin_token);
    auto answer = ws.ask("this is not json");  // answered with a null id
    BOOST_TEST(answer.at("id").is_null());
    BOOST_TEST(error_code_of(answer) == "bad_request");
    answer = ws.ask(R"({"id":1,"cmd":"reboot"})");
    BOOST_TEST(answer.at("id") == 1);
    BOOST_TEST(error_code_of(answer) == "unknown_command");
    answer = ws.ask(R"({"id":2,"cmd":"balancer_stop"})");
    BOOST_TEST(error_code_of(answer) == "bad_request");
    BOOST_TEST(answer.at("error").at("message") == "balancer_stop: field \"name\" is missing");
    answer = ws.ask(R"({"id":3,"cmd":"balancer_stop","name":"nope"})");
    BOOST_TEST(error_code_of(answer) == "not_found");
    answer = ws.ask(R"({"id":4,"cmd":"stats","node":"ghost@127.0.0.1"})");
    BOOST_TEST(error_code_of(answer) == "unavailable");
    BOOST_TEST(answer.at("error").at("message") ==
               "node ghost@127.0.0.1 is not connected to a@127.0.0.1 (unknown, or gone)");
    answer = ws.ask(R"({"id":5,"cmd":"subscribe","filter":{"events":["no.such.*"]}})");
    BOOST_TEST(error_code_of(answer) == "bad_request");
    answer = ws.ask(R"({"id":6,"cmd":"balancer_start","name":"v","algorithm":"no_such_algorithm"})");
    BOOST_TEST(error_code_of(answer) == "failed");
    // A message over 64 KiB: read and thrown away, answered, and the connection goes on.
    answer = ws.ask(R"({"id":7,"cmd":"nodes","pad":")" + std::string(70 * 1024, 'x') + R"("})");
    BOOST_TEST(error_code_of(answer) == "too_large");
    answer = ws.ask(R"({"id":8,"cmd":"stats"})");
    BOOST_TEST_REQUIRE(answer.contains("result"));
    BOOST_TEST(answer.at("result").at("admin").at("bad_requests").to_number<int>() >= 5);
    // Too many subscribers.
    for (int i = 0; i < 16; ++i)
        BOOST_TEST_REQUIRE(ws.ask(R"({"id":9,"cmd":"subscribe","filter":{"events":["plugin.*"]}})").contains("result"));
    BOOST_TEST(error_code_of(ws.ask(R"({"id":10,"cmd":"subscribe"})")) == "too_many_subscribers");
    // The node still serves calls and the console.
    BOOST_TEST(client->call("demo", "echo", {1}, {.load_balancer = "w"}).has_value());
    auto r = admin({"nodes"});
    BOOST_TEST(r.status == 0, slurp(r));
}

BOOST_FIXTURE_TEST_CASE(balancer_start_stop_and_log_level, Cluster3) {
    auto r = admin({"balancer", "start", "v", "random", "--node", c->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(wait_for_members(*client, "v", {c->name()}));
    r = admin({"balancer", "start", "v", "round_robin", "--options", "[1]"});
    BOOST_TEST(r.status == 2, slurp(r));
    r = admin({"balancer", "stop", "v"});  // every node hosting it: c
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(wait_for_members(*client, "v", {}));
    r = admin({"balancer", "stop", "v"});
    BOOST_TEST(r.status == 1, slurp(r));
    // With --json a failure is JSON on stdout too: the node's error object.
    r = admin({"--json", "log-level", "loud", b->name()});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.json().at("error").at("code") == "bad_request", slurp(r));
    BOOST_TEST(r.err.find("unknown log level") != std::string::npos);

    r = admin({"log-level", "debug", b->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    // b now logs group changes at debug: start and stop a balancer elsewhere and look.
    BOOST_TEST(admin({"balancer", "start", "u", "random"}).status == 0);
    BOOST_TEST(eventually([&] { return b->log_contains("debug [groups]"); }, 5s));
    r = admin({"log-level", "loud"});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("unknown log level") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(stop_command_stops_a_node_gracefully, Cluster3) {
    auto r = admin({"stop", c->name()});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    const auto status = c->process().wait_exit(20s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(describe_status(*status) == "exited 0");
    BOOST_TEST(c->log_contains("got the admin stop command, leaving and draining"), c->log());
    BOOST_TEST(wait_for_members(*client, "w", {a->name(), b->name()}));
    r = admin({"--json", "nodes"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.json().at("nodes").as_array().size() == 3u);  // a, b and the client
    BOOST_TEST(r.out.find("c@127.0.0.1") == std::string::npos);
}

// A node that every peer refuses (a wrong cookie) can serve nothing the cluster routes:
// it is not ready, and says why.
BOOST_FIXTURE_TEST_CASE(a_node_shut_out_by_its_cookie_is_not_ready, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}});
    auto stranger = start_node({.name = "stranger", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                                .cookie_flag = "not-the-cluster-cookie", .extra_args = admin_args()});
    const auto address = admin_address(*stranger);
    BOOST_TEST_REQUIRE(eventually([&] { return http_get(address, "/readyz").status == 503u; }, 5s),
                       "/readyz of a node shut out by its cookie did not answer 503");
    const auto ready = http_get(address, "/readyz");
    BOOST_TEST(ready.body == "cookie refused by " + a->name() + "\n");
    BOOST_TEST(http_get(address, "/healthz").status == 200u);  // alive, just not ready
    BOOST_TEST(http_get(address, "/metrics").body.find("rpclb_node_ready 0\n") != std::string::npos);
    const auto self = run_admin(dir(), {"--admin", address, "--token", admin_token, "--json", "stats"});
    BOOST_TEST_REQUIRE(self.status == 0, slurp(self));
    BOOST_TEST(self.json().at("ready") == false);
    // rpclb-admin nodes says why.
    const auto nodes = run_admin(dir(), {"--admin", address, "--token", admin_token, "nodes"});
    BOOST_TEST_REQUIRE(nodes.status == 0, slurp(nodes));
    BOOST_TEST(nodes.out.find("not ready") != std::string::npos, nodes.out);
    BOOST_TEST(nodes.out.find("cookie refused by " + a->name()) != std::string::npos, nodes.out);
}

BOOST_FIXTURE_TEST_CASE(non_loopback_admin_without_token_is_refused_at_start, Harness) {
    Process p(bin_dir() / "rpclb-node",
              {"--name", "x@127.0.0.1", "--cookie", test_cookie, "--admin", "0.0.0.0:0"}, {}, dir() / "x.log");
    const auto status = p.wait_exit(10s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(describe_status(*status) == "exited 2");
    BOOST_TEST(p.stderr_text().find("not a loopback address") != std::string::npos, p.stderr_text());
}

BOOST_FIXTURE_TEST_CASE(config_file_admin_section_on_loopback_needs_no_token, Harness) {
    const auto config = dir() / "node.json";
    std::ofstream(config) << R"({"admin": {"listen": "127.0.0.1:0", "max_subscribers": 1}})";
    auto n = start_node({.name = "n", .extra_args = {"--config", config.string()}});
    const auto r = run_admin(dir(), {"--admin", admin_address(*n), "--json", "stats"});
    BOOST_TEST_REQUIRE(r.status == 0, slurp(r));
    BOOST_TEST(r.json().at("node").as_string() == n->name());
    AdminSocket ws(admin_address(*n));
    BOOST_TEST(ws.ask(R"({"id":1,"cmd":"subscribe"})").contains("result"));
    BOOST_TEST(error_code_of(ws.ask(R"({"id":2,"cmd":"subscribe"})")) == "too_many_subscribers");
}

BOOST_FIXTURE_TEST_CASE(command_line_errors_exit_2, Harness) {
    // Nothing listens on port 1; a bad command line is reported before any connection.
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"--admin", "127.0.0.1:1"},
             {"nodes"},
             {"--admin", "127.0.0.1:1", "frobnicate"},
             {"--admin", "127.0.0.1:1", "drain"},
             {"--admin", "127.0.0.1:1", "balancer", "restart", "w"},
             {"--admin", "127.0.0.1:1", "--bogus", "nodes"},
             {"--admin", "127.0.0.1:1", "watch", "--count", "-1"},
             {"--admin", "127.0.0.1:1", "watch", "--count", "0"},
             // 1e400 reads as infinity, which cannot be sent as JSON.
             {"--admin", "127.0.0.1:1", "balancer", "set-options", "w", R"({"weight": 1e400})"},
             {"--admin", "127.0.0.1:1", "balancer", "start", "z", "hash_ring", "--options", R"({"w": [1e400]})"}}) {
        const auto r = run_admin(dir(), args);
        BOOST_TEST(r.status == 2, slurp(r));
    }
    // Text that is not JSON is called that, not "must be a JSON object".
    const auto cut = run_admin(dir(), {"--admin", "127.0.0.1:1", "balancer", "set-options", "w", R"({"a":)"});
    BOOST_TEST(cut.status == 2, slurp(cut));
    BOOST_TEST(cut.err.find("is not JSON") != std::string::npos, cut.err);
    const auto array = run_admin(dir(), {"--admin", "127.0.0.1:1", "balancer", "set-options", "w", "[1]"});
    BOOST_TEST(array.status == 2, slurp(array));
    BOOST_TEST(array.err.find("must be a JSON object") != std::string::npos, array.err);
    const auto r = run_admin(dir(), {"--admin", "127.0.0.1:1", "nodes"});
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("cannot connect") != std::string::npos, r.err);
}

BOOST_FIXTURE_TEST_CASE(a_frozen_node_makes_rpclb_admin_fail_after_its_timeout, Harness) {
    auto n = start_node({.name = "n", .extra_args = {"--admin", "127.0.0.1:0"}});
    BOOST_TEST_REQUIRE(n->process().freeze());  // the kernel still accepts the connection
    const auto began = std::chrono::steady_clock::now();
    const auto r = run_admin(dir(), {"--admin", admin_address(*n), "--timeout", "1000", "nodes"});
    const auto took = std::chrono::steady_clock::now() - began;
    n->process().signal(SIGCONT);
    BOOST_TEST(r.status == 1, slurp(r));
    BOOST_TEST(r.err.find("no answer from") != std::string::npos, r.err);
    BOOST_TEST((took < 8s));
    BOOST_TEST(run_admin(dir(), {"--admin", admin_address(*n), "nodes"}).status == 0);
}

BOOST_AUTO_TEST_SUITE_END()
