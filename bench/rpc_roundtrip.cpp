// Round-trip latency of a small rpclb call against a raw Asio TCP ping-pong floor.
//
// One run measures, each against its own server in a separate process (the binary
// re-executes itself with an internal server flag; bench/support/harness.hpp):
//   rpclb_inline   `echo(1, "abc")` through rpclb::Cluster::call() to a node registering
//                  bench.echo with HandlerOptions::run_inline (--serve);
//   rpclb_worker   the same call to bench.echo_worker on that node, run on its worker pool;
//   rpclb_tls_inline  rpclb_inline over TLS 1.3 with mutual verification (ClusterOptions::tls),
//                  to a second server node (--serve --tls DIR); the certificate is made
//                  for the run with the `openssl` command in a temporary directory;
//   raw_tcp        the floor: the JSON text of those arguments (`[1,"abc"]`) with a 4-byte
//                  length prefix, echoed by a blocking Asio server (--raw-serve);
//   beast_ws_json  the same wire work as an rpclb call (masked WebSocket text frames,
//                  the request and response as JSON documents) done synchronously on one
//                  thread each side (--ws-serve): the cost of the protocol without rpclb's
//                  threads, strands, timers and futures.
// Each does `warmup` untimed calls then `count` timed sequential calls. The timed calls are
// split into `rounds` blocks taken in turn (raw, ws, inline, worker, tls, raw, ...) so that a
// burst of load from elsewhere on the machine hits every stack alike; the floor is always
// taken in the same run (the rule of bench/README.md: a ratio to a floor, never a timed test).
//
// With --pin (the default) the client and the servers are bound to one CPU (0, or --cpu N)
// before they start any thread, as `taskset -c 0` would (cross-core wake-ups cost about 45 µs on this
// machine and vary run to run). --no-pin leaves
// scheduling to the kernel.
//
// Output, one line each, in this order: `rpclb_inline median_us=.. p99_us=..`,
// `rpclb_worker ...`, `raw_tcp ...`, `ratio_inline` (inline median / raw median),
// `ratio_worker`, `ratio_p99_inline` (inline p99 / raw p99), `csw_per_call_client` and
// `csw_per_call_server` (context switches, voluntary + involuntary over all threads, per
// inline call), `rpclb_tls_inline median_us=.. p99_us=..`, `ratio_tls` (TLS inline median /
// plaintext inline median: what TLS adds to a call). Lines starting with '#' carry details: the beast_ws_json floor, more
// percentiles, CPU time and context switches per call of every stack.
#include "support/harness.hpp"
#include "support/tls_records.hpp"
#include "../src/transport/tls.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using bench::Clock;
using bench::die;

