// TLS on the mesh (ClusterOptions::tls): a cluster whose certificates chain to its CA
// serves calls; a certificate from another CA, an expired one, one for another host, and a
// peer that does not speak TLS at all are refused, logged with their reason, and the node
// keeps serving; bad TLS options stop rpclb-node and rpclb-call with exit status 2.
//
// The certificates are made by this test with the `openssl` command, in a temporary
// directory removed when the test ends.
#define BOOST_TEST_MODULE tls
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/pki.hpp"
#include "support/serving.hpp"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;

namespace {

namespace fs = std::filesystem;

/// Two CAs and certificates for the cases below, made once for the whole module.
const Pki& pki() {
    static const Pki p;
    static const bool made = [] {
        const std::string local = "subjectAltName=IP:127.0.0.1,DNS:localhost";
        p.make_ca("ca");
        p.make_ca("ca2");
        p.make_cert("node", "ca", local, "30");
        p.make_cert("client", "ca", local, "30");
        p.make_cert("other", "ca2", local, "30");     // right host, wrong CA
        p.make_cert("expired", "ca", local, "-1");    // notAfter a day before notBefore
        p.make_cert("wronghost", "ca", "subjectAltName=IP:10.255.0.1,DNS:elsewhere.example", "30");
        return true;
    }();
    (void)made;
    return p;
}

/// A node with TLS certificate `cert` trusting `ca`, hosting balancer w.
NodeSpec tls_node(std::string name, const std::string& cert, std::vector<std::string> seeds = {},
                  const std::string& ca = "ca") {
    return {.name = std::move(name), .seeds = std::move(seeds), .balancers = {"w=round_robin"},
            .extra_args = pki().flags(cert, ca)};
}

CallOptions through_w() {
    CallOptions o;
    o.load_balancer = "w";
    o.timeout = 2s;
    return o;
}

// One TLS node `a` hosting w and an in-process TLS client that routes through it.
struct TlsCluster : Harness {
    TlsCluster() {
        a = start_node(tls_node("a", "node"));
        rpclb::ClusterOptions options;
        options.tls = pki().options("client");
        options.reconnect_interval = 100ms;
        client = start_client({a->address()}, options);
        if (!wait_for_members(*client, "w", {a->name()}))
            throw std::runtime_error("the TLS client did not see a in w within 5 s");
    }
    std::unique_ptr<Node> a;
    std::unique_ptr<rpclb::Cluster> client;
};

// Runs `program` with `args` and returns (exit status, stderr); it must exit within 10 s.
std::pair<int, std::string> run_to_exit(Harness& h, const std::string& program, const std::vector<std::string>& args) {
    static int runs = 0;
    Process p(bin_dir() / program, args, {{"RPCLB_COOKIE", test_cookie}},
              h.dir() / (program + "." + std::to_string(++runs) + ".log"));
    const auto status = p.wait_exit(10s);
    if (!status) throw std::runtime_error(program + " did not exit within 10 s");
    return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, p.stderr_text()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tls)

BOOST_FIXTURE_TEST_CASE(cluster_with_one_ca_serves_calls_through_a_balancer, TlsCluster) {
    // b takes its TLS settings from the config file's "tls" section; it would accept TLS
    // 1.2, and a, which accepts only 1.3, still agrees with it on 1.3.
    const auto config = dir() / "b.json";
    std::ofstream(config) << R"({"tls": {"cert": ")" << pki().cert("node").string() << R"(", "key": ")"
                          << pki().key("node").string() << R"(", "ca": ")" << pki().cert("ca").string()
                          << R"(", "min_version": "1.2"}})";
    auto b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                         .extra_args = {"--config", config.string()}});
    const auto good = sorted({a->name(), b->name()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", good));

    std::map<std::string, int> per_node;
    for (int i = 0; i < 20; ++i) {
        std::string peer;
        auto options = through_w();
        options.peer = &peer;
        const auto r = client->call("demo", "echo", {i, "x"}, options);
        BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
        BOOST_TEST(*r == boost::json::value(boost::json::array{i, "x"}));
        ++per_node[peer];
    }
    BOOST_TEST(per_node.size() == 2u, "round_robin over two TLS nodes reached " << per_node.size());
    BOOST_TEST(client->stats().tls_failures == 0u);

    // rpclb-call with the --tls-* flags.
    auto args = pki().flags("client");
    args.insert(args.end(), {"--seed", a->address(), "--balancer", "w", "--count", "10", "demo", "node"});
    Process call(bin_dir() / "rpclb-call", args, {{"RPCLB_COOKIE", test_cookie}}, dir() / "call.log");
    const auto status = call.wait_exit(15s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-call still runs");
    BOOST_TEST(describe_status(*status) == "exited 0", call.stderr_text());
    const auto summary = call.wait_for_line("{", Process::Clock::now() + 2s);
    BOOST_TEST_REQUIRE(summary.has_value(), "rpclb-call printed no summary");
    BOOST_TEST(summary->find("\"ok\":10") != std::string::npos, *summary);
    BOOST_TEST(!a->log_contains("TLS handshake"), a->log());
    BOOST_TEST(!b->log_contains("TLS handshake"), b->log());
}

// Frames larger than a TLS record and than the socket buffers: a 6 MiB argument goes out
// in many records and writes that wait for the socket, and comes back whole, several
// calls at once on the node's link and call channels.
BOOST_FIXTURE_TEST_CASE(large_calls_over_tls_come_back_whole, TlsCluster) {
    std::string big(6 << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
    std::vector<std::thread> callers;
    std::atomic<int> whole{0};
    std::vector<std::string> errors(3);
    for (int t = 0; t < 3; ++t)
        callers.emplace_back([&, t] {
            auto options = through_w();
            options.timeout = 20s;
            const auto r = client->call("demo", "echo", {t, big}, options);
            if (!r) return void(errors[t] = r.error().message);
            if (*r == boost::json::value(boost::json::array{t, big})) ++whole;
        });
    for (auto& c : callers) c.join();
    for (const auto& e : errors) BOOST_TEST(e.empty(), e);
    BOOST_TEST(whole.load() == 3);
    BOOST_TEST(client->stats().tls_failures == 0u);
}

BOOST_FIXTURE_TEST_CASE(certificate_from_another_ca_is_refused, TlsCluster) {
    auto stranger = start_node(tls_node("stranger", "other", {a->address()}, "ca2"));
    // The stranger checks a's certificate first (TLS: the server proves itself first) and
    // finds no path to its own CA; a hears the stranger's alert.
    // (a sends its CA with its certificate: the stranger finds a root it does not trust.)
    BOOST_TEST(eventually([&] { return stranger->log_contains("TLS handshake with " + a->address() + " failed: the peer's certificate was refused: self-signed certificate in certificate chain"); }, 5s),
               stranger->log());
    BOOST_TEST(eventually([&] { return a->log_contains("TLS handshake with an incoming peer (127.0.0.1:"); }, 5s),
               a->log());
    BOOST_TEST(a->log_contains("unknown ca"), a->log());
    check_keeps_serving(*client, "w", {a->name()}, 1000ms);
    BOOST_TEST(a->process().running());
    BOOST_TEST(stranger->process().running());
    // One warning per peer and reason, however often the stranger redials.
    BOOST_TEST(stranger->log_count("TLS handshake with " + a->address()) == 1u, stranger->log());
}

BOOST_FIXTURE_TEST_CASE(expired_certificate_is_refused, TlsCluster) {
    auto late = start_node(tls_node("late", "expired", {a->address()}));
    // late accepts a's certificate; a refuses late's.
    BOOST_TEST(eventually([&] { return a->log_contains("the peer's certificate was refused: certificate has expired"); }, 5s),
               a->log());
    BOOST_TEST(eventually([&] { return late->log_contains("TLS handshake with " + a->address() + " failed"); }, 5s),
               late->log());
    BOOST_TEST(late->log_contains("certificate expired"), late->log());
    check_keeps_serving(*client, "w", {a->name()}, 1000ms);
    BOOST_TEST(late->process().running());
}

BOOST_FIXTURE_TEST_CASE(certificate_for_another_host_is_refused, TlsCluster) {
    // `elsewhere` listens on 127.0.0.1 with a certificate for 10.255.0.1: whoever dials it
    // at 127.0.0.1 refuses it, although the certificate chains to the right CA.
    auto elsewhere = start_node(tls_node("elsewhere", "wronghost"));
    auto b = start_node(tls_node("b", "node", {a->address(), elsewhere->address()}));
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", sorted({a->name(), b->name()})));
    BOOST_TEST(eventually([&] { return b->log_contains("TLS handshake with " + elsewhere->address() + " failed: the peer's certificate was refused: IP address mismatch"); }, 5s),
               b->log());
    check_keeps_serving(*client, "w", sorted({a->name(), b->name()}), 1000ms);
    BOOST_TEST(elsewhere->process().running());
}

BOOST_FIXTURE_TEST_CASE(plaintext_and_tls_nodes_refuse_each_other, TlsCluster) {
    // A plaintext node dials the TLS node a...
    auto plain = start_node({.name = "plain", .seeds = {a->address()}, .balancers = {"w=round_robin"}});
    BOOST_TEST(eventually([&] { return a->log_contains("failed: plaintext peer"); }, 5s), a->log());
    BOOST_TEST(eventually([&] { return plain->log_contains("TLS handshake with " + a->address() + " failed"); }, 5s),
               plain->log());
    BOOST_TEST(plain->log_contains("is it a TLS node?"), plain->log());
    // ...and a TLS node dials a plaintext one.
    auto t = start_node(tls_node("t", "node", {plain->address()}));
    BOOST_TEST(eventually([&] { return t->log_contains("TLS handshake with " + plain->address() + " failed: peer is not speaking TLS"); }, 5s),
               t->log());
    BOOST_TEST(eventually([&] { return plain->log_contains("the peer speaks TLS and this node is plaintext"); }, 5s),
               plain->log());
    check_keeps_serving(*client, "w", {a->name()}, 1000ms);
    BOOST_TEST(plain->process().running());
    BOOST_TEST(t->process().running());
    // The plaintext node still serves plaintext clients.
    auto plain_client = start_client({plain->address()});
    BOOST_TEST_REQUIRE(wait_for_connected(*plain_client, {plain->name()}));
    const auto r = plain_client->call(plain->name(), "demo", "node", {}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message);
}

// The readiness waits of a node whose every seed fails the TLS handshake end at once,
// naming the seed and the reason, instead of waiting out their timeout.
BOOST_FIXTURE_TEST_CASE(readiness_waits_fail_at_once_when_every_seed_fails_tls, TlsCluster) {
    rpclb::ClusterOptions options;
    options.tls = pki().options("other", "ca2");  // a's certificate is from a CA it does not trust
    options.reconnect_interval = 100ms;
    const auto t0 = steady_clock::now();
    auto stranger = start_client({a->address()}, options);
    const auto members = stranger->wait_for_members("w", 1, 20s);
    BOOST_TEST((steady_clock::now() - t0 < 5s), "the wait took "
                                                   << duration_cast<milliseconds>(steady_clock::now() - t0).count()
                                                   << " ms");
    BOOST_TEST_REQUIRE(!members.has_value());
    BOOST_TEST(members.error().is(rpclb::Failure::tls_refused), members.error().message);
    BOOST_TEST(members.error().code == rpclb::ErrorCode::service_unavailable);
    BOOST_TEST(members.error().message.find("TLS handshake with " + a->address() + " failed: ") == 0u,
               members.error().message);
    BOOST_TEST(members.error().details.at("tls_peer").as_string() == a->address());
    const auto t1 = steady_clock::now();
    const auto node = stranger->wait_for_node(a->name(), 20s);
    BOOST_TEST_REQUIRE(!node.has_value());
    BOOST_TEST(node.error().is(rpclb::Failure::tls_refused), node.error().message);
    BOOST_TEST((steady_clock::now() - t1 < 1s));
}

// A TLS failure with every seed is as final for rpclb-call as a refused cookie: it exits 1
// saying so within about a second, instead of retrying its calls for half a minute.
BOOST_FIXTURE_TEST_CASE(rpclb_call_without_tls_against_a_tls_node_fails_fast, TlsCluster) {
    const auto t0 = std::chrono::steady_clock::now();
    Process call(bin_dir() / "rpclb-call", {"--seed", a->address(), "--balancer", "w", "demo", "node"},
                 {{"RPCLB_COOKIE", test_cookie}}, dir() / "plain-call.log");
    const auto status = call.wait_exit(15s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-call still runs");
    BOOST_TEST(describe_status(*status) == "exited 1", call.stderr_text());
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 3s), "rpclb-call took too long to give up");
    BOOST_TEST(call.stderr_text().find("every TLS handshake with the cluster failed") != std::string::npos,
               call.stderr_text());
}

BOOST_FIXTURE_TEST_CASE(bad_tls_options_exit_2_naming_the_option, Harness) {
    const auto& p = pki();
    const auto node = [&](std::vector<std::string> args) { return run_to_exit(*this, "rpclb-node", args); };
    const auto missing = (p.dir() / "missing.pem").string();
    struct Case {
        std::vector<std::string> args;
        std::string expected;
    };
    const std::vector<Case> cases{
        {{"--tls-cert", missing, "--tls-key", p.key("node").string()},
         "rpclb-node: --tls-cert: \"" + missing + "\": cannot read: No such file or directory"},
        {{"--tls-cert", p.cert("node").string(), "--tls-key", p.key("other").string()},
         "rpclb-node: --tls-key: \"" + p.key("other").string() + "\" does not match the certificate"},
        {{"--tls-cert", p.cert("node").string()}, "rpclb-node: --tls-key: is required with tls.cert"},
        {{"--tls-ca", p.cert("ca").string()}, "rpclb-node: --tls-cert: is required when tls.key or tls.ca is set"},
        {{"--tls-cert", p.cert("node").string(), "--tls-key", p.key("node").string(), "--tls-min-version", "1.1"},
         "rpclb-node: --tls-min-version must be 1.2 or 1.3, got \"1.1\""},
        {{"--tls-cert", p.key("node").string(), "--tls-key", p.key("node").string()},
         "rpclb-node: --tls-cert: \"" + p.key("node").string() + "\" holds no PEM certificate"},
    };
    for (const auto& c : cases) {
        const auto [status, err] = node(c.args);
        BOOST_TEST(status == 2, err);
        BOOST_TEST(err.find(c.expected) == 0u, "expected \"" << c.expected << "\", got: " << err);
    }

    // The config file's "tls" section: errors name the field.
    const auto config = dir() / "bad.json";
    std::ofstream(config) << R"({"tls": {"cert": ")" << missing << R"(", "key": "k"}})";
    auto [status, err] = node({"--config", config.string()});
    BOOST_TEST(status == 2, err);
    BOOST_TEST(err.find("rpclb-node: config field \"tls.cert\": \"" + missing + "\": cannot read") == 0u, err);
    std::ofstream(config) << R"({"tls": {"min_version": "1.1"}})";
    std::tie(status, err) = node({"--config", config.string()});
    BOOST_TEST(status == 2, err);
    BOOST_TEST(err.find("config field \"tls.min_version\": must be \"1.2\" or \"1.3\"") != std::string::npos, err);

    // rpclb-call checks its flags the same way.
    std::tie(status, err) = run_to_exit(*this, "rpclb-call",
                                        {"--seed", "127.0.0.1:1", "--node", "a@127.0.0.1", "--tls-cert",
                                         p.cert("client").string(), "demo", "node"});
    BOOST_TEST(status == 2, err);
    BOOST_TEST(err.find("rpclb-call: --tls-key: is required with tls.cert") == 0u, err);

    // And the Cluster constructor, for programs that link the library.
    rpclb::ClusterOptions options = in_process_node_options("x@127.0.0.1");
    options.tls = {p.cert("node"), p.key("client"), {}, rpclb::TlsVersion::v1_3};
    try {
        rpclb::Cluster cluster(options);
        BOOST_FAIL("the constructor accepted a key of another certificate");
    } catch (const std::invalid_argument& e) {
        BOOST_TEST(std::string(e.what()).find("tls.key ") == 0u, e.what());
    }
}

BOOST_AUTO_TEST_SUITE_END()
