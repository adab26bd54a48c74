#define BOOST_TEST_MODULE read_ahead_socket
// ReadAheadSocket (src/transport/read_ahead_socket.hpp): what a call channel's caller
// receives ahead is read by the WebSocket above it first, whole or in part, blocking or
// asynchronously, and the stream still closes cleanly.

#include "../../src/transport/read_ahead_socket.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <poll.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;
using tcp = asio::ip::tcp;
using Executor = asio::strand<asio::io_context::executor_type>;
using Socket = rpclb::detail::ReadAheadSocket<Executor>;

namespace {

// A blocking WebSocket server on 127.0.0.1 that writes the messages it is given once the
// client says "go", then waits for the client's close.
struct Server {
    explicit Server(std::vector<std::string> messages) {
        acceptor.open(tcp::v4());
        acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
        acceptor.listen();
        port = acceptor.local_endpoint().port();
        done = std::async(std::launch::async, [this, messages = std::move(messages)] {
            ws::stream<tcp::socket> s(acceptor.accept());
            s.accept();
            s.binary(true);
            beast::flat_buffer ignored;
            s.read(ignored);  // "go": the frames then come after the handshake, not with it
            for (const auto& m : messages) s.write(asio::buffer(m));
            beast::error_code ec;
            s.read(ignored, ec);  // the client's close
            return ec == ws::error::closed;
        });
    }
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc};
    unsigned short port = 0;
    std::future<bool> done;
};

struct Client {
    explicit Client(unsigned short port) : stream(asio::make_strand(ioc)) {
        beast::get_lowest_layer(stream).connect({asio::ip::make_address("127.0.0.1"), port});
        stream.handshake("127.0.0.1", "/");
        stream.write(asio::buffer(std::string_view("go")));
    }
    Socket& socket() { return stream.next_layer(); }
    // Receives ahead until `bytes` are there (one message may come in several segments).
    void receive_ahead_until(std::size_t bytes) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (socket().ahead().size() < bytes && std::chrono::steady_clock::now() < until)
            if (socket().receive_ahead(bytes - socket().ahead().size()) <= 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        BOOST_TEST_REQUIRE(socket().ahead().size() == bytes);
    }
    std::string read() {
        beast::flat_buffer b;
        stream.read(b);
        return beast::buffers_to_string(b.data());
    }
    asio::io_context ioc;
    ws::stream<Socket> stream;
};

}  // namespace

BOOST_AUTO_TEST_CASE(two_messages_received_ahead_are_read_in_turn) {
    Server server({"one", "two"});
    Client client(server.port);
    client.receive_ahead_until(2 * (2 + 3));  // two unmasked frames: 2-byte header, 3 bytes each
    // Beast takes as much as it asks for (up to 1536 bytes a read) into a buffer of its
    // own, so both frames move there on the first read.
    BOOST_TEST(client.read() == "one");
    BOOST_TEST(client.read() == "two");
    BOOST_TEST(client.socket().ahead().size() == 0u);
    client.stream.close(ws::close_code::normal);
    BOOST_TEST(server.done.get());
}

BOOST_AUTO_TEST_CASE(an_asynchronous_read_takes_the_part_ahead_then_the_rest_from_the_socket) {
    const std::string big(100 * 1024, 'x');
    Server server({big, "after"});
    Client client(server.port);
    client.receive_ahead_until(4096);  // part of the first frame only
    std::string got;
    beast::flat_buffer b;
    client.stream.async_read(b, [&](beast::error_code ec, std::size_t) {
        BOOST_TEST(!ec);
        got = beast::buffers_to_string(b.data());
    });
    client.ioc.run();
    BOOST_TEST(got.size() == big.size());
    BOOST_TEST((got == big));
    BOOST_TEST(client.socket().ahead().size() == 0u);
    BOOST_TEST(client.read() == "after");  // nothing of the next frame was lost
    client.stream.close(ws::close_code::normal);
    BOOST_TEST(server.done.get());
}

