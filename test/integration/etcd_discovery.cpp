// Discovery through a real etcd (Debian's etcd-server) on 127.0.0.1: three rpclb-node
// processes given only --discovery find each other; a SIGKILLed node leaves every view and
// its key expires with its lease; a stopped node deletes its key at once; a node whose etcd
// is down keeps serving and registers once etcd is up. Without an `etcd` binary on PATH the
// suite is skipped, and says so (ctest reports it as skipped: test/CMakeLists.txt).
#define BOOST_TEST_MODULE etcd_discovery
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"
#include "support/port.hpp"

#include <boost/beast/core/detail/base64.hpp>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

using namespace rpclb::test;
using namespace std::chrono;
namespace fs = std::filesystem;

namespace {

const std::string prefix = "rpclb-test";

// The `etcd` executable on PATH, or nullopt.
std::optional<fs::path> etcd_binary() {
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "";
    while (!dirs.empty()) {
        const auto colon = dirs.find(':');
        const fs::path candidate = fs::path(dirs.substr(0, colon)) / "etcd";
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    }
    return std::nullopt;
}

boost::test_tools::assertion_result etcd_or_skip(boost::unit_test::test_unit_id) {
    if (etcd_binary()) return true;
    const std::string why = "no etcd executable on PATH (Debian package etcd-server; scripts/setup.sh installs it)";
    std::cerr << "etcd_discovery: SKIPPED: " << why << '\n';
    boost::test_tools::assertion_result skip(false);
    skip.message() << why;
    return skip;
}

std::string b64(std::string_view bytes) {
    namespace b = boost::beast::detail::base64;
    std::string out(b::encoded_size(bytes.size()), '\0');
    out.resize(b::encode(out.data(), bytes.data(), bytes.size()));
    return out;
}

std::string unb64(std::string_view text) {
    namespace b = boost::beast::detail::base64;
    std::string out(b::decoded_size(text.size()), '\0');
    out.resize(b::decode(out.data(), text.data(), text.size()).first);
    return out;
}

// POSTs `body` to `target` at "HOST:PORT" and returns the JSON answer. Throws on network
// errors and non-JSON answers.
boost::json::value post(const std::string& address, const std::string& target, const std::string& body) {
    return boost::json::parse(http_post(address, target, body).body);
}

// One etcd member on 127.0.0.1, its client and peer ports held by PortReservation until it
// binds them (etcd sets SO_REUSEADDR), its data in `dir`. SIGKILLed and reaped with the
// object (Process).
class Etcd {
public:
    Etcd(const fs::path& dir, std::uint16_t client_port, const std::string& log_name = "etcd.log") {
        const auto client = "http://127.0.0.1:" + std::to_string(client_port);
        const auto peer = "http://127.0.0.1:" + std::to_string(peer_.port());
        address_ = "127.0.0.1:" + std::to_string(client_port);
        process_ = std::make_unique<Process>(
            *etcd_binary(),
            std::vector<std::string>{"--name", "rpclb-test", "--data-dir", (dir / "etcd-data").string(),
                                     "--listen-client-urls", client, "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", "rpclb-test=" + peer, "--logger", "zap",
                                     "--log-outputs", "stderr"},
            std::vector<std::pair<std::string, std::string>>{}, dir / log_name);
        const bool up = eventually(
            [&] {
                try {
                    return http_get(address_, "/health").body.find("\"health\":\"true\"") != std::string::npos;
                } catch (const std::exception&) {
                    return false;
                }
            },
            20s, 50ms);
        if (!up) throw std::runtime_error("etcd did not become healthy within 20 s:\n" + process_->stderr_text());
    }

    const std::string& address() const noexcept { return address_; }
    std::string url() const { return "etcd://" + address_ + "/" + prefix; }
    Process& process() noexcept { return *process_; }

    // Every key under PREFIX/ and its value.
    std::map<std::string, std::string> listing() const {
        const auto answer = post(address_, "/v3/kv/range",
                                 boost::json::serialize(boost::json::object{
                                     {"key", b64(prefix + "/")}, {"range_end", b64(prefix + "0")}}));
        std::map<std::string, std::string> found;
        if (const auto* kvs = answer.as_object().if_contains("kvs"))
            for (const auto& kv : kvs->as_array())
                found[unb64(kv.at("key").as_string())] =
                    kv.as_object().contains("value") ? unb64(kv.at("value").as_string()) : std::string();
        return found;
    }

