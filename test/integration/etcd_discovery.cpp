// Discovery through a real etcd (Debian's etcd-server) on 127.0.0.1: three rpclb-node
// processes given only --discovery find each other; a SIGKILLed node leaves every view and
// its key expires with its lease; a stopped node deletes its key at once; a node's key
// deleted or overwritten is put back; a node whose etcd is down keeps serving and registers
// once etcd is up. And against a fake etcd whose watch stream is malformed: the node backs
// off, warns once and revokes the leases of the sessions it gave up. Without an `etcd`
// binary on PATH the suite is skipped, and says so (ctest reports it as skipped:
// test/CMakeLists.txt).
#define BOOST_TEST_MODULE etcd_discovery
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"
#include "support/port.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

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

// A fake etcd gateway on 127.0.0.1 (an ephemeral port), one connection at a time: lease
// grant (a new lease ID each time), put, range, keepalive and revoke answered as etcd does,
// and every watch stream set up, then given an event whose key is not base64, then ended.
// It counts grants and revokes. Its thread is joined with it.
class MalformedWatchEtcd {
public:
    /// `garbage_grant`: a lease grant is answered with bytes that are not JSON, the first
    /// two a NUL and 0xff.
    explicit MalformedWatchEtcd(bool garbage_grant = false)
        : acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}), garbage_grant_(garbage_grant) {
        port_ = acceptor_.local_endpoint().port();
        thread_ = std::thread([this] { serve(); });
    }
    ~MalformedWatchEtcd() {
        stop_ = true;
        boost::asio::io_context ioc;
        boost::asio::ip::tcp::socket wake(ioc);  // unblocks the accept
        boost::system::error_code ec;
        wake.connect({boost::asio::ip::make_address("127.0.0.1"), port_}, ec);
        thread_.join();
    }
    MalformedWatchEtcd(const MalformedWatchEtcd&) = delete;
    MalformedWatchEtcd& operator=(const MalformedWatchEtcd&) = delete;

    std::string url() const { return "etcd://127.0.0.1:" + std::to_string(port_) + "/" + prefix; }
    int grants() const { return grants_; }
    int revokes() const { return revokes_; }

private:
    void serve() {
        namespace http = boost::beast::http;
        while (!stop_) {
            boost::asio::ip::tcp::socket s(ioc_);
            boost::system::error_code ec;
            acceptor_.accept(s, ec);
            if (ec || stop_) break;
            boost::beast::flat_buffer buffer;
            http::request<http::string_body> request;
            http::read(s, buffer, request, ec);
            if (ec) continue;
            const auto target = std::string(request.target());
            std::string body = R"({"header":{"revision":"5"}})";
            if (target == "/v3/lease/grant" && garbage_grant_)
                ++grants_, body = std::string("\0\xffnot json", 10);
            else if (target == "/v3/lease/grant")
                body = R"({"header":{"revision":"5"},"ID":")" + std::to_string(1000 + ++grants_) + R"(","TTL":"9"})";
            else if (target == "/v3/lease/revoke")
                ++revokes_;
            else if (target == "/v3/lease/keepalive")
                body = R"({"result":{"header":{"revision":"5"},"TTL":"9"}})";
            std::string answer;
            if (target == "/v3/watch") {
                auto chunk = [](const std::string& text) {
                    std::ostringstream o;
                    o << std::hex << text.size() << "\r\n" << text << "\r\n";
                    return o.str();
                };
                answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                         chunk(R"({"result":{"header":{"revision":"5"},"created":true}})" "\n") +
                         chunk(R"({"result":{"events":[{"type":"PUT","kv":{"key":"@@@","value":"!!"}}]}})" "\n") +
                         "0\r\n\r\n";
            } else {
                answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body;
            }
            boost::asio::write(s, boost::asio::buffer(answer), ec);
        }
    }

    boost::asio::io_context ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    unsigned short port_ = 0;
    const bool garbage_grant_;
    std::atomic<bool> stop_{false};
    std::atomic<int> grants_{0};
    std::atomic<int> revokes_{0};
    std::thread thread_;
};

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

