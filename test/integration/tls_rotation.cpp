// Live rotation of TLS credentials (Cluster::reload_tls, SIGHUP, the admin command
// reload_tls): a CA rotation on a mutual-TLS mesh of rpclb-node processes under a steady
// client loses no call and drops no link, and each step takes effect for new connections;
// a file that fails to load leaves the old credentials in place and the node serving;
// SIGHUP no longer ends rpclb-node.
//
// Each node reads its credentials from files of its own ("live" files) that the test
// rewrites, as an operator would, between reloads. The certificates are made by this test
// with the `openssl` command.
#define BOOST_TEST_MODULE tls_rotation
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"
#include "support/load.hpp"
#include "support/node.hpp"
#include "support/pki.hpp"
#include "support/serving.hpp"

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>

#include <sys/stat.h>

using namespace rpclb::test;
using namespace std::chrono;
using rpclb::CallOptions;

namespace {

namespace fs = std::filesystem;

/// The old CA and the new one, each with a certificate for 127.0.0.1.
const Pki& pki() {
    static const Pki p;
    static const bool made = [] {
        const std::string local = "subjectAltName=IP:127.0.0.1,DNS:localhost";
        p.make_ca("old-ca");
        p.make_ca("new-ca");
        p.make_cert("old", "old-ca", local);
        p.make_cert("new", "new-ca", local);
        p.make_cert("expired", "new-ca", local, "-1");
        p.make_cert_between("future", "new-ca", local, "491231000000Z", "500101000000Z");
        return true;
    }();
    (void)made;
    return p;
}

/// The live credential files of one node, in `dir`.
struct LiveFiles {
    fs::path dir;
    fs::path cert() const { return dir / "cert.pem"; }
    fs::path key() const { return dir / "key.pem"; }
    fs::path ca() const { return dir / "ca.pem"; }
    rpclb::TlsOptions options() const { return {cert(), key(), ca(), rpclb::TlsVersion::v1_3}; }
    std::vector<std::string> flags() const {
        return {"--tls-cert", cert().string(), "--tls-key", key().string(), "--tls-ca", ca().string()};
    }
};

// Replaces `to` with `text` in one step (a new file renamed over it), as a deployment
// tool would, so that a reload never reads a half-written file.
void replace_file(const fs::path& to, const std::string& text) {
    const auto tmp = to.string() + ".new";
    std::ofstream(tmp, std::ios::binary | std::ios::trunc) << text;
    if (fs::is_directory(to)) fs::remove_all(to);  // a case that made it one
    fs::rename(tmp, to);
}

/// Makes `live` hold certificate `cert` with its key (`key`: another certificate's key,
/// for a mismatched pair) and a CA bundle of `cas`.
void install(const LiveFiles& live, const std::string& cert, const std::vector<std::string>& cas,
             const std::string& key = "") {
    fs::create_directories(live.dir);
    replace_file(live.cert(), detail::read_file(pki().cert(cert)));
    replace_file(live.key(), detail::read_file(pki().key(key.empty() ? cert : key)));
    std::string bundle;
    for (const auto& ca : cas) bundle += detail::read_file(pki().cert(ca));
    replace_file(live.ca(), bundle);
}

/// A client node (in process) with certificate `cert` trusting `cas`, from files of its own.
std::unique_ptr<rpclb::Cluster> tls_client(Harness& h, const std::string& name, std::vector<std::string> seeds,
                                           const std::string& cert, const std::vector<std::string>& cas) {
    const LiveFiles live{h.dir() / name};
    install(live, cert, cas);
    rpclb::ClusterOptions options;
    options.name = name + "@127.0.0.1";
    options.tls = live.options();
    options.reconnect_interval = 100ms;
    return h.start_client(std::move(seeds), options);
}

/// True once `cluster` holds a link to `node`, within 10 s.
bool links_to(rpclb::Cluster& cluster, const std::string& node) {
    return eventually([&] {
        const auto nodes = cluster.connected_nodes();
        return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
    }, 10s);
}

/// The entry for `node` in an rpclb-admin --json reload-tls answer; null when absent.
boost::json::value entry_for(const boost::json::value& answers, const std::string& node) {
    for (const auto& e : answers.as_array())
        if (e.at("node").as_string() == node) return e;
    return nullptr;
}

/// `answer`'s health counter `key` (an rpclb-admin --json stats answer).
std::uint64_t health(const boost::json::value& answer, const char* key) {
    return answer.at("health").at(key).to_number<std::uint64_t>();
}

// Three rpclb-node processes a, b, c hosting w over mutual TLS, each with an admin
// listener and its own live files (the old certificate, trusting the old CA), and an
// in-process client routing through w with live files too.
struct TlsMesh : Harness {
    TlsMesh() {
        for (const auto* name : {"a", "b", "c", "client"}) install(live(name), "old", {"old-ca"});
        a = start_node(tls_node("a", {}));
        b = start_node(tls_node("b", {a->address()}));
        c = start_node(tls_node("c", {a->address()}));
        rpclb::ClusterOptions options;
        options.name = "client@127.0.0.1";
        options.tls = live("client").options();
        options.reconnect_interval = 100ms;
        client = start_client({a->address()}, options);
        if (!wait_for_members(*client, "w", {a->name(), b->name(), c->name()}, 10s))
            throw std::runtime_error("w did not get its three members over TLS");
    }

