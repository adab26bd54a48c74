// The throughput floor of the peer benchmarks, used while bench/rpc_throughput (which prints
// its own `raw_pipelined` line) is not in the tree: `[1,"abc"]` (9 bytes) with a 4-byte
// length prefix over one TCP connection, `--inflight` (64) messages outstanding from one
// client thread (it writes the first 64, then one write per request for each echo it reads),
// against a blocking Asio server that answers each message with one write. Both sides read
// whatever has arrived in one read_some and split it into messages.
// Same pinning and child handling as grpc_echo (peer_process.hpp).
//
// Output: `peers_raw_pipelined payload=9 inflight=64 calls_per_s=X`
#include "peer_process.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <optional>
#include <string_view>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using peer_bench::fail;

constexpr std::string_view payload = R"([1,"abc"])";

const char* const usage =
    "raw_pipelined [--pin|--no-pin] [--cpu N] [--seconds S] [--inflight N]\n"
    "  Length-prefixed [1,\"abc\"] echoed over raw TCP with --inflight messages outstanding\n"
    "  (default 64) for --seconds (default 3) after 0.5 s of warm-up; pinned to CPU 0 by default.";

using Header = std::array<unsigned char, 4>;

Header header_for(std::size_t size) {
    const auto n = static_cast<std::uint32_t>(size);
    return {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
            static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
}

// Length-prefixed messages out of a byte stream: each read takes whatever has arrived (many
// messages when the peer is ahead), so that neither side pays a system call per message to read.
class Frames {
public:
    void fill(tcp::socket& socket, boost::system::error_code& ec) {
        if (begin_ > 0) {
            buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(begin_));
            begin_ = 0;
        }
        const auto old = buffer_.size();
        buffer_.resize(old + 65536);
        const auto n = socket.read_some(asio::buffer(buffer_.data() + old, 65536), ec);
        buffer_.resize(old + n);
    }

    /// The next complete message, or nothing until more bytes arrive.
    std::optional<std::string_view> next() {
        if (buffer_.size() - begin_ < 4) return std::nullopt;
        const auto* h = reinterpret_cast<const unsigned char*>(buffer_.data() + begin_);
        const std::size_t size = std::uint32_t(h[0]) << 24 | std::uint32_t(h[1]) << 16 | std::uint32_t(h[2]) << 8 |
                                 std::uint32_t(h[3]);
        if (buffer_.size() - begin_ - 4 < size) return std::nullopt;
        const std::string_view message(buffer_.data() + begin_ + 4, size);
        begin_ += 4 + size;
        return message;
    }

private:
    std::vector<char> buffer_;
    std::size_t begin_ = 0;
};

int serve() {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    std::thread echo([&] {
        tcp::socket socket(ioc);
        boost::system::error_code ec;
        acceptor.accept(socket, ec);
        if (ec) return;
        socket.set_option(tcp::no_delay(true));
        Frames frames;
        for (;;) {
            if (frames.fill(socket, ec); ec) return;
            while (const auto message = frames.next()) {
                const Header header = header_for(message->size());
                const std::array<asio::const_buffer, 2> reply{asio::buffer(header), asio::buffer(*message)};
                if (asio::write(socket, reply, ec); ec) return;
            }
        }
    });
    echo.detach();
    peer_bench::announce_port_and_wait(acceptor.local_endpoint().port());
    std::_Exit(0);  // the echo thread may be blocked in a read
}

double throughput(const peer_bench::Options& o) {
    peer_bench::ServerChild server("raw", o);
    asio::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port()));
    socket.set_option(tcp::no_delay(true));
    const Header header = header_for(payload.size());
    const std::array<asio::const_buffer, 2> request{asio::buffer(header), asio::buffer(payload)};

    std::atomic<std::uint64_t> done{0};
    std::atomic<bool> stop{false};
    std::string error;
    std::thread client([&] {
        try {
            long outstanding = 0;
            for (; outstanding < o.inflight; ++outstanding) asio::write(socket, request);
            Frames frames;
            boost::system::error_code ec;
            while (outstanding > 0) {
                if (frames.fill(socket, ec); ec) fail("raw client read: " + ec.message());
                while (const auto reply = frames.next()) {
                    if (*reply != payload) fail("raw server echoed other bytes");
                    --outstanding;
                    done.fetch_add(1, std::memory_order_relaxed);
                    if (!stop.load(std::memory_order_relaxed)) {
                        asio::write(socket, request);
                        ++outstanding;
                    }
                }
            }
        } catch (const std::exception& e) {
            error = e.what();
        }
    });
    const double rate = peer_bench::rate_over_window(done, o.seconds);
    stop = true;
    client.join();
    if (!error.empty()) fail(error);
    return rate;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        peer_bench::Options o;
        if (!peer_bench::parse_options(argc, argv, {"raw"}, usage, o)) return 0;
        if (o.pin) peer_bench::pin_to(o.cpu);
        if (!o.serve.empty()) return serve();
        peer_bench::reap_children_on_signals();
        std::printf("# raw_pipelined pin=%s cpu=%d seconds=%.1f inflight=%ld loadavg=%s\n", o.pin ? "on" : "off",
                    o.cpu, o.seconds, o.inflight, peer_bench::load_average().c_str());
        std::fflush(stdout);
        const double rate = throughput(o);
        std::printf("peers_raw_pipelined payload=%zu inflight=%ld calls_per_s=%.0f\n", payload.size(), o.inflight,
                    rate);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "raw_pipelined: %s\n", e.what());
        return 1;
    }
}