// rpclb-call given only the URL meets the nodes listed there and calls through them.
BOOST_FIXTURE_TEST_CASE(rpclb_call_finds_the_cluster_through_etcd, EtcdCluster) {
    auto a = start("a", {});
    auto b = start("b", {});
    BOOST_TEST_REQUIRE(full_mesh({a.get(), b.get()}, 15s));
    Process call(bin_dir() / "rpclb-call",
                 {"--discovery", etcd.url(), "--balancer", "w", "--count", "4", "demo", "node"},
                 {{"RPCLB_COOKIE", test_cookie}}, dir() / "call.log");
    const auto status = call.wait_exit(20s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-call still runs");
    BOOST_TEST(describe_status(*status) == "exited 0", call.stderr_text());
    const auto summary = call.wait_for_line("{", Process::Clock::now() + 2s);
    BOOST_TEST_REQUIRE(summary.has_value(), "rpclb-call printed no summary");
    BOOST_TEST(summary->find("\"ok\":4") != std::string::npos, *summary);
    BOOST_TEST(etcd.listing().size() == 2u);  // it registered nothing
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

BOOST_FIXTURE_TEST_CASE(a_key_overwritten_under_a_live_lease_is_put_back_within_a_second, EtcdCluster) {
    auto a = start("a", {});
    // Registered, and watching (it logs that once the watch is set up).
    BOOST_TEST_REQUIRE(eventually([&] { return a->log_contains("registered " + key_of(*a)); }, 15s));
    const std::string overwritten = key_of(*a) + " was overwritten in etcd";
    // Another value, without a's lease.
    const auto put_at = steady_clock::now();
    etcd.put(key_of(*a), "127.0.0.1:1");
    BOOST_TEST_REQUIRE(eventually([&] { return a->log_contains(overwritten); }, 5s, 20ms), "the key was not put back");
    BOOST_TEST(eventually([&] { return etcd.listing()[key_of(*a)] == a->address(); }, 5s, 20ms));
    const auto back_ms = duration_cast<milliseconds>(steady_clock::now() - put_at).count();
    BOOST_TEST_MESSAGE("the key back after " << back_ms << " ms");
    BOOST_TEST(back_ms < 1000);
    // a's own value without its lease (the key would outlive a): put back under the lease.
    etcd.put(key_of(*a), a->address());
    BOOST_TEST(eventually([&] { return a->log_count(overwritten) == 2u; }, 5s, 20ms));
    // a's own put back is not taken for an overwrite.
    BOOST_TEST(consistently([&] { return a->log_count(overwritten) == 2u; }, 500ms, 50ms));
    BOOST_TEST(etcd.listing().at(key_of(*a)) == a->address());
}

BOOST_AUTO_TEST_CASE(a_malformed_watch_stream_is_an_outage_that_backs_off_and_warns_once) {
    Harness h;
    MalformedWatchEtcd etcd;
    auto a = h.start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = {"--discovery", etcd.url()}});
    // Each session grants, puts, lists and watches, and the watch fails: retries after 250,
    // 500 and 1000 ms give the 4th grant about 1.75 s after the 1st, and the 5th 2 s later.
    BOOST_TEST_REQUIRE(eventually([&] { return etcd.grants() >= 4; }, 10s, 10ms));
    BOOST_TEST(consistently([&] { return etcd.grants() == 4; }, 1500ms, 50ms), "no back-off between the sessions");
    // Each session's lease is revoked once the next one's key is put.
    BOOST_TEST(eventually([&] { return etcd.revokes() >= 3; }, 2s, 10ms));
    const std::string warning = "the node keeps serving and dialling the nodes it knows";
    BOOST_TEST(a->log_contains("field \"key\" is not base64"));
    BOOST_TEST(a->log_count(warning) == 1u);
    BOOST_TEST(!a->log_contains("answers again"));
}

// An answer that is not JSON is quoted in the warning with its control bytes and bytes
// past ASCII as \xNN, so the quote is never empty or cut.
BOOST_AUTO_TEST_CASE(an_answer_that_is_not_json_is_quoted_with_its_bytes_escaped) {
    Harness h;
    MalformedWatchEtcd etcd(true);
    auto a = h.start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = {"--discovery", etcd.url()}});
    BOOST_TEST(eventually([&] { return a->log_contains("the node keeps serving and dialling the nodes it knows"); }, 10s),
               a->log());
    BOOST_TEST(a->log_contains("with an answer that is not JSON: \\x00\\xffnot json"), a->log());
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

    // etcd killed under the watch: the warning says etcd closed the stream, and a serves on.
    BOOST_TEST(WIFSIGNALED(etcd.process().kill()));
    BOOST_TEST(eventually([&] { return a->log_count(warning) == 2u; }, 10s), a->log());
    BOOST_TEST(a->log_contains("etcd closed the watch stream"), a->log());
    BOOST_TEST(!a->log_contains("partial message"), a->log());
    r = client->call(a->name(), "demo", "node", {}, {});
    BOOST_TEST(r.has_value());
}

BOOST_AUTO_TEST_SUITE_END()
