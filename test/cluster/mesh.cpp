// Mesh membership between in-process nodes on 127.0.0.1.
#define BOOST_TEST_MODULE mesh
#include <rpclb/cluster.hpp>
#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/log_capture.hpp"
#include "support/port.hpp"
#include "support/raw_peer.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <iostream>
#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <thread>

using namespace std::chrono_literals;
using tcp = boost::asio::ip::tcp;
using rpclb::test::consistently;
using rpclb::test::eventually;

namespace {

rpclb::ClusterOptions options(std::string name, std::string listen = "127.0.0.1:0") {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.listen = std::move(listen);
    o.cookie = "mesh-cookie";
    o.reconnect_interval = 100ms;
    return o;
}

std::string address(const rpclb::Cluster& c) {
    return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port());
}

// Nodes a, b and c named NAME@`host`, listening on `address`:0; b and c know only a's
// address, so they meet through gossip. All three must be connected to the other two.
void check_full_mesh_through_one_seed(const std::string& host, const std::string& address) {
    rpclb::Cluster a(options("a@" + host, address + ":0"));
    a.start();
    const auto seed = address + ":" + std::to_string(a.listen_endpoint()->port());
    auto ob = options("b@" + host, address + ":0");
    ob.seeds = {seed};
    auto oc = options("c@" + host, address + ":0");
    oc.seeds = {seed};
    rpclb::Cluster b(ob), c(oc);
    b.start();
    c.start();
    BOOST_TEST(eventually([&] {
        return a.connected_nodes().size() == 2 && b.connected_nodes().size() == 2 &&
               c.connected_nodes().size() == 2;
    }, 5s));
    BOOST_TEST(b.connected_nodes() == (std::vector<std::string>{"a@" + host, "c@" + host}));
    BOOST_TEST(c.connected_nodes() == (std::vector<std::string>{"a@" + host, "b@" + host}));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mesh)

BOOST_AUTO_TEST_CASE(nodes_joined_through_one_seed_form_a_full_mesh) {
    check_full_mesh_through_one_seed("127.0.0.1", "127.0.0.1");
}

// Whether a socket can bind [::1]: the test below is skipped, and says why, where not.
// The line on stdout is what ctest's SKIP_REGULAR_EXPRESSION for cluster.mesh_ipv6 looks
// for (test/CMakeLists.txt): Boost.Test itself reports a failed precondition only at a
// higher log level, and its exit status is 0 either way.
boost::test_tools::assertion_result has_ipv6_loopback(boost::unit_test::test_unit_id) {
    boost::asio::io_context probe;
    tcp::acceptor acceptor(probe);
    boost::system::error_code ec;
    acceptor.open(tcp::v6(), ec);
    if (!ec) acceptor.bind({boost::asio::ip::address_v6::loopback(), 0}, ec);
    boost::test_tools::assertion_result result(!ec);
    if (ec) {
        result.message() << "this machine has no IPv6 loopback (" << ec.message() << ")";
        std::cout << "skipped: no IPv6 loopback (" << ec.message() << ")" << std::endl;
    }
    return result;
}

// Over IPv6 loopback: c reaches b through the address b advertised ("[::1]:PORT"), which
// must read back as HOST:PORT.
BOOST_AUTO_TEST_CASE(nodes_on_ipv6_loopback_form_a_full_mesh_through_gossip,
                     *boost::unit_test::precondition(has_ipv6_loopback)) {
    check_full_mesh_through_one_seed("localhost", "[::1]");
}

// Each connection times its own keep-alive pings: both ends know the round trip soon after
// they connect; a node that is not connected has none.
BOOST_AUTO_TEST_CASE(connected_nodes_have_a_keepalive_round_trip) {
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ob = options("b@127.0.0.1");
    ob.seeds = {address(a)};
    rpclb::Cluster b(ob);
    b.start();
    BOOST_TEST_REQUIRE(eventually([&] { return a.keepalive_rtt("b@127.0.0.1") && b.keepalive_rtt("a@127.0.0.1"); }, 5s));
    BOOST_TEST(a.keepalive_rtt("b@127.0.0.1")->count() > 0);
    BOOST_TEST((*a.keepalive_rtt("b@127.0.0.1") < 1s));
    BOOST_TEST(!a.keepalive_rtt("nobody@127.0.0.1").has_value());
    BOOST_TEST(!a.keepalive_rtt("a@127.0.0.1").has_value());
}