namespace {

constexpr const char* server_node = "bench_server@127.0.0.1";
constexpr const char* client_node = "bench_client@127.0.0.1";
constexpr const char* cookie = "rpc_roundtrip-bench";

json::array echo_args() { return json::array{1, "abc"}; }

// ---- servers (child processes) -----------------------------------------------------------

// TLS options of both ends in the TLS stack: one self-signed certificate for 127.0.0.1
// in `dir`, presented by both sides and trusted by both (mutual verification, as a
// cluster with a CA runs).
rpclb::TlsOptions tls_options(const std::filesystem::path& dir) {
    return {dir / "bench.pem", dir / "bench.key", dir / "bench.pem", rpclb::TlsVersion::v1_3};
}

// A temporary directory holding the certificate of tls_options; removed by the destructor.
class BenchCertificate {
public:
    BenchCertificate() {
        auto pattern = (std::filesystem::temp_directory_path() / "rpclb-bench-tls-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) die("mkdtemp failed");
        dir_ = pattern;
        const auto command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout '" +
                             (dir_ / "bench.key").string() + "' -out '" + (dir_ / "bench.pem").string() +
                             "' -days 1 -subj /CN=rpclb-bench -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1";
        if (std::system(command.c_str()) != 0) die("cannot make a certificate with the openssl command");
    }
    ~BenchCertificate() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    const std::filesystem::path& dir() const { return dir_; }

private:
    std::filesystem::path dir_;
};

int run_rpclb_server(const std::optional<std::filesystem::path>& tls_dir) {
    rpclb::ClusterOptions options;
    options.name = server_node;
    options.cookie = cookie;
    if (tls_dir) options.tls = tls_options(*tls_dir);
    rpclb::Cluster cluster(std::move(options));
    auto echo = [](const json::array& args) -> rpclb::CallResult { return json::value(args); };
    cluster.register_function("bench", "echo", echo, rpclb::HandlerOptions{.run_inline = true});
    cluster.register_function("bench", "echo_worker", echo);
    cluster.start();
    bench::announce_port(cluster.listen_endpoint()->port());
    bench::wait_for_stdin_eof();
    cluster.stop();
    return 0;
}

// The same wire work as an rpclb call (a masked WebSocket text frame each way, the request
// parsed into a JSON document and the response serialized) with no threads, strands,
// timers or futures: what is left of rpclb's cost once its architecture is taken away.
int run_ws_server() {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    bench::announce_port(acceptor.local_endpoint().port());
    std::thread echo([&] {
        for (;;) {
            tcp::socket socket(ioc);
            boost::system::error_code ec;
            acceptor.accept(socket, ec);
            if (ec) return;
            socket.set_option(tcp::no_delay(true));
            websocket::stream<tcp::socket> ws(std::move(socket));
            ws.accept(ec);
            if (ec) continue;
            ws.text(true);
            beast::flat_buffer buffer;
            for (;;) {
                ws.read(buffer, ec);
                if (ec) break;
                const auto data = buffer.cdata();
                const std::string_view text(static_cast<const char*>(data.data()), data.size());
                auto request = json::parse(text, ec);
                buffer.consume(buffer.size());
                if (ec || !request.is_object()) break;
                auto& obj = request.get_object();
                json::object response{{"t", "res"}, {"id", obj["id"]}, {"ok", std::move(obj["a"])}};
                const auto reply = json::serialize(response);
                ws.write(asio::buffer(reply), ec);
                if (ec) break;
            }
        }
    });
    echo.detach();
    bench::wait_for_stdin_eof();
    std::_Exit(0);
}

// ---- cost per call -----------------------------------------------------------------------

using bench::ProcessCost;

/// Client and server cost of one kind of call, summed over the timed blocks.
struct PhaseCost {
    ProcessCost client, server;
};

void print_cost(const char* label, const PhaseCost& c, long calls) {
    const double n = static_cast<double>(calls);
    std::printf("# %s per_call client_cpu_us=%.1f+%.1f client_csw=%.2f+%.2f server_cpu_us=%.1f+%.1f"
                " server_csw=%.2f+%.2f (cpu = user+system from clock ticks; csw = voluntary+involuntary)\n",
                label, c.client.user_us / n, c.client.system_us / n,
                static_cast<double>(c.client.voluntary) / n, static_cast<double>(c.client.involuntary) / n,
                c.server.user_us / n, c.server.system_us / n, static_cast<double>(c.server.voluntary) / n,
                static_cast<double>(c.server.involuntary) / n);
}

// ---- clients -----------------------------------------------------------------------------

class RawClient {
public:
    explicit RawClient(unsigned short port)
        : socket_(ioc_), payload_(json::serialize(echo_args())), reply_(payload_.size()) {
        socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        socket_.set_option(tcp::no_delay(true));
        const auto n = static_cast<std::uint32_t>(payload_.size());
        header_ = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
                   static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
    }

    const std::string& payload() const { return payload_; }

    /// One ping-pong; throws on a socket error or a wrong echo.
    void round_trip() {
        const std::array<asio::const_buffer, 2> request{asio::buffer(header_), asio::buffer(payload_)};
        asio::write(socket_, request);
        std::array<unsigned char, 4> header{};
        asio::read(socket_, asio::buffer(header));
        if (header != header_) die("raw server answered with a different length");
        asio::read(socket_, asio::buffer(reply_));
    }

    void check_echo() const {
        if (std::string_view(reply_.data(), reply_.size()) != payload_) die("raw server echoed other bytes");
    }

private:
    asio::io_context ioc_;
    tcp::socket socket_;
    std::string payload_;
    std::array<unsigned char, 4> header_{};
    std::vector<char> reply_;
};

class WsClient {
public:
    explicit WsClient(unsigned short port) : ws_(ioc_) {
        auto& socket = ws_.next_layer();
        socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        socket.set_option(tcp::no_delay(true));
        ws_.handshake("127.0.0.1:" + std::to_string(port), "/");
        ws_.text(true);
    }