    void remove(const std::string& key) const {
        post(address_, "/v3/kv/deleterange", boost::json::serialize(boost::json::object{{"key", b64(key)}}));
    }

    void put(const std::string& key, const std::string& value) const {
        post(address_, "/v3/kv/put", boost::json::serialize(boost::json::object{{"key", b64(key)}, {"value", b64(value)}}));
    }

private:
    PortReservation peer_;
    std::string address_;
    std::unique_ptr<Process> process_;
};

// The names node `node` is connected to (its admin `nodes`), itself left out.
std::set<std::string> view_of(Node& node) {
    AdminSocket ws(admin_address(node));
    const auto answer = ws.ask(R"({"id":1,"cmd":"nodes","token":")" + admin_token + R"("})");
    std::set<std::string> names;
    for (const auto& n : answer.at("result").at("nodes").as_array())
        if (!n.at("self").as_bool()) names.insert(std::string(n.at("name").as_string()));
    return names;
}

// A harness with one etcd and rpclb-nodes that only have --discovery.
struct EtcdCluster : Harness {
    EtcdCluster() : etcd(dir(), client_port.port()) {}

    std::unique_ptr<Node> start(const std::string& name, std::vector<std::string> extra = {"--idle-timeout", "1000"}) {
        std::vector<std::string> args{"--discovery", etcd.url()};
        for (auto& a : admin_args()) args.push_back(a);
        args.insert(args.end(), extra.begin(), extra.end());
        return start_node({.name = name, .balancers = {"w=round_robin"}, .extra_args = args});
    }

    // Waits until each of `nodes` is connected to exactly the others.
    bool full_mesh(const std::vector<Node*>& nodes, milliseconds timeout) {
        return eventually(
            [&] {
                for (auto* x : nodes) {
                    std::set<std::string> others;
                    for (auto* y : nodes)
                        if (y != x) others.insert(y->name());
                    if (view_of(*x) != others) return false;
                }
                return true;
            },
            timeout, 50ms);
    }

