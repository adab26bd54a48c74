// Round-trip latency of a small rpclb call against a raw Asio TCP ping-pong floor.
//
// One run measures, each against its own server in a separate process (the binary
// re-executes itself, by the path /proc/self/exe names, with an internal server flag):
//   rpclb          `echo(1, "abc")` through rpclb::Cluster::call() to a node registering
//                  bench.echo (--serve);
//   raw_tcp        the floor: the JSON text of those arguments (`[1,"abc"]`) with a 4-byte
//                  length prefix, echoed by a blocking Asio server (--raw-serve);
//   beast_ws_json  the same wire work as an rpclb call (masked WebSocket text frames,
//                  the request and response as JSON documents) done synchronously on one
//                  thread each side (--ws-serve): the cost of the protocol without rpclb's
//                  threads, strands, timers and futures.
// Each does `warmup` untimed calls then `count` timed sequential calls. The timed calls are
// split into `rounds` blocks taken in turn (raw, ws, rpclb, raw, ...) so that a burst of load
// from elsewhere on the machine hits every stack alike; the floor is always taken in the
// same run (STYLE.md rule 10).
//
// With --pin (the default) the client and the servers bind themselves to one CPU (0, or
// --cpu N) with sched_setaffinity before starting any thread, as `taskset -c 0` would
// (TOOLCHAIN.md "Measuring on this machine": cross-core wake-ups cost about 45 µs here and
// vary run to run). --no-pin leaves scheduling to the kernel.
//
// Output: `rpclb median_us=.. p99_us=..`, `raw_tcp median_us=.. p99_us=..`,
// `ratio <rpclb median / raw_tcp median>` and `beast_ws_json median_us=.. p99_us=..`;
// lines starting with '#' carry details, including CPU time and context switches per call
// of client and server (from /proc), which show where rpclb's time goes.
//
// Children are killed and reaped on every exit path: destructors close the child's stdin
// (it stops cleanly) then SIGKILL it after a grace period; SIGINT/SIGTERM/SIGHUP to the
// parent kill them too; and each child has PR_SET_PDEATHSIG so it dies with the parent
// even when the parent is killed with SIGKILL.
#include <rpclb/cluster.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* server_node = "bench_server@127.0.0.1";
constexpr const char* client_node = "bench_client@127.0.0.1";
constexpr const char* cookie = "rpc_roundtrip-bench";

json::array echo_args() { return json::array{1, "abc"}; }

[[noreturn]] void die(const std::string& what) { throw std::runtime_error(what); }

void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    // pid 0 = the calling thread; threads created afterwards inherit the mask.
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("sched_setaffinity(cpu " + std::to_string(cpu) + "): " + std::strerror(errno));
}

// The 1-minute load average: other work on the machine shows in the figures.
std::string load_average() {
    double one = 0;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &one) != 1) one = -1;
        std::fclose(f);
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", one);
    return text;
}

std::string affinity_text() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
    std::string out;
    for (int i = 0; i < CPU_SETSIZE; ++i)
        if (CPU_ISSET(i, &set)) out += (out.empty() ? "" : ",") + std::to_string(i);
    return out;
}

// Blocks until stdin reaches end of file: the parent closed its end or died.
void wait_for_stdin_eof() {
    char buf[64];
    for (;;) {
        const auto n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0) return;
        if (n < 0 && errno != EINTR) return;
    }
}

void announce_port(unsigned short port) {
    std::printf("PORT %u\n", static_cast<unsigned>(port));
    std::fflush(stdout);
}

// ---- servers (child processes) -----------------------------------------------------------

int run_rpclb_server() {
    rpclb::ClusterOptions options;
    options.name = server_node;
    options.cookie = cookie;
    rpclb::Cluster cluster(std::move(options));
    cluster.register_function("bench", "echo",
                              [](const json::array& args) -> rpclb::CallResult { return json::value(args); });
    cluster.start();
    announce_port(cluster.listen_endpoint()->port());
    wait_for_stdin_eof();
    cluster.stop();
    return 0;
}