    /// One call's worth of wire work: serialize the request, send it, read the response,
    /// parse it and check that the echo came back.
    void round_trip() {
        const json::object request{
            {"t", "req"}, {"id", ++id_}, {"m", "bench"}, {"f", "echo"}, {"a", echo_args()}};
        const auto text = json::serialize(request);
        ws_.write(asio::buffer(text));
        ws_.read(buffer_);
        const auto data = buffer_.cdata();
        auto response = json::parse(std::string_view(static_cast<const char*>(data.data()), data.size()));
        buffer_.consume(buffer_.size());
        const auto* ok = response.as_object().if_contains("ok");
        if (!ok || *ok != expected_)
            die("websocket server answered " + json::serialize(response));
    }

    ~WsClient() {
        boost::system::error_code ec;
        ws_.next_layer().close(ec);
    }

private:
    asio::io_context ioc_;
    websocket::stream<tcp::socket> ws_;
    beast::flat_buffer buffer_;
    std::uint64_t id_ = 0;
    const json::value expected_ = echo_args();
};

void rpclb_round_trip(rpclb::Cluster& cluster, const char* function) {
    auto result = cluster.call(server_node, "bench", function, echo_args());
    if (!result) die("rpclb call failed: " + json::serialize(result.error().to_json()));
}

struct Summary {
    double median_us, p99_us, p90_us, p999_us, min_us, mean_us, max_us;
};

double us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

Summary summarize(std::vector<std::int64_t> ns) {
    std::sort(ns.begin(), ns.end());
    // Nearest-rank percentile: the smallest sample with at least p of them at or below it.
    auto pct = [&](double p) {
        auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(ns.size())));
        return us(ns[std::clamp<std::size_t>(rank, 1, ns.size()) - 1]);
    };
    const double mean = static_cast<double>(std::accumulate(ns.begin(), ns.end(), std::int64_t{0})) /
                        static_cast<double>(ns.size()) / 1000.0;
    return {pct(0.50), pct(0.99), pct(0.90), pct(0.999), us(ns.front()), mean, us(ns.back())};
}

void print_detail(const char* label, const Summary& s) {
    std::printf("# %s min_us=%.2f p90_us=%.2f p999_us=%.2f mean_us=%.2f max_us=%.2f\n", label, s.min_us,
                s.p90_us, s.p999_us, s.mean_us, s.max_us);
}

struct Options {
    long count = 20000;
    long warmup = 2000;
    long rounds = 4;
    bool pin = true;
    int cpu = 0;
    bool call_channels = true;
};