    PortReservation client_port;
    Etcd etcd;
};

std::string key_of(const Node& node) { return prefix + "/" + node.name(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(etcd_discovery, *boost::unit_test::precondition(etcd_or_skip))

BOOST_FIXTURE_TEST_CASE(three_nodes_meet_through_etcd_and_a_killed_one_leaves_and_expires, EtcdCluster) {
    // Entries a node must ignore, with a warning: a key that is not PREFIX/NAME, and a
    // value that cannot be dialled.
    etcd.put(prefix + "/not-a-node-name", "127.0.0.1:1");
    etcd.put(prefix + "/ghost@127.0.0.1", "no port");

    auto a = start("a");
    auto b = start("b");
    auto c = start("c");
    BOOST_TEST_REQUIRE(full_mesh({a.get(), b.get(), c.get()}, 15s), "the three nodes did not meet through etcd");

    // Each registered PREFIX/NAME = its listen address.
    const auto listed = etcd.listing();
    for (auto* node : {a.get(), b.get(), c.get()}) {
        const auto it = listed.find(key_of(*node));
        BOOST_TEST_REQUIRE((it != listed.end()), key_of(*node) << " is not in etcd");
        BOOST_TEST(it->second == node->address());
    }
    for (auto* node : {a.get(), b.get(), c.get()}) {
        BOOST_TEST(node->log_contains("\"rpclb-test/not-a-node-name\" is not rpclb-test/NAME"), node->name());
        BOOST_TEST(node->log_contains("its value \"no port\" is not HOST:PORT; that entry is ignored"), node->name());
    }

    const auto killed_at = steady_clock::now();
    BOOST_TEST(WIFSIGNALED(c->process().kill()));
    // The mesh drops it at once (its sockets closed); its key goes when its lease of
    // 3 s (3 × the 1 s idle timeout) expires, unrenewed.
    BOOST_TEST(eventually([&] { return view_of(*a) == std::set<std::string>{b->name()} &&
                                       view_of(*b) == std::set<std::string>{a->name()}; },
                          5s, 50ms),
               "a and b still list the killed node");
    BOOST_TEST(eventually([&] { return !etcd.listing().contains(key_of(*c)); }, 10s, 100ms),
               key_of(*c) << " is still in etcd");
    BOOST_TEST_MESSAGE("the killed node's key went after "
                       << duration_cast<milliseconds>(steady_clock::now() - killed_at).count() << " ms");
    const auto left = etcd.listing();
    BOOST_TEST(left.contains(key_of(*a)));
    BOOST_TEST(left.contains(key_of(*b)));
    // Nor does anyone dial it again.
    BOOST_TEST(consistently([&] { return view_of(*a).size() == 1u && view_of(*b).size() == 1u; }, 500ms, 50ms));
}

BOOST_FIXTURE_TEST_CASE(stopped_node_revokes_its_lease_and_a_client_node_follows_the_prefix, EtcdCluster) {
    // The default idle timeout: a lease of 9 s, so a key gone within 3 s was revoked.
    auto a = start("a", {});
    auto b = start("b", {});
    BOOST_TEST_REQUIRE(full_mesh({a.get(), b.get()}, 15s));

    // A client node (no listener) given only the URL meets both and registers nothing.
    rpclb::ClusterOptions o;
    o.discovery = etcd.url();
    auto client = start_client({}, o);
    BOOST_TEST(wait_for_connected(*client, {a->name(), b->name()}, 10s));
    BOOST_TEST(etcd.listing().size() == 2u);

    const auto stopped_at = steady_clock::now();
    BOOST_TEST_REQUIRE(b->process().signal(SIGTERM));
    const auto status = b->process().wait_exit(20s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 0);
    BOOST_TEST(!etcd.listing().contains(key_of(*b)));
    BOOST_TEST(duration_cast<milliseconds>(steady_clock::now() - stopped_at).count() < 3000);
    BOOST_TEST(b->log_contains("revoked lease"));
    BOOST_TEST(wait_for_connected(*client, {a->name()}, 5s));
}

BOOST_FIXTURE_TEST_CASE(a_key_deleted_under_a_live_lease_is_put_back_within_a_second, EtcdCluster) {
    auto a = start("a", {});
    auto b = start("b", {});
    BOOST_TEST_REQUIRE(full_mesh({a.get(), b.get()}, 15s));
    BOOST_TEST_REQUIRE(etcd.listing().size() == 2u);
    // Both keys deleted while the nodes run and renew their leases (9 s TTL).
    const auto deleted_at = steady_clock::now();
    etcd.remove(key_of(*a));
    etcd.remove(key_of(*b));
    BOOST_TEST_REQUIRE(eventually([&] { return etcd.listing().size() == 2u; }, 5s, 20ms), "the keys did not come back");
    const auto back_ms = duration_cast<milliseconds>(steady_clock::now() - deleted_at).count();
    BOOST_TEST_MESSAGE("both keys back after " << back_ms << " ms");
    BOOST_TEST(back_ms < 1000);
    const auto listed = etcd.listing();
    BOOST_TEST(listed.at(key_of(*a)) == a->address());
    BOOST_TEST(listed.at(key_of(*b)) == b->address());
    BOOST_TEST(eventually([&] { return a->log_contains("was deleted from etcd while its lease"); }, 5s));
    // A client node that finds the cluster only through etcd meets both.
    rpclb::ClusterOptions o;
    o.discovery = etcd.url();
    auto client = start_client({}, o);
    BOOST_TEST(wait_for_connected(*client, {a->name(), b->name()}, 10s));
}

BOOST_AUTO_TEST_CASE(node_keeps_serving_while_etcd_is_down_and_registers_once_it_is_up) {
    Harness h;
    PortReservation port;  // nothing listens on it until etcd starts
    const auto url = "etcd://127.0.0.1:" + std::to_string(port.port()) + "/" + prefix;
    auto a = h.start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = {"--discovery", url}});
    auto client = h.start_client({a->address()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "w", {a->name()}, 5s), "a does not serve without etcd");
    const std::string warning = "the node keeps serving and dialling the nodes it knows";
    BOOST_TEST(eventually([&] { return a->log_contains(warning); }, 5s));

    Etcd etcd(h.dir(), port.port());
    BOOST_TEST(eventually([&] { return etcd.listing().contains(prefix + "/" + a->name()); }, 10s, 100ms),
               "a did not register once etcd was up");
    // The key can be in etcd before the node has read etcd's answer and logged it.
    BOOST_TEST(eventually([&] { return a->log_contains("answers again"); }, 5s));
    // One warning for the outage, however many retries it took.
    BOOST_TEST(a->log_count(warning) == 1u);
    auto r = client->call(a->name(), "demo", "node", {}, {});
    BOOST_TEST(r.has_value());
}

BOOST_AUTO_TEST_SUITE_END()