    LiveFiles live(const std::string& name) const { return {dir() / ("live-" + name)}; }
    NodeSpec tls_node(const std::string& name, std::vector<std::string> seeds) const {
        auto args = live(name).flags();
        const auto admin = admin_args();
        args.insert(args.end(), admin.begin(), admin.end());
        return {.name = name, .seeds = std::move(seeds), .balancers = {"w=round_robin"}, .extra_args = args};
    }
    std::vector<Node*> nodes() { return {a.get(), b.get(), c.get()}; }
    std::vector<std::string> names() { return {a->name(), b->name(), c->name()}; }
    std::vector<std::string> addresses() { return {a->address(), b->address(), c->address()}; }
    // rpclb-admin against a's admin listener.
    ToolRun admin(std::vector<std::string> args) {
        args.insert(args.begin(), {"--admin", admin_address(*a), "--token", admin_token});
        return run_admin(dir(), args);
    }

    std::unique_ptr<Node> a, b, c;
    std::unique_ptr<rpclb::Cluster> client;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(tls_rotation)

// The three steps of a CA rotation (secure-a-cluster.md), each on every node while a
// client calls through w without pause: trust both CAs; present certificates of the new
// CA; trust the new CA only. After each step a newcomer whose credentials only that step
// makes acceptable joins, so each step is shown to reach new connections.
BOOST_FIXTURE_TEST_CASE(ca_rotation_under_load_loses_no_call_and_drops_no_link, TlsMesh) {
    CallLoad load(*client, "w", 3, [](rpclb::Cluster& cl, int, const CallOptions& o) {
        return cl.call("demo", "node", {}, o);
    });
    const auto calls_grow = [&] {
        const auto before = load.total();
        return eventually([&] { return load.total() >= before + 200; }, 20s);
    };
    BOOST_TEST_REQUIRE(calls_grow());
    std::vector<std::unique_ptr<rpclb::Cluster>> newcomers;  // kept connected to the end

    // 1. Every node trusts the old CA and the new one (rpclb-admin, through a).
    for (const auto* name : {"a", "b", "c", "client"}) install(live(name), "old", {"old-ca", "new-ca"});
    auto run = admin({"--json", "reload-tls"});
    BOOST_TEST_REQUIRE(run.status == 0, slurp(run));
    for (auto* n : nodes()) BOOST_TEST(entry_for(run.json(), n->name()).at("reloaded").as_bool(), slurp(run));
    BOOST_TEST(entry_for(run.json(), client->name()).at("not_asked").as_string() == "no admin listener", slurp(run));
    const auto reloaded = client->reload_tls();
    BOOST_TEST_REQUIRE(reloaded.has_value(), reloaded.error().message);
    // A newcomer with a certificate of the new CA is let in by every node.
    newcomers.push_back(tls_client(*this, "new-cert", addresses(), "new", {"old-ca", "new-ca"}));
    BOOST_TEST(wait_for_connected(*newcomers.back(), sorted(names()), 10s),
               "connected: " << newcomers.back()->connected_nodes().size());
    BOOST_TEST_REQUIRE(calls_grow());

    // 2. Every node presents a certificate of the new CA (SIGHUP).
    for (const auto* name : {"a", "b", "c", "client"}) install(live(name), "new", {"old-ca", "new-ca"});
    for (auto* n : nodes()) BOOST_TEST_REQUIRE(n->process().signal(SIGHUP));
    for (auto* n : nodes())
        BOOST_TEST(eventually([&] { return n->log_count("TLS credentials reloaded") == 2u; }, 5s), n->log());
    BOOST_TEST_REQUIRE(client->reload_tls().has_value());
    // A newcomer that trusts the new CA only accepts every node's certificate.
    newcomers.push_back(tls_client(*this, "new-only", addresses(), "new", {"new-ca"}));
    BOOST_TEST(wait_for_connected(*newcomers.back(), sorted(names()), 10s),
               "connected: " << newcomers.back()->connected_nodes().size());
    BOOST_TEST_REQUIRE(calls_grow());

    // 3. Every node trusts the new CA only (rpclb-admin).
    for (const auto* name : {"a", "b", "c", "client"}) install(live(name), "new", {"new-ca"});
    run = admin({"reload-tls"});
    BOOST_TEST_REQUIRE(run.status == 0, slurp(run));
    BOOST_TEST_REQUIRE(client->reload_tls().has_value());
    // A newcomer with a certificate of the old CA is refused by every node now...
    auto stale = tls_client(*this, "stale", addresses(), "old", {"old-ca", "new-ca"});
    const auto refused = stale->wait_for_node(a->name(), 10s);
    BOOST_TEST_REQUIRE(!refused.has_value());
    BOOST_TEST(refused.error().is(rpclb::Failure::tls_refused), refused.error().message);
    BOOST_TEST(stale->connected_nodes().empty());
    for (auto* n : nodes())
        BOOST_TEST(eventually([&] { return n->log_contains("the peer's certificate was refused"); }, 5s), n->log());
    // ...and one of the new CA still gets in.
    newcomers.push_back(tls_client(*this, "new-again", addresses(), "new", {"new-ca"}));
    BOOST_TEST(wait_for_connected(*newcomers.back(), sorted(names()), 10s));
    BOOST_TEST_REQUIRE(calls_grow());

    // No call failed, each node served its share, and no link dropped: every node still
    // holds the links it started with (and the newcomers'), and lost none.
    load.finish();
    const auto errors = load.errors();
    BOOST_TEST(errors.empty(), errors.size() << " calls failed, first: " << (errors.empty() ? "" : errors.front()));
    for (auto* n : nodes()) BOOST_TEST(load.served_by(n->name()) > 50u, n->name());
    BOOST_TEST(client->connected_nodes() == sorted(names()));
    BOOST_TEST(client->stats().peers_lost == 0u);
    for (auto* n : nodes()) {
        const auto stats = admin({"--json", "stats", n->name()});
        BOOST_TEST_REQUIRE(stats.status == 0, slurp(stats));
        BOOST_TEST(health(stats.json(), "peers_lost") == 0u, n->name() << ": " << stats.out);
        BOOST_TEST(stats.json().at("connections").to_number<std::uint64_t>() == 2u + 1u + newcomers.size(),
                   n->name() << ": " << stats.out);
    }
}

// A reload whose files fail keeps the credentials the node had: the answer and the log say
// why, the node goes on serving, and new connections are still made with the old files'
// credentials. Once the files are right, the reload takes.
BOOST_FIXTURE_TEST_CASE(broken_file_keeps_the_old_credentials_and_the_node_keeps_serving, TlsMesh) {
    const auto live_a = live("a");
    struct Case {
        std::function<void()> damage;
        std::string expected;  // how the answer and a's log name the problem
    };
    const std::vector<Case> cases{
        // The new certificate with the old key: a pair that does not match.
        {[&] { install(live_a, "new", {"old-ca", "new-ca"}, "old"); },
         "tls.key \"" + live_a.key().string() + "\" does not match the certificate in tls.cert"},
        {[&] {
             install(live_a, "new", {"old-ca", "new-ca"});
             fs::remove(live_a.ca());
         },
         "tls.ca \"" + live_a.ca().string() + "\": cannot read: No such file or directory"},
        {[&] {
             install(live_a, "new", {"new-ca"});
             replace_file(live_a.cert(), "not a certificate\n");
         },
         "tls.cert \"" + live_a.cert().string() + "\" holds no PEM certificate"},
        {[&] {
             install(live_a, "new", {"old-ca", "new-ca"});
             fs::remove(live_a.ca());
             fs::create_directory(live_a.ca());
         },
         "tls.ca \"" + live_a.ca().string() + "\" is a directory, not a PEM file"},
        // A FIFO nobody writes to would hold a reader for ever: refused before it is opened.
        {[&] {
             install(live_a, "new", {"old-ca", "new-ca"});
             fs::remove(live_a.cert());
             BOOST_TEST_REQUIRE(::mkfifo(live_a.cert().c_str(), 0600) == 0);
         },
         "tls.cert \"" + live_a.cert().string() + "\" is not a regular file"},
        // Certificates peers refuse: expired, not valid yet, not from a CA of the bundle.
        {[&] { install(live_a, "expired", {"old-ca", "new-ca"}); },
         "tls.cert \"" + live_a.cert().string() + "\": the certificate expired on "},
        {[&] { install(live_a, "future", {"old-ca", "new-ca"}); },
         "tls.cert \"" + live_a.cert().string() + "\": the certificate is not valid before 2049-12-31 00:00:00 UTC"},
        {[&] { install(live_a, "new", {"old-ca"}); },
         "tls.cert \"" + live_a.cert().string() + "\": the certificate does not verify against tls.ca \"" +
             live_a.ca().string() + "\" (unable to get local issuer certificate)"},
    };
    int failures = 0;
    for (const auto& c : cases) {
        c.damage();
        const auto run = admin({"reload-tls", a->name()});
        BOOST_TEST(run.status == 1, slurp(run));
        BOOST_TEST(run.out.find(c.expected) != std::string::npos, slurp(run));
        BOOST_TEST(run.out.find("keeps the TLS credentials it had") != std::string::npos, slurp(run));
        // SIGHUP with the same files: logged, and the node lives on.
        BOOST_TEST_REQUIRE(a->process().signal(SIGHUP));
        failures += 2;
        BOOST_TEST(eventually([&] { return a->log_count("TLS reload failed: ") == std::size_t(failures); }, 5s),
                   a->log());
        BOOST_TEST(a->log_contains("TLS reload failed: " + c.expected), a->log());
        check_keeps_serving(*client, "w", sorted(names()), 1000ms);
        // A newcomer that knows only the old CA is let in: a still presents its old
        // certificate and trusts the old CA.
        auto old_only = tls_client(*this, "old-only-" + std::to_string(failures), {a->address()}, "old", {"old-ca"});
        BOOST_TEST(links_to(*old_only, a->name()), "the newcomer did not get in");
    }
    BOOST_TEST(a->process().running());

    // An in-process node reports the same through Cluster::reload_tls.
    replace_file(live("client").key(), "not a key\n");
    const auto refused = client->reload_tls();
    BOOST_TEST_REQUIRE(!refused.has_value());
    BOOST_TEST(refused.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(refused.error().details.at("field").as_string() == "tls.key");
    BOOST_TEST(refused.error().details.at("node").as_string() == client->name());
    BOOST_TEST(refused.error().message.find("holds no unencrypted PEM private key") != std::string::npos,
               refused.error().message);

    // Right files: the reload takes, and a newcomer that knows only the new CA gets in.
    install(live_a, "new", {"old-ca", "new-ca"});
    const auto run = admin({"--json", "reload-tls", a->name()});
    BOOST_TEST_REQUIRE(run.status == 0, slurp(run));
    BOOST_TEST(run.json().at(0).at("reloaded").as_bool(), run.out);
    auto new_only = tls_client(*this, "new-only", {a->address()}, "new", {"new-ca"});
    BOOST_TEST(links_to(*new_only, a->name()), "a does not present its new certificate");
    check_keeps_serving(*client, "w", sorted(names()), 1000ms);
}

// A node whose admin listener does not answer (frozen) did not reload: its row says so in
// words and rpclb-admin exits 1; only a node without an admin listener is "not asked".
BOOST_FIXTURE_TEST_CASE(a_frozen_node_fails_the_reload_rather_than_being_not_asked, TlsMesh) {
    BOOST_TEST_REQUIRE(c->process().freeze());
    const auto run = admin({"--json", "reload-tls"});
    BOOST_TEST_REQUIRE(c->process().signal(SIGCONT));
    BOOST_TEST(run.status == 1, slurp(run));
    const auto frozen = entry_for(run.json(), c->name());
    BOOST_TEST_REQUIRE(frozen.is_object(), slurp(run));
    BOOST_TEST(!frozen.as_object().contains("not_asked"), slurp(run));
    BOOST_TEST(std::string(frozen.at("error").as_string()).find("no answer from " + c->name() + "'s admin listener") ==
                   0u,
               slurp(run));
    for (auto* n : {a.get(), b.get()}) BOOST_TEST(entry_for(run.json(), n->name()).at("reloaded").as_bool(), slurp(run));
    BOOST_TEST(entry_for(run.json(), client->name()).at("not_asked").as_string() == "no admin listener", slurp(run));
    BOOST_TEST(run.err.find("1 of 4 nodes did not reload") != std::string::npos, slurp(run));
}

// At start-up a certificate peers would refuse is only a warning: the node starts.
BOOST_FIXTURE_TEST_CASE(an_expired_certificate_at_start_up_is_a_warning, Harness) {
    const LiveFiles live{dir() / "live-expired"};
    install(live, "expired", {"new-ca"});
    auto a = start_node({.name = "a", .extra_args = live.flags()});
    BOOST_TEST(a->log_contains("warning [mesh] tls.cert \"" + live.cert().string() + "\": the certificate expired on "),
               a->log());
    BOOST_TEST(a->process().running());
}

// SIGHUP no longer ends rpclb-node: without TLS there is nothing to reload, which the log
// and the admin answer say, and the node goes on serving.
BOOST_FIXTURE_TEST_CASE(sighup_does_not_stop_rpclb_node, Harness) {
    auto a = start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = admin_args()});
    auto client = start_client({a->address()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", {a->name()}));
    for (int i = 1; i <= 3; ++i) {
        BOOST_TEST_REQUIRE(a->process().signal(SIGHUP));
        BOOST_TEST(eventually([&] { return a->log_count("TLS is off on this node") == std::size_t(i); }, 5s),
                   a->log());
    }
    BOOST_TEST(a->process().running());
    check_keeps_serving(*client, "w", {a->name()}, 1000ms);

    const auto run = run_admin(dir(), {"--admin", admin_address(*a), "--token", admin_token, "reload-tls"});
    BOOST_TEST(run.status == 1, slurp(run));
    BOOST_TEST(run.out.find("unsupported: TLS is off on " + a->name()) != std::string::npos, slurp(run));
    BOOST_TEST(run.err.find("1 node(s) have TLS off: nothing to reload") != std::string::npos, slurp(run));
    BOOST_TEST(run.err.find("keep the credentials they had") == std::string::npos, slurp(run));
    const auto off = client->reload_tls();
    BOOST_TEST_REQUIRE(!off.has_value());
    BOOST_TEST(off.error().code == rpclb::ErrorCode::bad_request);
    BOOST_TEST(off.error().message.find("TLS is off on " + client->name()) == 0u, off.error().message);

    // SIGTERM still stops it, with status 0.
    BOOST_TEST_REQUIRE(a->process().signal(SIGTERM));
    const auto status = a->process().wait_exit(15s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(describe_status(*status) == "exited 0", a->log());
}

// rpclb-node holds SIGHUP from the first line of main(), before it reads its files or
// makes a thread: SIGHUPs sent as soon as main() has begun (seen as SIGHUP in the
// process's blocked set) neither end it nor get lost; the node reloads once it serves.
BOOST_FIXTURE_TEST_CASE(sighup_at_once_after_start_does_not_stop_rpclb_node, Harness) {
    const LiveFiles live{dir() / "live-early"};
    install(live, "old", {"old-ca"});
    // SIGHUP (signal 1) is bit 0 of the SigBlk mask in /proc/PID/status.
    const auto holds_sighup = [](pid_t pid) {
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("SigBlk:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) & 1u) != 0;
        return false;
    };
    for (int i = 0; i < 3; ++i) {
        auto args = live.flags();
        const std::string name = "early" + std::to_string(i) + "@127.0.0.1";
        args.insert(args.end(), {"--name", name, "--listen", "127.0.0.1:0", "--cookie", test_cookie});
        Process node(bin_dir() / "rpclb-node", args, {}, dir() / ("early" + std::to_string(i) + ".log"));
        BOOST_TEST_REQUIRE(eventually([&] { return holds_sighup(node.pid()); }, 5s, 1ms),
                           "rpclb-node does not block SIGHUP from the start of main()");
        for (int k = 0; k < 5; ++k) BOOST_TEST_REQUIRE(node.signal(SIGHUP));
        BOOST_TEST_REQUIRE(node.wait_for_line("listening on ", Process::Clock::now() + 10s).has_value(),
                           node.stderr_text());
        BOOST_TEST(eventually([&] { return node.stderr_text().find("TLS credentials reloaded") != std::string::npos; },
                              5s),
                   node.stderr_text());
        BOOST_TEST(node.running(), node.stderr_text());
        BOOST_TEST_REQUIRE(node.signal(SIGTERM));
        const auto status = node.wait_exit(Process::Clock::now() + 15s);
        BOOST_TEST_REQUIRE(status.has_value());
        BOOST_TEST(describe_status(*status) == "exited 0", node.stderr_text());
    }
}

BOOST_AUTO_TEST_SUITE_END()