int run_raw_server() {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    announce_port(acceptor.local_endpoint().port());
    // The echo loop blocks in socket reads; the main thread watches stdin and ends the
    // process when the parent goes away.
    std::thread echo([&] {
        std::vector<char> payload;
        for (;;) {
            tcp::socket socket(ioc);
            boost::system::error_code ec;
            acceptor.accept(socket, ec);
            if (ec) return;
            socket.set_option(tcp::no_delay(true));
            for (;;) {
                std::array<unsigned char, 4> header{};
                asio::read(socket, asio::buffer(header), ec);
                if (ec) break;
                const std::uint32_t size = std::uint32_t(header[0]) << 24 | std::uint32_t(header[1]) << 16 |
                                           std::uint32_t(header[2]) << 8 | std::uint32_t(header[3]);
                payload.resize(size);
                asio::read(socket, asio::buffer(payload), ec);
                if (ec) break;
                const std::array<asio::const_buffer, 2> reply{asio::buffer(header), asio::buffer(payload)};
                asio::write(socket, reply, ec);
                if (ec) break;
            }
        }
    });
    echo.detach();
    wait_for_stdin_eof();
    std::_Exit(0);  // the detached echo thread may be blocked in a read
}

// The same wire work as an rpclb call (a masked WebSocket text frame each way, the request
// parsed into a JSON document and the response serialized) with no threads, strands,
// timers or futures: what is left of rpclb's cost once its architecture is taken away.
int run_ws_server() {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    announce_port(acceptor.local_endpoint().port());
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
    wait_for_stdin_eof();
    std::_Exit(0);
}

// ---- child processes (parent side) -------------------------------------------------------

// Live children, for the signal handler (lock-free atomics are async-signal-safe).
std::array<std::atomic<pid_t>, 4> g_children{};

void track_child(pid_t pid) {
    for (auto& slot : g_children) {
        pid_t empty = 0;
        if (slot.compare_exchange_strong(empty, pid)) return;
    }
}

void untrack_child(pid_t pid) {
    for (auto& slot : g_children) {
        pid_t expected = pid;
        slot.compare_exchange_strong(expected, 0);
    }
}

extern "C" void on_fatal_signal(int sig) {
    for (auto& slot : g_children)
        if (const pid_t pid = slot.load(); pid > 0) ::kill(pid, SIGKILL);
    // Reap them too (waitpid is async-signal-safe), so that none is left a zombie.
    for (auto& slot : g_children)
        if (const pid_t pid = slot.load(); pid > 0) ::waitpid(pid, nullptr, 0);
    std::signal(sig, SIG_DFL);
    ::raise(sig);
}

/// A server process running this binary with `mode`; its stdout gives the port.
class Child {
public:
    Child(const std::string& mode, bool pin, int cpu) {
        int out[2], in[2];
        if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0)
            die(std::string("pipe: ") + std::strerror(errno));
        const auto parent = ::getpid();
        // The resolved path rather than /proc/self/exe itself: the child then has a proper
        // name in ps and perf, and running under valgrind --trace-children works (there,
        // /proc/self/exe is valgrind).
        std::error_code ec;
        auto self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
        if (ec) self = "/proc/self/exe";
        std::vector<std::string> args{self, mode, pin ? "--pin" : "--no-pin", "--cpu", std::to_string(cpu)};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_ = ::fork();
        if (pid_ < 0) die(std::string("fork: ") + std::strerror(errno));
        if (pid_ == 0) {
            // Dies with the parent, however the parent ends.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(1);
            ::dup2(in[0], STDIN_FILENO);
            ::dup2(out[1], STDOUT_FILENO);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        track_child(pid_);
        ::close(out[1]);
        ::close(in[0]);
        stdout_ = out[0];
        stdin_ = in[1];
        try {
            port_ = read_port(mode);
        } catch (...) {
            stop();  // the destructor won't run for a half-built object
            throw;
        }
    }