BOOST_AUTO_TEST_CASE(nodes_dialing_each_other_at_once_keep_one_connection) {
    for (int round = 0; round < 3; ++round) {
        // Each node must know the other's address before either starts: both ports are
        // held (bound, not listening) until the nodes have bound them.
        const rpclb::test::PortReservation pa, pb;
        auto oa = options("a@127.0.0.1", pa.address());
        auto ob = options("b@127.0.0.1", pb.address());
        oa.seeds = {pb.address()};
        ob.seeds = {pa.address()};
        rpclb::Cluster a(oa), b(ob);
        std::thread ta([&] { a.start(); });
        b.start();
        ta.join();
        BOOST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1 && b.connected_nodes().size() == 1; }, 5s));
        // Had the two ends kept different connections, each would close the other's and the
        // pair would flap: a lost peer, then a redial. Watched for 500 ms.
        BOOST_TEST(consistently([&] {
            return a.stats().peers_lost == 0u && b.stats().peers_lost == 0u && a.connected_nodes().size() == 1u;
        }, 500ms));
        BOOST_TEST(a.stats().peers_lost == 0u);
        BOOST_TEST(b.stats().peers_lost == 0u);
        a.register_function("m", "f", [](const boost::json::array&) -> rpclb::CallResult { return 1; });
        BOOST_TEST(b.call("a@127.0.0.1", "m", "f").has_value());
    }
}

BOOST_AUTO_TEST_CASE(restarted_node_is_a_new_incarnation_without_old_memberships) {
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ob = options("b@127.0.0.1");
    ob.seeds = {address(a)};
    std::string first_incarnation;
    {
        rpclb::Cluster b(ob);
        first_incarnation = b.incarnation();
        b.start();
        b.groups().join("old");
        BOOST_REQUIRE(eventually([&] { return a.groups().members("old")->nodes.size() == 1; }, 5s));
        b.stop();
    }
    rpclb::Cluster b2(ob);
    BOOST_TEST(b2.incarnation() != first_incarnation);
    b2.start();
    b2.groups().join("new");
    BOOST_TEST(eventually([&] { return a.groups().members("new")->nodes.size() == 1; }, 5s));
    BOOST_TEST(a.groups().members("old")->nodes.empty());
}

BOOST_AUTO_TEST_CASE(a_newer_incarnation_of_a_connected_name_is_refused_and_told) {
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ox = options("x@127.0.0.1");
    ox.seeds = {address(a)};
    rpclb::Cluster first(ox);
    first.start();
    BOOST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1; }, 5s));
    rpclb::Cluster second(ox);  // newer: started later under the same name
    BOOST_REQUIRE(second.incarnation() > first.incarnation());
    second.start();
    BOOST_TEST(eventually([&] { return second.stats().name_conflicts > 0; }, 5s));
    // The first keeps the name: a still routes x to it.
    first.register_function("m", "who", [](const boost::json::array&) -> rpclb::CallResult { return 1; });
    second.register_function("m", "who", [](const boost::json::array&) -> rpclb::CallResult { return 2; });
    BOOST_TEST(a.call("x@127.0.0.1", "m", "who").value() == boost::json::value(1));
    BOOST_TEST(first.stats().name_conflicts == 0u);
}

BOOST_AUTO_TEST_CASE(an_older_incarnation_takes_its_name_back_from_a_newer_one) {
    // As after a partition in which each side had one process of the name: every node
    // gives the name to the older incarnation, whichever it met first.
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ox = options("x@127.0.0.1");
    ox.seeds = {address(a)};
    rpclb::Cluster older(ox);  // drawn first: the older incarnation
    rpclb::Cluster newer(ox);
    BOOST_REQUIRE(older.incarnation() < newer.incarnation());
    newer.start();
    newer.groups().join("g");
    BOOST_REQUIRE(eventually([&] { return a.groups().members("g")->nodes.size() == 1; }, 5s));
    older.start();
    BOOST_TEST(eventually([&] { return newer.stats().name_conflicts > 0; }, 5s));
    // The newer one's memberships went with it; the older one now answers for x.
    BOOST_TEST(eventually([&] { return a.groups().members("g")->nodes.empty(); }, 5s));
    older.register_function("m", "who", [](const boost::json::array&) -> rpclb::CallResult { return 1; });
    newer.register_function("m", "who", [](const boost::json::array&) -> rpclb::CallResult { return 2; });
    BOOST_TEST(eventually([&] {
        auto r = a.call("x@127.0.0.1", "m", "who");
        return r.has_value() && *r == boost::json::value(1);
    }, 5s));
    BOOST_TEST(older.stats().name_conflicts == 0u);
}