int run_client(const Options& o) {
    bench::print_run_header("rpc_roundtrip",
                            "count=" + std::to_string(o.count) + " warmup=" + std::to_string(o.warmup) +
                                " rounds=" + std::to_string(o.rounds) +
                                (o.call_channels ? "" : " call_channels=off"),
                            o.pin);
    const std::optional<int> cpu = o.pin ? std::optional<int>(o.cpu) : std::nullopt;

    // Children are destroyed (stopped and reaped) after the clients below, on every path.
    bench::Child raw_server(bench::self_child("--raw-serve", cpu));
    bench::Child ws_server(bench::self_child("--ws-serve", cpu));
    bench::Child rpclb_server(bench::self_child("--serve", cpu));
    const BenchCertificate certificate;
    bench::Child rpclb_tls_server(bench::self_child("--serve", cpu, {"--tls", certificate.dir().string()}));

    RawClient raw(raw_server.port());
    WsClient ws(ws_server.port());
    std::printf("# payload %zu bytes: %s\n", raw.payload().size(), raw.payload().c_str());

    rpclb::ClusterOptions options;
    options.name = client_node;
    options.cookie = cookie;
    options.client = true;
    options.call_channels = o.call_channels;
    options.seeds = {"127.0.0.1:" + std::to_string(rpclb_server.port())};
    auto tls_client_options = options;
    tls_client_options.seeds = {"127.0.0.1:" + std::to_string(rpclb_tls_server.port())};
    tls_client_options.tls = tls_options(certificate.dir());
    rpclb::Cluster cluster(std::move(options));
    cluster.start();
    bench::wait_connected(cluster, server_node);
    rpclb::Cluster tls_cluster(std::move(tls_client_options));
    tls_cluster.start();
    bench::wait_connected(tls_cluster, server_node);

    // The echo must come back as sent, or the figures mean nothing.
    raw.round_trip();
    raw.check_echo();
    for (auto* c : {&cluster, &tls_cluster})
        for (const char* function : {"echo", "echo_worker"}) {
            auto first = c->call(server_node, "bench", function, echo_args());
            if (!first || *first != json::value(echo_args()))
                die(std::string("rpclb ") + function + " returned " +
                    (first ? json::serialize(*first) : json::serialize(first.error().to_json())));
        }

    struct Kind {
        const char* label;
        pid_t server;
        std::function<void()> op;
        std::vector<std::int64_t> ns;
        PhaseCost cost;
    };
    // The floors first, then what is compared with them; the same order in every round.
    enum { raw_k, ws_k, inline_k, worker_k, tls_k };
    std::array<Kind, 5> kinds{{
        {"raw_tcp", raw_server.pid(), [&] { raw.round_trip(); }, {}, {}},
        {"beast_ws_json", ws_server.pid(), [&] { ws.round_trip(); }, {}, {}},
        {"rpclb_inline", rpclb_server.pid(), [&] { rpclb_round_trip(cluster, "echo"); }, {}, {}},
        {"rpclb_worker", rpclb_server.pid(), [&] { rpclb_round_trip(cluster, "echo_worker"); }, {}, {}},
        {"rpclb_tls_inline", rpclb_tls_server.pid(), [&] { rpclb_round_trip(tls_cluster, "echo"); }, {}, {}},
    }};
    for (auto& k : kinds) {
        k.ns.reserve(static_cast<std::size_t>(o.count));
        for (long i = 0; i < o.warmup; ++i) k.op();
    }
    for (long r = 0; r < o.rounds; ++r) {
        // Spread count over the rounds; the first rounds take the remainder.
        const long n = o.count / o.rounds + (r < o.count % o.rounds ? 1 : 0);
        for (auto& k : kinds) {
            const auto client0 = bench::process_cost(::getpid());
            const auto server0 = bench::process_cost(k.server);
            for (long i = 0; i < n; ++i) {
                const auto t0 = Clock::now();
                k.op();
                const auto t1 = Clock::now();
                k.ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
            }
            k.cost.client += bench::process_cost(::getpid()) - client0;
            k.cost.server += bench::process_cost(k.server) - server0;
        }
    }
    raw.check_echo();

    cluster.stop();  // while the server still answers the WebSocket close
    tls_cluster.stop();
    rpclb_tls_server.stop();
    rpclb_server.stop();
    ws_server.stop();
    raw_server.stop();

    // OpenSSL's record work alone, with the same certificate, in this (pinned) process.
    const double record_work_us = bench::tls_record_work_us(
        rpclb::detail::make_tls_context(tls_options(certificate.dir()))->native_handle());

    std::array<Summary, kinds.size()> s;
    for (std::size_t i = 0; i < kinds.size(); ++i) s[i] = summarize(std::move(kinds[i].ns));
    const double calls = static_cast<double>(o.count);
    // The lines to parse come first, in a fixed form; '#' lines follow.
    std::printf("rpclb_inline median_us=%.2f p99_us=%.2f\n", s[inline_k].median_us, s[inline_k].p99_us);
    std::printf("rpclb_worker median_us=%.2f p99_us=%.2f\n", s[worker_k].median_us, s[worker_k].p99_us);
    std::printf("raw_tcp median_us=%.2f p99_us=%.2f\n", s[raw_k].median_us, s[raw_k].p99_us);
    std::printf("ratio_inline %.2f\n", s[inline_k].median_us / s[raw_k].median_us);
    std::printf("ratio_worker %.2f\n", s[worker_k].median_us / s[raw_k].median_us);
    std::printf("ratio_p99_inline %.2f\n", s[inline_k].p99_us / s[raw_k].p99_us);
    std::printf("csw_per_call_client %.2f\n", static_cast<double>(kinds[inline_k].cost.client.switches()) / calls);
    std::printf("csw_per_call_server %.2f\n", static_cast<double>(kinds[inline_k].cost.server.switches()) / calls);
    std::printf("rpclb_tls_inline median_us=%.2f p99_us=%.2f\n", s[tls_k].median_us, s[tls_k].p99_us);
    std::printf("ratio_tls %.2f\n", s[tls_k].median_us / s[inline_k].median_us);
    std::printf("# beast_ws_json median_us=%.2f p99_us=%.2f\n", s[ws_k].median_us, s[ws_k].p99_us);
    for (std::size_t i = 0; i < kinds.size(); ++i) print_detail(kinds[i].label, s[i]);
    std::printf("# ratio_p99_worker %.2f (rpclb_worker p99 / raw p99)\n", s[worker_k].p99_us / s[raw_k].p99_us);
    std::printf("# ratio_beast_ws_json %.2f (beast_ws_json median / raw median)\n",
                s[ws_k].median_us / s[raw_k].median_us);
    std::printf("# ratio_inline_vs_beast_ws_json %.2f (rpclb_inline median / beast_ws_json median)\n",
                s[inline_k].median_us / s[ws_k].median_us);
    for (const auto& k : kinds) print_cost(k.label, k.cost, o.count);
    std::printf("# tls_record_work_us %.2f (OpenSSL alone: a 64-byte request and answer each encrypted and "
                "decrypted once, in-process through a BIO pair)\n",
                record_work_us);
    std::printf("# ratio_tls_floor %.2f ((rpclb_inline median + tls_record_work_us) / rpclb_inline median: "
                "ratio_tls if TLS added nothing but OpenSSL's record work)\n",
                (s[inline_k].median_us + record_work_us) / s[inline_k].median_us);
    return 0;
}