    ~Child() { stop(); }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    unsigned short port() const { return port_; }
    pid_t pid() const { return pid_; }

    /// Closes the child's stdin (it stops cleanly), then SIGKILL after 3 s; reaps it.
    void stop() noexcept {
        if (pid_ <= 0) return;
        if (stdin_ >= 0) ::close(stdin_);
        stdin_ = -1;
        const auto deadline = Clock::now() + std::chrono::seconds(3);
        int status = 0;
        for (;;) {
            const auto r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) break;
            if (Clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
                }
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        untrack_child(pid_);
        pid_ = -1;
        if (stdout_ >= 0) ::close(stdout_);
        stdout_ = -1;
    }

private:
    unsigned short read_port(const std::string& mode) {
        std::string line;
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (line.find('\n') == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) die(mode + " server did not print its port within 10 s");
            pollfd p{stdout_, POLLIN, 0};
            const int r = ::poll(&p, 1, static_cast<int>(left.count()));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) continue;
            char buf[64];
            const auto n = ::read(stdout_, buf, sizeof buf);
            if (n <= 0) die(mode + " server exited before printing its port");
            line.append(buf, static_cast<std::size_t>(n));
        }
        unsigned port = 0;
        if (std::sscanf(line.c_str(), "PORT %u", &port) != 1 || port == 0 || port > 65535)
            die(mode + " server printed \"" + line + "\" instead of its port");
        return static_cast<unsigned short>(port);
    }

    pid_t pid_ = -1;
    int stdout_ = -1;
    int stdin_ = -1;
    unsigned short port_ = 0;
};

// ---- cost per call -----------------------------------------------------------------------

/// CPU time and context switches of a whole process (all its threads), from /proc. They
/// show where a round trip's time goes: each hand-off between threads is a context switch.
struct ProcessCost {
    double user_us = 0;    // CPU time in user space
    double system_us = 0;  // CPU time in the kernel
    long voluntary = 0;    // context switches: blocked (a wait, a read)
    long involuntary = 0;  // context switches: preempted

    ProcessCost operator-(const ProcessCost& o) const {
        return {user_us - o.user_us, system_us - o.system_us, voluntary - o.voluntary,
                involuntary - o.involuntary};
    }
    ProcessCost& operator+=(const ProcessCost& o) {
        user_us += o.user_us;
        system_us += o.system_us;
        voluntary += o.voluntary;
        involuntary += o.involuntary;
        return *this;
    }
};

ProcessCost process_cost(pid_t pid) {
    ProcessCost cost;
    const std::string dir = "/proc/" + std::to_string(pid);
    if (std::FILE* f = std::fopen((dir + "/stat").c_str(), "r")) {
        // utime and stime are fields 14 and 15, after the ")" that ends the command name.
        char buf[1024];
        const auto n = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        buf[n] = '\0';
        if (const char* p = std::strrchr(buf, ')')) {
            unsigned long long utime = 0, stime = 0;
            const char* format = "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu";
            if (std::sscanf(p + 2, format, &utime, &stime) == 2) {
                const double tick_us = 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
                cost.user_us = static_cast<double>(utime) * tick_us;
                cost.system_us = static_cast<double>(stime) * tick_us;
            }
        }
    }
    // Per-thread counters: the process-level status line only counts the main thread.
    if (DIR* d = ::opendir((dir + "/task").c_str())) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            if (std::FILE* f = std::fopen((dir + "/task/" + e->d_name + "/status").c_str(), "r")) {
                char line[256];
                long v = 0;
                while (std::fgets(line, sizeof line, f)) {
                    if (std::sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) cost.voluntary += v;
                    else if (std::sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
                        cost.involuntary += v;
                }
                std::fclose(f);
            }
        }
        ::closedir(d);
    }
    return cost;
}

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