BOOST_AUTO_TEST_CASE(with_nothing_ahead_reads_go_to_the_socket) {
    Server server({"plain"});
    Client client(server.port);
    BOOST_TEST(client.read() == "plain");
    client.stream.close(ws::close_code::normal);
    BOOST_TEST(server.done.get());
}

namespace {

// A blocking WebSocket server on 127.0.0.1 that sends back every message until the
// client closes.
struct EchoServer {
    EchoServer() {
        acceptor.open(tcp::v4());
        acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
        acceptor.listen();
        port = acceptor.local_endpoint().port();
        done = std::async(std::launch::async, [this] {
            ws::stream<tcp::socket> s(acceptor.accept());
            s.accept();
            for (;;) {
                beast::flat_buffer b;
                beast::error_code ec;
                s.read(b, ec);
                if (ec) return ec == ws::error::closed;
                s.write(b.data());
            }
        });
    }
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc};
    unsigned short port = 0;
    std::future<bool> done;
};

// Waits until the socket's descriptor is readable (up to 5 s).
bool readable(Socket& socket) {
    pollfd watch{socket.descriptor(), POLLIN, 0};
    return ::poll(&watch, 1, 5000) == 1;
}

}  // namespace

// A worker staying on a call channel takes the socket out of the reactor (detach) and does
// its blocking reads and writes on the descriptor; attach puts it back, in non-blocking
// mode, and the stream's asynchronous reads and its close work as before.
BOOST_AUTO_TEST_CASE(a_detached_socket_reads_and_writes_on_its_descriptor_until_attached) {
    EchoServer server;
    Client client(server.port);  // its "go" comes back first
    BOOST_TEST(client.read() == "go");
    beast::error_code ec;
    client.socket().detach(ec);
    BOOST_TEST_REQUIRE(!ec);
    BOOST_TEST(client.socket().detached());
    BOOST_TEST(!client.socket().is_open());  // Asio no longer holds it
    // (A blocking read that finds the socket empty fails with would_block, which ends a
    // Beast stream: the frame is taken ahead whole first, as Connection::follow does.)
    for (const std::string& m : {std::string("one"), std::string(20000, 'y')}) {
        client.stream.write(asio::buffer(m), ec);  // ReadAheadSocket::write_some: sendmsg
        BOOST_TEST_REQUIRE(!ec, ec.message());
        BOOST_TEST_REQUIRE(readable(client.socket()));
        client.receive_ahead_until((m.size() < 126 ? 2 : 4) + m.size());  // recv on the descriptor
        beast::flat_buffer b;
        client.stream.read(b, ec);
        BOOST_TEST_REQUIRE(!ec, ec.message());
        BOOST_TEST((beast::buffers_to_string(b.data()) == m));
    }
    // With nothing ahead, a read goes to the descriptor (ReadAheadSocket::read_some: recv).
    client.stream.write(asio::buffer(std::string_view("two")), ec);
    BOOST_TEST_REQUIRE(readable(client.socket()));
    // (The server writes the 5 bytes in one send, which loopback delivers whole.)
    BOOST_TEST(client.read() == "two");
    client.socket().attach(ec);
    BOOST_TEST_REQUIRE(!ec);
    BOOST_TEST(!client.socket().detached());
    BOOST_TEST(client.socket().is_open());
    BOOST_TEST(client.socket().non_blocking());
    client.stream.write(asio::buffer(std::string_view("three")));
    std::string got;
    beast::flat_buffer b;
    client.stream.async_read(b, [&](beast::error_code e, std::size_t) {
        BOOST_TEST(!e);
        got = beast::buffers_to_string(b.data());
    });
    client.ioc.run();
    BOOST_TEST(got == "three");
    // attach() left the socket non-blocking, as a call channel's is; this test's close is
    // a blocking one, whose read of the server's close reply must wait.
    client.socket().non_blocking(false);
    client.stream.close(ws::close_code::normal);
    BOOST_TEST(server.done.get());
}