void usage() {
    std::puts(
        "rpc_roundtrip [--count N] [--warmup N] [--rounds N] [--pin|--no-pin] [--cpu N] [--no-call-channels]\n"
        "  Round trip of rpclb echo(1, \"abc\") between two processes, handler inline and on\n"
        "  the worker pool, against a raw Asio TCP ping-pong of the same bytes, measured in\n"
        "  the same run.\n"
        "  --count N    timed calls of each kind (default 20000)\n"
        "  --warmup N   untimed calls of each kind first (default 2000)\n"
        "  --rounds N   alternating raw/ws/inline/worker blocks the timed calls are split into (default 4)\n"
        "  --pin        pin client and servers to one CPU (default)\n"
        "  --no-pin     let the kernel place them\n"
        "  --cpu N      the CPU to pin to (default 0)\n"
        "  --no-call-channels  the client's blocking calls go on the mesh link (ClusterOptions::call_channels)\n"
        "  (--serve [--tls DIR], --raw-serve and --ws-serve are internal: run a server child)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        enum class Mode { client, serve, raw_serve, ws_serve } mode = Mode::client;
        std::optional<std::filesystem::path> tls_dir;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> const char* {
                if (i + 1 >= argc) die(a + " needs a value");
                return argv[++i];
            };
            if (a == "--count") o.count = bench::parse_count("--count", next(), 1);
            else if (a == "--warmup") o.warmup = bench::parse_count("--warmup", next(), 0);
            else if (a == "--rounds") o.rounds = bench::parse_count("--rounds", next(), 1);
            else if (a == "--cpu") o.cpu = static_cast<int>(bench::parse_count("--cpu", next(), 0));
            else if (a == "--pin") o.pin = true;
            else if (a == "--no-pin") o.pin = false;
            else if (a == "--no-call-channels") o.call_channels = false;
            else if (a == "--serve") mode = Mode::serve;
            else if (a == "--tls") tls_dir = next();
            else if (a == "--raw-serve") mode = Mode::raw_serve;
            else if (a == "--ws-serve") mode = Mode::ws_serve;
            else if (a == "--help" || a == "-h") return usage(), 0;
            else die("unknown option " + a + " (see --help)");
        }
        o.rounds = std::min(o.rounds, o.count);
        // Before any thread exists, so that every thread of this process inherits it. A
        // server child was pinned (or not) by the parent before it started.
        if (o.pin && mode == Mode::client) bench::pin_to(o.cpu);
        rpclb::log::init("warning");
        switch (mode) {
        case Mode::serve: return run_rpclb_server(tls_dir);
        case Mode::raw_serve: return bench::run_raw_echo_server();
        case Mode::ws_serve: return run_ws_server();
        case Mode::client:
            bench::install_signal_handlers();
            return run_client(o);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_roundtrip: %s\n", e.what());
        return 1;
    }
    return 1;
}