void rpclb_round_trip(rpclb::Cluster& cluster) {
    auto result = cluster.call(server_node, "bench", "echo", echo_args());
    if (!result) die("rpclb call failed: " + json::serialize(result.error().to_json()));
}

void wait_connected(rpclb::Cluster& cluster) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto nodes = cluster.connected_nodes();
        if (std::find(nodes.begin(), nodes.end(), server_node) != nodes.end()) return;
        if (Clock::now() > deadline) die("client did not connect to the rpclb server within 10 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
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
};

int run_client(const Options& o) {
    std::printf("# rpc_roundtrip count=%ld warmup=%ld rounds=%ld pin=%s affinity=%s nproc=%u loadavg=%s\n",
                o.count, o.warmup, o.rounds, o.pin ? "on" : "off", affinity_text().c_str(),
                std::thread::hardware_concurrency(), load_average().c_str());
    std::fflush(stdout);

    // Children are destroyed (stopped and reaped) after the clients below, on every path.
    Child raw_server("--raw-serve", o.pin, o.cpu);
    Child ws_server("--ws-serve", o.pin, o.cpu);
    Child rpclb_server("--serve", o.pin, o.cpu);

    RawClient raw(raw_server.port());
    WsClient ws(ws_server.port());
    std::printf("# payload %zu bytes: %s\n", raw.payload().size(), raw.payload().c_str());

    rpclb::ClusterOptions options;
    options.name = client_node;
    options.cookie = cookie;
    options.client = true;
    options.seeds = {"127.0.0.1:" + std::to_string(rpclb_server.port())};
    rpclb::Cluster cluster(std::move(options));
    cluster.start();
    wait_connected(cluster);

    // The echo must come back as sent, or the figures mean nothing.
    raw.round_trip();
    raw.check_echo();
    auto first = cluster.call(server_node, "bench", "echo", echo_args());
    if (!first || *first != json::value(echo_args()))
        die("rpclb echo returned " +
            (first ? json::serialize(*first) : json::serialize(first.error().to_json())));

    struct Kind {
        const char* label;
        pid_t server;
        std::function<void()> op;
        std::vector<std::int64_t> ns;
        PhaseCost cost;
    };
    // The floor first, then what is compared with it; the same order in every round.
    std::array<Kind, 3> kinds{{
        {"raw_tcp", raw_server.pid(), [&] { raw.round_trip(); }, {}, {}},
        {"beast_ws_json", ws_server.pid(), [&] { ws.round_trip(); }, {}, {}},
        {"rpclb", rpclb_server.pid(), [&] { rpclb_round_trip(cluster); }, {}, {}},
    }};
    for (auto& k : kinds) {
        k.ns.reserve(static_cast<std::size_t>(o.count));
        for (long i = 0; i < o.warmup; ++i) k.op();
    }
    for (long r = 0; r < o.rounds; ++r) {
        // Spread count over the rounds; the first rounds take the remainder.
        const long n = o.count / o.rounds + (r < o.count % o.rounds ? 1 : 0);
        for (auto& k : kinds) {
            const auto client0 = process_cost(::getpid());
            const auto server0 = process_cost(k.server);
            for (long i = 0; i < n; ++i) {
                const auto t0 = Clock::now();
                k.op();
                const auto t1 = Clock::now();
                k.ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
            }
            k.cost.client += process_cost(::getpid()) - client0;
            k.cost.server += process_cost(k.server) - server0;
        }
    }
    raw.check_echo();

    cluster.stop();  // while the server still answers the WebSocket close
    rpclb_server.stop();
    ws_server.stop();
    raw_server.stop();

    std::array<Summary, 3> s;
    for (std::size_t i = 0; i < kinds.size(); ++i) s[i] = summarize(std::move(kinds[i].ns));
    // The three lines the brief asks for come first and in a fixed form; '#' lines follow.
    std::printf("rpclb median_us=%.2f p99_us=%.2f\n", s[2].median_us, s[2].p99_us);
    std::printf("raw_tcp median_us=%.2f p99_us=%.2f\n", s[0].median_us, s[0].p99_us);
    std::printf("ratio %.2f\n", s[2].median_us / s[0].median_us);
    std::printf("beast_ws_json median_us=%.2f p99_us=%.2f\n", s[1].median_us, s[1].p99_us);
    for (std::size_t i = 0; i < kinds.size(); ++i) print_detail(kinds[i].label, s[i]);
    std::printf("# ratio_p99 %.2f (rpclb p99 / raw p99)\n", s[2].p99_us / s[0].p99_us);
    std::printf("# ratio_beast_ws_json %.2f (beast_ws_json median / raw median)\n",
                s[1].median_us / s[0].median_us);
    std::printf("# ratio_rpclb_vs_beast_ws_json %.2f (rpclb median / beast_ws_json median)\n",
                s[2].median_us / s[1].median_us);
    for (const auto& k : kinds) print_cost(k.label, k.cost, o.count);
    return 0;
}

