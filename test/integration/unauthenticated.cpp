// What a peer that never authenticates can make a node hold (doc/how-to/secure-a-cluster.md,
// "Before authentication"): at most a few KiB of input per connection, and at most 64
// such connections at once. Raw sockets speak just enough WebSocket to get there.
#define BOOST_TEST_MODULE unauthenticated
#include <boost/test/unit_test.hpp>

#include "support/admin.hpp"
#include "support/node.hpp"
#include "support/wait.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

using namespace rpclb::test;
using namespace std::chrono;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); 0 when it cannot be read.
std::uint64_t status_kib(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
    return 0;
}

// A counter of the node's /metrics; nullopt when the family is missing.
std::optional<std::uint64_t> metric(Node& node, const std::string& family) {
    const auto body = http_get(admin_address(node), "/metrics").body;
    const auto at = body.find("\n" + family + " ");
    if (at == std::string::npos) return std::nullopt;
    return std::stoull(body.substr(at + family.size() + 2));
}

// Waits up to `deadline` until `socket` can be read (POLLIN, which includes its end).
bool readable_by(tcp::socket& socket, steady_clock::time_point deadline) {
    for (;;) {
        const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
        if (left <= 0) return false;
        pollfd p{socket.native_handle(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) > 0) return true;
    }
}

// Connects to 127.0.0.1:`port` and completes the WebSocket upgrade on /rpclb; the socket
// is left non-blocking. Throws when the node does not answer 101 within 5 s.
tcp::socket upgraded(asio::io_context& ioc, std::uint16_t port) {
    tcp::socket socket(ioc);
    socket.connect({asio::ip::address_v4::loopback(), port});
    asio::write(socket, asio::buffer(std::string("GET /rpclb HTTP/1.1\r\n"
                                                 "Host: 127.0.0.1\r\n"
                                                 "Upgrade: websocket\r\n"
                                                 "Connection: Upgrade\r\n"
                                                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                                 "Sec-WebSocket-Version: 13\r\n\r\n")));
    socket.non_blocking(true);
    const auto deadline = steady_clock::now() + 5s;
    std::string answer;
    while (answer.find("\r\n\r\n") == std::string::npos) {
        if (!readable_by(socket, deadline)) throw std::runtime_error("no answer to the upgrade within 5 s");
        std::array<char, 512> buf;
        boost::system::error_code ec;
        const auto n = socket.read_some(asio::buffer(buf), ec);
        if (ec && ec != asio::error::would_block) throw std::runtime_error("upgrade: " + ec.message());
        answer.append(buf.data(), n);
    }
    if (answer.rfind("HTTP/1.1 101", 0) != 0) throw std::runtime_error("upgrade refused: " + answer);
    return socket;
}

// A masked binary frame's header announcing `size` bytes of payload, with a zero mask
// (RFC 6455 section 5.2: the payload goes unchanged).
std::string frame_header(std::uint64_t size) {
    std::string h{'\x82', '\xff'};
    for (int shift = 56; shift >= 0; shift -= 8) h.push_back(static_cast<char>((size >> shift) & 0xff));
    h.append(4, '\0');
    return h;
}

// One attacker's connection: what is left to write, and what the node sent back.
struct Flood {
    tcp::socket socket;
    std::uint64_t left;       // payload bytes not yet written
    std::string received;     // bytes the node sent
    bool ended = false;       // the node closed it, refused it, or writing failed
};

