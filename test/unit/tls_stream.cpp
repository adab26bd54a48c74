#define BOOST_TEST_MODULE tls_stream
// TlsStream: TLS records read and written by OpenSSL straight on the socket
// (src/transport/tls_stream.hpp), over a real TCP connection on 127.0.0.1 with a
// certificate this test makes with the `openssl` command.

#include "../../src/transport/tls.hpp"
#include "../../src/transport/tls_stream.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/test/unit_test.hpp>

#include <array>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace asio = boost::asio;
namespace fs = std::filesystem;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

using Executor = asio::strand<asio::io_context::executor_type>;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Stream = rpclb::detail::TlsStream<Socket>;

// One self-signed P-256 certificate for 127.0.0.1 in a temporary directory: both ends
// present it and trust it, as a two-node cluster with one CA would.
class Certificate {
public:
    Certificate() {
        auto pattern = (fs::temp_directory_path() / "rpclb-tls-stream-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        dir_ = pattern;
        const auto command = "cd '" + dir_.string() +
                             "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                             "-keyout node.key -out node.pem -days 30 -subj /CN=rpclb-test -addext "
                             "subjectAltName=IP:127.0.0.1 >openssl.log 2>&1";
        if (std::system(command.c_str()) != 0) throw std::runtime_error("openssl failed: " + command);
    }
    ~Certificate() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    rpclb::TlsOptions options() const {
        return {dir_ / "node.pem", dir_ / "node.key", dir_ / "node.pem", rpclb::TlsVersion::v1_3};
    }

private:
    fs::path dir_;
};

const Certificate& certificate() {
    static const Certificate instance;
    return instance;
}

// A connected pair of TlsStreams on one io_context, handshake done, each on its own strand.
struct Pair {
    explicit Pair(std::optional<int> buffer_bytes = std::nullopt) {
        tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
        client.next_layer().connect(acceptor.local_endpoint());
        acceptor.accept(server.next_layer());
        if (buffer_bytes)
            for (auto* s : {&client.next_layer(), &server.next_layer()}) {
                s->set_option(asio::socket_base::send_buffer_size(*buffer_bytes));
                s->set_option(asio::socket_base::receive_buffer_size(*buffer_bytes));
            }
        rpclb::detail::prepare_tls_dial(client.native_handle(), "127.0.0.1");
        std::optional<error_code> c, s;
        client.async_handshake(asio::ssl::stream_base::client, [&](error_code ec) { c = ec; });
        server.async_handshake(asio::ssl::stream_base::server, [&](error_code ec) { s = ec; });
        run();
        if (!c || !s || *c || *s)
            throw std::runtime_error("TLS handshake failed: client " + (c ? c->message() : "-") + ", server " +
                                     (s ? s->message() : "-"));
    }
    // Runs the io_context until it has no work, for at most 30 s.
    void run() {
        io.restart();
        io.run_for(std::chrono::seconds(30));
    }

    asio::io_context io;
    std::shared_ptr<asio::ssl::context> context = rpclb::detail::make_tls_context(certificate().options());
    Stream client{asio::make_strand(io), *context};
    Stream server{Socket(asio::make_strand(io)), *context};
};

std::string pattern(std::size_t size, char seed) {
    std::string s(size, '\0');
    for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + i % 251);
    return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tls_stream)

BOOST_AUTO_TEST_CASE(bytes_written_on_one_end_are_read_on_the_other) {
    Pair p;
    const std::string hello = "hello over TLS";
    std::string got(hello.size(), '\0');
    error_code wrote, read;
    asio::async_write(p.client, asio::buffer(hello), [&](error_code ec, std::size_t) { wrote = ec; });
    asio::async_read(p.server, asio::buffer(got), [&](error_code ec, std::size_t) { read = ec; });
    p.run();
    BOOST_TEST(!wrote, wrote.message());
    BOOST_TEST(!read, read.message());
    BOOST_TEST(got == hello);
    BOOST_TEST(SSL_version(p.client.native_handle()) == TLS1_3_VERSION);
}