long parse_count(const char* flag, const char* text, long min) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min)
        die(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got \"" + text + "\"");
    return v;
}

void usage() {
    std::puts(
        "rpc_roundtrip [--count N] [--warmup N] [--rounds N] [--pin|--no-pin] [--cpu N]\n"
        "  Round trip of rpclb echo(1, \"abc\") between two processes against a raw\n"
        "  Asio TCP ping-pong of the same bytes, measured in the same run.\n"
        "  --count N    timed calls of each kind (default 20000)\n"
        "  --warmup N   untimed calls of each kind first (default 2000)\n"
        "  --rounds N   alternating raw/rpclb blocks the timed calls are split into (default 4)\n"
        "  --pin        pin client and servers to one CPU (default)\n"
        "  --no-pin     let the kernel place them\n"
        "  --cpu N      the CPU to pin to (default 0)\n"
        "  (--serve, --raw-serve and --ws-serve are internal: run a server child)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        enum class Mode { client, serve, raw_serve, ws_serve } mode = Mode::client;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> const char* {
                if (i + 1 >= argc) die(a + " needs a value");
                return argv[++i];
            };
            if (a == "--count") o.count = parse_count("--count", next(), 1);
            else if (a == "--warmup") o.warmup = parse_count("--warmup", next(), 0);
            else if (a == "--rounds") o.rounds = parse_count("--rounds", next(), 1);
            else if (a == "--cpu") o.cpu = static_cast<int>(parse_count("--cpu", next(), 0));
            else if (a == "--pin") o.pin = true;
            else if (a == "--no-pin") o.pin = false;
            else if (a == "--serve") mode = Mode::serve;
            else if (a == "--raw-serve") mode = Mode::raw_serve;
            else if (a == "--ws-serve") mode = Mode::ws_serve;
            else if (a == "--help" || a == "-h") return usage(), 0;
            else die("unknown option " + a + " (see --help)");
        }
        o.rounds = std::min(o.rounds, o.count);
        // Before any thread exists, so that every thread of this process inherits it.
        if (o.pin) pin_to(o.cpu);
        rpclb::log::init("warning");
        switch (mode) {
        case Mode::serve: return run_rpclb_server();
        case Mode::raw_serve: return run_raw_server();
        case Mode::ws_serve: return run_ws_server();
        case Mode::client:
            std::signal(SIGINT, on_fatal_signal);
            std::signal(SIGTERM, on_fatal_signal);
            std::signal(SIGHUP, on_fatal_signal);
            // A dead server must surface as a socket error, not kill the client silently.
            std::signal(SIGPIPE, SIG_IGN);
            return run_client(o);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_roundtrip: %s\n", e.what());
        return 1;
    }
    return 1;
}