// A close frame from the node with status 1009 (RFC 6455 section 7.4.1: "message too big").
bool closed_as_too_big(const std::string& received) {
    return received.size() >= 4 && static_cast<unsigned char>(received[0]) == 0x88 &&
           static_cast<unsigned char>(received[2]) == 0x03 && static_cast<unsigned char>(received[3]) == 0xf1;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(unauthenticated)

// 50 connections each announce a 32 MiB message before any handshake frame and write its
// payload. The node refuses each message from its header: it grows by far less than one
// such message, answers each with a close "message too big", and still serves.
BOOST_FIXTURE_TEST_CASE(large_messages_before_the_handshake_do_not_grow_the_node, Harness) {
    constexpr int connections = 50;
    constexpr std::uint64_t payload = 32u << 20;
    auto a = start_node({.name = "a", .extra_args = admin_args()});
    auto client = start_client({a->address()});
    BOOST_TEST_REQUIRE(wait_for_connected(*client, {a->name()}));
    const auto warm = client->call(a->name(), "demo", "echo", {"warm"}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(warm.has_value(), warm.error().message);
    const auto pid = a->process().pid();
    const auto before = status_kib(pid, "VmRSS");
    BOOST_TEST_REQUIRE(before > 0u);

    asio::io_context ioc;
    std::vector<Flood> floods;
    for (int i = 0; i < connections; ++i) floods.push_back({upgraded(ioc, a->port()), payload});
    const auto header = frame_header(payload);
    for (auto& f : floods) BOOST_TEST_REQUIRE(::send(f.socket.native_handle(), header.data(), header.size(),
                                                      MSG_NOSIGNAL) == static_cast<ssize_t>(header.size()));

    // Write every payload until the node refuses or closes each connection; a refused one
    // is shut down for writing, as a polite peer would, so the node's close completes.
    const std::string chunk(256 * 1024, 'x');
    std::uint64_t peak = before;
    const auto deadline = steady_clock::now() + 60s;
    while (steady_clock::now() < deadline &&
           std::any_of(floods.begin(), floods.end(), [](const Flood& f) { return !f.ended; })) {
        std::vector<pollfd> polls;
        for (auto& f : floods)
            if (!f.ended)
                polls.push_back({f.socket.native_handle(), static_cast<short>(POLLIN | (f.left > 0 ? POLLOUT : 0)), 0});
        ::poll(polls.data(), polls.size(), 100);
        for (auto& f : floods) {
            if (f.ended) continue;
            boost::system::error_code ec;
            std::array<char, 4096> buf;
            const auto n = f.socket.read_some(asio::buffer(buf), ec);
            f.received.append(buf.data(), n);
            if (ec && ec != asio::error::would_block) f.ended = true;
            if (closed_as_too_big(f.received) && f.left > 0) {
                f.left = 0;
                f.socket.shutdown(tcp::socket::shutdown_send, ec);
            }
            if (f.ended || f.left == 0) continue;
            const auto size = static_cast<std::size_t>(std::min<std::uint64_t>(f.left, chunk.size()));
            const auto sent = ::send(f.socket.native_handle(), chunk.data(), size, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (sent > 0)
                f.left -= static_cast<std::uint64_t>(sent);
            else if (errno != EAGAIN && errno != EWOULDBLOCK)
                f.ended = true;
        }
        peak = std::max(peak, status_kib(pid, "VmRSS"));
    }
    peak = std::max(peak, status_kib(pid, "VmRSS"));
    const auto growth_kib = peak - before;
    BOOST_TEST_MESSAGE("node RSS " << before << " KiB before, " << peak << " KiB at its peak (+" << growth_kib / 1024
                                   << " MiB); VmHWM " << status_kib(pid, "VmHWM") << " KiB");
    BOOST_TEST(growth_kib < 16u * 1024u, "the node grew by " << growth_kib / 1024 << " MiB for " << connections
                                                            << " unauthenticated connections");
    int refused = 0;
    for (const auto& f : floods) refused += closed_as_too_big(f.received) ? 1 : 0;
    BOOST_TEST(refused == connections, refused << " of " << connections
                                               << " connections were closed as \"message too big\"");
    BOOST_TEST(std::all_of(floods.begin(), floods.end(), [](const Flood& f) { return f.ended; }),
               "the node kept a connection that sent a 32 MiB message before its handshake");
    floods.clear();

    BOOST_TEST(eventually([&] { return metric(*a, "rpclb_oversize_before_handshake_total") == std::uint64_t(connections); },
                          10s),
               "rpclb_oversize_before_handshake_total: " << metric(*a, "rpclb_oversize_before_handshake_total").value_or(0));
    const auto r = client->call(a->name(), "demo", "echo", {"ok"}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(r.has_value(), "the node stopped serving: " << r.error().message);
    BOOST_TEST(a->process().running());
    // Logged, but not once per connection.
    BOOST_TEST_REQUIRE(eventually([&] { return a->log_contains("before its cookie handshake was done"); }, 3s));
    BOOST_TEST(a->log_count("before its cookie handshake was done") == 1u);
}

// 64 silent connections hold every unauthenticated slot: the 65th is closed at once and
// counted, while the 64 stay open and established peers keep being served. Once they go,
// a new node joins as usual.
BOOST_FIXTURE_TEST_CASE(a_connection_past_the_unauthenticated_bound_is_closed_at_once, Harness) {
    constexpr int bound = 64;
    auto a = start_node({.name = "a", .extra_args = admin_args()});
    auto client = start_client({a->address()});
    BOOST_TEST_REQUIRE(wait_for_connected(*client, {a->name()}));

    asio::io_context ioc;
    std::vector<tcp::socket> held;
    for (int i = 0; i < bound; ++i) {
        held.emplace_back(ioc);
        held.back().connect({asio::ip::address_v4::loopback(), a->port()});
    }
    // The node accepts in order: once it has refused the next one, it has taken these 64.
    tcp::socket extra(ioc);
    extra.connect({asio::ip::address_v4::loopback(), a->port()});
    BOOST_TEST_REQUIRE(readable_by(extra, steady_clock::now() + 3s), "the 65th connection was kept open");
    std::array<char, 16> buf;
    boost::system::error_code ec;
    extra.read_some(asio::buffer(buf), ec);
    BOOST_TEST((ec == asio::error::connection_reset || ec == asio::error::eof), ec.message());
    BOOST_TEST(metric(*a, "rpclb_unauthenticated_refused_total").value_or(0) == 1u);
    BOOST_TEST(eventually([&] { return a->log_contains("in their cookie handshake, the most this node holds"); }, 3s));

    // The 64 are still open (the node's handshake timeout, 5 s, has not passed) and the
    // established client is served meanwhile.
    for (auto& s : held) {
        pollfd p{s.native_handle(), POLLIN, 0};
        BOOST_TEST(::poll(&p, 1, 0) == 0, "a held connection was closed");
    }
    const auto r = client->call(a->name(), "demo", "echo", {"held"}, {.timeout = 2s});
    BOOST_TEST_REQUIRE(r.has_value(), r.error().message);

    held.clear();
    auto b = start_node({.name = "b", .seeds = {a->address()}});
    BOOST_TEST(wait_for_connected(*client, {a->name(), b->name()}, 10s), "b did not join after the strangers left");
    const auto rb = client->call(b->name(), "demo", "echo", {"b"}, {.timeout = 2s});
    BOOST_TEST(rb.has_value(), (rb ? std::string() : rb.error().message));
}

BOOST_AUTO_TEST_SUITE_END()