BOOST_AUTO_TEST_CASE(wrong_cookie_is_refused_and_counted) {
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ob = options("intruder@127.0.0.1");
    ob.cookie = "wrong";
    ob.seeds = {address(a)};
    rpclb::Cluster b(ob);
    b.start();
    BOOST_TEST(eventually([&] { return a.stats().auth_failures + b.stats().auth_failures >= 1; }, 5s));
    BOOST_TEST(a.connected_nodes().empty());
    BOOST_TEST(b.connected_nodes().empty());
}

BOOST_AUTO_TEST_CASE(silent_dial_target_is_dropped_after_handshake_timeout) {
    // A TCP listener that accepts and then never speaks: the WebSocket handshake cannot
    // finish, and the node must give up within its handshake timeout.
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor silent(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    auto o = options("a@127.0.0.1");
    o.handshake_timeout = 300ms;
    o.seeds = {"127.0.0.1:" + std::to_string(silent.local_endpoint().port())};
    rpclb::Cluster a(o);
    a.start();
    boost::asio::ip::tcp::socket s(ioc);
    silent.accept(s);  // the node dialled
    char byte;
    boost::system::error_code ec;
    const auto start = std::chrono::steady_clock::now();
    s.read_some(boost::asio::buffer(&byte, 1), ec);  // HTTP upgrade bytes arrive first
    while (!ec) s.read_some(boost::asio::buffer(&byte, 1), ec);  // then the node closes
    BOOST_TEST((std::chrono::steady_clock::now() - start < 2s));
}

BOOST_AUTO_TEST_CASE(churned_node_names_leave_the_tables_as_they_go) {
    // Batches of nodes with names never used again connect to a long-lived node, join a
    // group of their own, and stop. The long-lived node's tables of known nodes and of
    // groups must shrink back each time: at once for the nodes that dial it (names sorting
    // before its own), after its redials fail for those it dials (names sorting after).
    auto om = options("m@127.0.0.1");
    om.reconnect_interval = 20ms;  // its 30 redials of a gone node take well under a second
    rpclb::Cluster m(om);
    m.start();
    constexpr int batches = 4, per_batch = 6;
    int made = 0;
    for (int batch = 0; batch < batches; ++batch) {
        std::vector<std::unique_ptr<rpclb::Cluster>> nodes;
        for (int i = 0; i < per_batch; ++i, ++made) {
            // Alternately before and after "m": the churned node dials m, or m dials it.
            auto o = options((i % 2 ? "z" : "a") + std::to_string(made) + "@127.0.0.1");
            o.seeds = {address(m)};
            auto& node = *nodes.emplace_back(std::make_unique<rpclb::Cluster>(o));
            node.start();
            node.groups().join("own" + std::to_string(made));
        }
        BOOST_REQUIRE(eventually([&] {
            return m.connected_nodes().size() == static_cast<std::size_t>(per_batch) &&
                   m.groups().group_count() == static_cast<std::size_t>(per_batch);
        }, 10s));
        BOOST_TEST(m.stats().known_nodes == static_cast<std::uint64_t>(per_batch));
        nodes.clear();  // each stops: leaves its group, says bye, closes
        BOOST_TEST(eventually([&] { return m.stats().known_nodes == 0u && m.groups().group_count() == 0u; }, 10s),
                   "batch " << batch << ": " << m.stats().known_nodes << " known nodes, "
                            << m.groups().group_count() << " groups left");
    }
    BOOST_TEST(m.connected_nodes().empty());
}

BOOST_AUTO_TEST_SUITE_END()

// A node stopping while its dial waits for the acceptor's Ready closes that connection
// itself: nothing is known about the acceptor's cookie, and no handshake failure is
// counted or logged. The acceptor here answers the Hello and then says nothing.
BOOST_AUTO_TEST_CASE(a_stop_during_the_cookie_handshake_is_no_handshake_failure) {
    namespace ws = boost::beast::websocket;
    namespace wire = rpclb::detail::wire;
    boost::asio::io_context ioc;
    tcp::acceptor listener(ioc, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    const auto port = listener.local_endpoint().port();
    std::atomic<bool> got_proof{false}, done{false};
    std::thread silent([&] {
        ws::stream<tcp::socket> peer(ioc);
        listener.accept(peer.next_layer());
        peer.accept();
        peer.binary(true);
        rpclb::detail::Handshake handshake(rpclb::detail::Role::acceptor,
                                           {"silent@127.0.0.1", "inc-1", "127.0.0.1:" + std::to_string(port)},
                                           "another-cookie");
        handshake.start();
        boost::beast::flat_buffer buffer;
        boost::system::error_code ec;
        while (!ec && !got_proof) {
            buffer.clear();
            peer.read(buffer, ec);
            if (ec) break;
            const std::string text(static_cast<const char*>(buffer.data().data()), buffer.size());
            auto frame = wire::decode(text);
            if (!frame) break;
            if (std::holds_alternative<wire::Auth>(*frame)) got_proof = true;
            for (const auto& out : handshake.on_frame(*frame).send) peer.write(boost::asio::buffer(wire::encode(out)), ec);
        }
        // Silent from here until the dialer goes away.
        while (!ec) {
            buffer.clear();
            peer.read(buffer, ec);
        }
        done = true;
    });
    auto o = options("a@127.0.0.1");
    o.seeds = {"127.0.0.1:" + std::to_string(port)};
    o.handshake_timeout = 10s;
    rpclb::Cluster a(o);
    a.start();
    BOOST_TEST_REQUIRE(eventually([&] { return got_proof.load(); }, 5s));
    a.stop();
    silent.join();
    BOOST_TEST(done.load());
    BOOST_TEST(a.stats().auth_failures == 0u);
}

BOOST_AUTO_TEST_CASE(a_dns_seed_joins_through_every_address_of_its_name) {
    // "dns:localhost:PORT": localhost resolves (to 127.0.0.1, and perhaps ::1, where
    // nothing listens), and the node meets the one listening there.
    rpclb::Cluster a(options("a@127.0.0.1"));
    a.start();
    auto ob = options("b@127.0.0.1");
    ob.seeds = {"dns:localhost:" + std::to_string(a.listen_endpoint()->port())};
    rpclb::Cluster b(ob);
    b.start();
    BOOST_TEST(eventually([&] { return b.connected_nodes() == std::vector<std::string>{"a@127.0.0.1"}; }, 5s));
    BOOST_TEST(a.connected_nodes() == std::vector<std::string>{"b@127.0.0.1"});
    // A malformed one is refused at start, and the node serves.
    BOOST_TEST(rpclb::detail::dial_problem("dns:localhost").has_value());
    BOOST_TEST(!rpclb::detail::dial_problem("dns:localhost:7000").has_value());
}

// A member that floods membership frames (here ping_req, each asking this node to probe
// another on its behalf) gets FrameBudget's rate and no more: the rest are dropped and
// counted, and the node's other links and calls go on.
BOOST_AUTO_TEST_CASE(a_peer_flooding_membership_frames_is_held_to_its_budget) {
    auto oa = options("a@127.0.0.1");
    oa.idle_timeout = 60s;  // the raw peer answers no probe
    rpclb::Cluster a(oa);
    a.register_function("t", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return args; });
    a.start();
    auto ob = options("b@127.0.0.1");
    ob.seeds = {address(a)};
    rpclb::Cluster b(ob);
    b.start();
    BOOST_REQUIRE(eventually([&] { return a.connected_nodes().size() == 1 && b.connected_nodes().size() == 1; }, 10s));
    namespace wire = rpclb::detail::wire;
    rpclb::test::RawPeer raw(a.listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", false}, oa.cookie));
    constexpr int flood = 30000;
    const auto began = std::chrono::steady_clock::now();
    int sent = 0;
    while (sent < flood && raw.send(wire::Frame(wire::Probe{wire::ProbeKind::ping_req, std::uint64_t(sent) + 1, "b@127.0.0.1"})))
        ++sent;
    BOOST_REQUIRE(sent == flood);
    // A link's frames are handled in order: once a request sent after the flood is
    // answered, every frame of the flood was handled, and the count is final. No more got
    // through than the burst and the rate over that time, whatever the node's speed.
    BOOST_REQUIRE(raw.send(wire::Frame(wire::Request{1, "t", "echo", {}, ""})));
    BOOST_REQUIRE(raw.read_response(1, 60s));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    const auto allowed = 10000.0 + 1000.0 * seconds;
    const auto refused = a.stats().bad_frames;
    BOOST_TEST(double(refused) >= flood - allowed, "bad_frames " << refused << " of " << flood << " in " << seconds << " s");
    BOOST_TEST(refused <= std::uint64_t(flood));
    // The healthy link holds, and calls over it are answered.
    BOOST_TEST(b.connected_nodes().size() == 1u);
    auto r = b.call("a@127.0.0.1", "t", "echo", {1});
    BOOST_TEST(r.has_value());
    b.stop();
    a.stop();
}

// A member that sends frames the codec refuses gets each counted, and the first of its
// link logged with its reason; a request among them is still answered bad_request. A
// second link's first refused frame is logged again.
BOOST_AUTO_TEST_CASE(refused_frames_are_counted_and_logged_once_per_link) {
    auto oa = options("a@127.0.0.1");
    rpclb::Cluster a(oa);
    a.register_function("t", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return args; });
    a.start();
    namespace wire = rpclb::detail::wire;
    rpclb::test::LogCapture log;
    rpclb::test::RawPeer raw(a.listen_endpoint()->port());
    BOOST_REQUIRE(!raw.handshake(wire::PeerInfo{"r@127.0.0.1", "inc-r", "", true}, oa.cookie));
    const auto before = a.stats().bad_frames;
    constexpr int flood = 2000;
    for (int i = 0; i < flood; ++i) BOOST_REQUIRE(raw.send(i % 2 ? "{not json" : R"({"t": "bogus"})"));
    BOOST_REQUIRE(raw.send(R"({"t": "req", "id": 7, "m": 5, "f": "echo", "a": []})"));
    const auto bad = raw.read_response(7, 30s);
    BOOST_REQUIRE(bad.has_value());
    BOOST_TEST(bad->contains("err"));
    // A link's frames are handled in order: once a request sent after them is answered,
    // every one was.
    BOOST_REQUIRE(raw.send(wire::Frame(wire::Request{8, "t", "echo", {}, ""})));
    BOOST_REQUIRE(raw.read_response(8, 30s));
    BOOST_TEST(a.stats().bad_frames - before == std::uint64_t(flood) + 1);
    BOOST_TEST(log.count("refused a frame from r@127.0.0.1 (unknown_type)") == 1u);
    BOOST_TEST(log.count("refused a frame from r@127.0.0.1") == 1u);

    rpclb::test::RawPeer second(a.listen_endpoint()->port());
    BOOST_REQUIRE(!second.handshake(wire::PeerInfo{"s@127.0.0.1", "inc-s", "", true}, oa.cookie));
    BOOST_REQUIRE(second.send("{not json"));
    BOOST_REQUIRE(second.send("{not json"));
    BOOST_REQUIRE(second.send(wire::Frame(wire::Request{1, "t", "echo", {}, ""})));
    BOOST_REQUIRE(second.read_response(1, 30s));
    BOOST_TEST(a.stats().bad_frames - before == std::uint64_t(flood) + 3);
    BOOST_TEST(log.count("refused a frame from s@127.0.0.1 (bad_json)") == 1u);
    BOOST_TEST(log.count("refused a frame from") == 2u);

    // Frames that decode but have no place on an established link: the same rule.
    rpclb::test::RawPeer third(a.listen_endpoint()->port());
    BOOST_REQUIRE(!third.handshake(wire::PeerInfo{"u@127.0.0.1", "inc-u", "", true}, oa.cookie));
    for (int i = 0; i < 100; ++i) BOOST_REQUIRE(third.send(wire::Frame(wire::Ready{"proof"})));
    BOOST_REQUIRE(third.send(wire::Frame(wire::Request{1, "t", "echo", {}, ""})));
    BOOST_REQUIRE(third.read_response(1, 30s));
    BOOST_TEST(a.stats().bad_frames - before == std::uint64_t(flood) + 103);
    BOOST_TEST(log.count("unexpected ready frame from u@127.0.0.1") == 1u);
    a.stop();
}