// Small socket buffers make OpenSSL's writes wait for the socket while the same stream's
// read waits too; 4 MiB goes each way at once, written as gathered buffers (a header and
// a payload, as a WebSocket frame is).
BOOST_AUTO_TEST_CASE(large_gathered_writes_both_ways_at_once_arrive_whole) {
    Pair p(16384);
    const std::size_t size = 4 << 20;
    const auto a = pattern(size, 'a'), b = pattern(size, 'b');
    const std::string header = "HDR!";
    std::string at_server(header.size() + size, '\0'), at_client(header.size() + size, '\0');
    std::array<error_code, 4> ec;
    std::array<std::size_t, 4> n{};
    const std::array<asio::const_buffer, 2> from_client{asio::buffer(header), asio::buffer(a)};
    const std::array<asio::const_buffer, 2> from_server{asio::buffer(header), asio::buffer(b)};
    asio::async_write(p.client, from_client, [&](error_code e, std::size_t k) { ec[0] = e, n[0] = k; });
    asio::async_write(p.server, from_server, [&](error_code e, std::size_t k) { ec[1] = e, n[1] = k; });
    asio::async_read(p.server, asio::buffer(at_server), [&](error_code e, std::size_t k) { ec[2] = e, n[2] = k; });
    asio::async_read(p.client, asio::buffer(at_client), [&](error_code e, std::size_t k) { ec[3] = e, n[3] = k; });
    p.run();
    for (std::size_t i = 0; i < ec.size(); ++i) {
        BOOST_TEST(!ec[i], "operation " << i << ": " << ec[i].message());
        BOOST_TEST(n[i] == header.size() + size);
    }
    BOOST_TEST((at_server == header + a), "the server read other bytes than the client wrote");
    BOOST_TEST((at_client == header + b), "the client read other bytes than the server wrote");
}

BOOST_AUTO_TEST_CASE(close_notify_is_end_of_file_and_a_bare_tcp_close_is_a_truncated_stream) {
    {
        Pair p;
        char byte;
        error_code shut, read;
        p.client.async_shutdown([&](error_code ec) { shut = ec; });
        p.server.async_read_some(asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { read = ec; });
        p.run();
        BOOST_TEST(!shut, shut.message());
        BOOST_TEST(read == asio::error::eof, read.message());
    }
    {
        Pair p;
        char byte;
        error_code read;
        p.client.next_layer().close();
        p.server.async_read_some(asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { read = ec; });
        p.run();
        BOOST_TEST(read == asio::ssl::error::stream_truncated, read.message());
    }
}

// The records go out with send(MSG_NOSIGNAL): a write on a socket whose sending side is
// shut (as after a teardown) fails with EPIPE instead of killing the process with SIGPIPE
// (restored to its default here; write(2) or send without the flag would raise it).
BOOST_AUTO_TEST_CASE(writing_after_the_socket_is_shut_fails_without_sigpipe) {
    const auto previous = std::signal(SIGPIPE, SIG_DFL);
    Pair p;
    p.client.next_layer().shutdown(tcp::socket::shutdown_send);
    const std::string bytes = "after the end";
    error_code failed;
    asio::async_write(p.client, asio::buffer(bytes), [&](error_code ec, std::size_t) { failed = ec; });
    p.run();
    std::signal(SIGPIPE, previous);
    BOOST_TEST((failed == boost::system::error_code(EPIPE, boost::system::system_category())), failed.message());
}

// Beast's WebSocket over the stream: messages both ways, then a close handshake whose
// teardown sends close_notify and ends the TCP connection (async_teardown).
BOOST_AUTO_TEST_CASE(a_websocket_over_it_exchanges_messages_and_closes) {
    Pair p;
    boost::beast::websocket::stream<Stream&> client(p.client), server(p.server);
    error_code accepted, handshaken, closed, server_read_end;
    boost::beast::flat_buffer at_server, at_client;
    std::string echoed;
    server.async_accept([&](error_code ec) {
        accepted = ec;
        if (ec) return;
        server.async_read(at_server, [&](error_code ec, std::size_t) {
            if (ec) return void(server_read_end = ec);
            server.async_write(at_server.data(), [&](error_code ec, std::size_t) {
                if (ec) return void(server_read_end = ec);
                server.async_read(at_server, [&](error_code ec, std::size_t) { server_read_end = ec; });
            });
        });
    });
    client.async_handshake("127.0.0.1", "/", [&](error_code ec) {
        handshaken = ec;
        if (ec) return;
        client.async_write(asio::buffer(std::string_view("[1,\"abc\"]")), [&](error_code ec, std::size_t) {
            if (ec) return void(closed = ec);
            client.async_read(at_client, [&](error_code ec, std::size_t) {
                if (ec) return void(closed = ec);
                echoed = boost::beast::buffers_to_string(at_client.data());
                client.async_close(boost::beast::websocket::close_code::normal,
                                   [&](error_code ec) { closed = ec; });
            });
        });
    });
    p.run();
    BOOST_TEST(!accepted, accepted.message());
    BOOST_TEST(!handshaken, handshaken.message());
    BOOST_TEST(echoed == "[1,\"abc\"]");
    BOOST_TEST(!closed, closed.message());
    BOOST_TEST((server_read_end == boost::beast::websocket::error::closed), server_read_end.message());
}

BOOST_AUTO_TEST_SUITE_END()
