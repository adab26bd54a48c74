// Calls per second with many calls in flight on one connection, against a raw pipelined
// TCP echo floor taken in the same run.
//
// Each against its own server process (this binary run again with an internal flag;
// bench/support/harness.hpp):
//   rpclb_throughput  a client node (ClusterOptions::client) keeps `--inflight` calls of
//                     bench.echo(ARGS) in flight to a node serving it inline (--serve),
//                     all on the one connection between them, through Cluster::async_call
//                     with a plain callback that issues the next call when one completes
//                     (no thread per call); the callback runs on the client's network
//                     thread (CallOptions::run_completion_inline), or with `--completion
//                     pool` on its worker pool (the default of async_call);
//   raw_pipelined     the floor: ARGS as JSON text with a 4-byte length prefix, `--inflight`
//                     of them outstanding on one socket, each sent with one write system
//                     call, by one client thread; echoed by a blocking server that reads
//                     what the socket holds and writes each message back with one write
//                     (--raw-serve).
// ARGS is each of `[1,"abc"]`, `["<1 KiB string>"]`, `["<64 KiB string>"]`. For each payload
// the stacks take turns (raw, rpclb, raw, ...) for `--rounds` blocks of `--duration-ms`
// each; a block stops issuing at its deadline and ends when the last call in flight
// completes. calls_per_s = completed calls / summed block time.
//
// Then, unless --no-tools, the command-line client: rpclb-call --concurrency `--inflight`
// against an rpclb-node (demo.echo, `[1,"abc"]`), both from --bin-dir; its own
// `calls_per_s` (the calls alone, no connect or setup) over the raw floor of the small
// payload is `rpclb_call_vs_raw`.
//
// Output: per payload N (bytes of ARGS' JSON text) `rpclb_throughput payload=N calls_per_s=X`
// and `raw_pipelined payload=N calls_per_s=X`; then `ratio_throughput` (small payload),
// `ratio_throughput_1k`, `ratio_throughput_64k` (rpclb / raw) and `rpclb_call_vs_raw`.
// '#' lines carry details: CPU time and context switches per call of client and server.
#include "support/harness.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using bench::Clock;
using bench::die;

namespace {

constexpr const char* server_node = "bench_server@127.0.0.1";
constexpr const char* client_node = "bench_client@127.0.0.1";
constexpr const char* tool_node = "bench_node@127.0.0.1";
constexpr const char* cookie = "rpc_throughput-bench";

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- servers (child processes) -----------------------------------------------------------

int run_rpclb_server() {
    rpclb::ClusterOptions options;
    options.name = server_node;
    options.cookie = cookie;
    rpclb::Cluster cluster(std::move(options));
    cluster.register_function(
        "bench", "echo", [](const json::array& args) -> rpclb::CallResult { return json::value(args); },
        rpclb::HandlerOptions{.run_inline = true});
    cluster.start();
    bench::announce_port(cluster.listen_endpoint()->port());
    bench::wait_for_stdin_eof();
    cluster.stop();
    return 0;
}

// ---- clients -----------------------------------------------------------------------------

/// What one block achieved.
struct Block {
    long calls = 0;
    Clock::duration elapsed{};
};

/// The floor: `inflight` length-prefixed messages outstanding on one socket, driven by
/// asynchronous operations on the calling thread (so that a full socket buffer in one
/// direction can never block the other). One async_write, hence one sendmsg, per message;
/// replies are read in whatever chunks the socket gives.
class RawPipeline {
public:
    explicit RawPipeline(unsigned short port) : socket_(ioc_), buffer_(256 * 1024) {
        socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        socket_.set_option(tcp::no_delay(true));
    }

    Block run(const std::string& payload, long inflight, std::chrono::milliseconds duration) {
        const auto n = static_cast<std::uint32_t>(payload.size());
        message_.assign({char(n >> 24), char(n >> 16), char(n >> 8), char(n)});
        message_ += payload;
        if (buffer_.size() < 2 * message_.size()) buffer_.resize(2 * message_.size());
        inflight_ = inflight;
        sent_ = received_ = 0;
        begin_ = end_ = 0;
        stopping_ = writing_ = false;
        checked_ = false;
        const auto start = Clock::now();
        deadline_ = start + duration;
        write_next();
        read_more();
        ioc_.restart();
        ioc_.run();
        if (error_) die("raw pipelined client: " + error_.message());
        return {received_, last_ - start};
    }

private:
    // A message counts as sent from the moment its write starts: its echo may be read
    // before the write's completion runs.
    void write_next() {
        if (writing_ || stopping_ || sent_ - received_ >= inflight_) return;
        writing_ = true;
        ++sent_;
        asio::async_write(socket_, asio::buffer(message_), [this](boost::system::error_code ec, std::size_t) {
            writing_ = false;
            if (ec) return fail(ec);
            write_next();
        });
    }

    void read_more() {
        socket_.async_read_some(asio::buffer(buffer_.data() + end_, buffer_.size() - end_),
                                [this](boost::system::error_code ec, std::size_t n) {
                                    if (ec) return fail(ec);
                                    end_ += n;
                                    consume();
                                });
    }

    // Counts every whole reply in the buffer, then reads on unless the block is over.
    void consume() {
        while (end_ - begin_ >= message_.size()) {
            if (!checked_) {
                if (std::memcmp(buffer_.data() + begin_, message_.data(), message_.size()) != 0)
                    die("raw server echoed other bytes");
                checked_ = true;
            }
            begin_ += message_.size();
            ++received_;
        }
        std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
        last_ = Clock::now();
        if (last_ >= deadline_) stopping_ = true;
        if (stopping_ && received_ == sent_) return;  // drained: run() returns
        write_next();
        read_more();
    }

    void fail(boost::system::error_code ec) {
        error_ = ec;
        ioc_.stop();
    }

    asio::io_context ioc_;
    tcp::socket socket_;
    std::string message_;
    std::vector<char> buffer_;
    std::size_t begin_ = 0, end_ = 0;  // unread reply bytes are buffer_[begin_, end_)
    long inflight_ = 0, sent_ = 0, received_ = 0;
    bool writing_ = false, stopping_ = false, checked_ = false;
    Clock::time_point deadline_, last_;
    boost::system::error_code error_;
};

/// `inflight` rpclb calls kept in flight by completion callbacks: each completion (on the
/// client's network thread, or with `pool` on its worker pool) issues the next call until
/// the block's deadline, then the block ends when the last one completes. Lives as long as
/// the Cluster's threads may call it.
class RpclbPipeline {
public:
    RpclbPipeline(rpclb::Cluster& cluster, bool pool) : cluster_(cluster) { options_.run_completion_inline = !pool; }

    Block run(const json::array& args, long inflight, std::chrono::milliseconds duration) {
        {
            std::lock_guard lock(mutex_);
            args_ = args;
            issued_ = completed_ = 0;
            stopping_ = false;
            checked_ = false;
            failure_.clear();
            start_ = Clock::now();
            deadline_ = start_ + duration;
            issued_ = inflight;
        }
        for (long i = 0; i < inflight; ++i) issue();
        std::unique_lock lock(mutex_);
        // Every call has a timeout (CallOptions, 10 s), so this wait ends.
        done_.wait(lock, [&] { return stopping_ && completed_ == issued_; });
        if (!failure_.empty()) die(failure_);
        return {completed_, last_ - start_};
    }

private:
    // issued_ was counted by the caller, under the lock.
    void issue() {
        cluster_.async_call(server_node, "bench", "echo", args_, options_,
                            [this](rpclb::CallResult result) { complete(std::move(result)); });
    }

    void complete(rpclb::CallResult result) {
        bool again = false;
        {
            std::lock_guard lock(mutex_);
            ++completed_;
            last_ = Clock::now();
            if (!result) {
                if (failure_.empty()) failure_ = "rpclb call failed: " + json::serialize(result.error().to_json());
                stopping_ = true;
            } else if (!checked_) {
                if (*result != json::value(args_)) failure_ = "rpclb echo returned " + json::serialize(*result);
                checked_ = true;
                stopping_ = stopping_ || !failure_.empty();
            }
            if (last_ >= deadline_) stopping_ = true;
            if (!stopping_) {
                ++issued_;
                again = true;
            } else if (completed_ == issued_) {
                done_.notify_all();
            }
        }
        if (again) issue();
    }

    rpclb::Cluster& cluster_;
    rpclb::CallOptions options_;
    std::mutex mutex_;
    std::condition_variable done_;
    json::array args_;  // written only while no call is in flight
    long issued_ = 0, completed_ = 0;
    bool stopping_ = false, checked_ = false;
    std::string failure_;
    Clock::time_point start_, deadline_, last_;
};

// ---- rpclb-call against rpclb-node -------------------------------------------------------

struct Options {
    long duration_ms = 1000;
    long rounds = 3;
    long inflight = 64;
    long tool_calls = 20000;
    bool tools = true;
    bool pool = false;  // --completion pool
    std::string bin_dir;
    std::string payload = "all";  // small, 1k, 64k or all
    bool pin = true;
    int cpu = 0;
};

/// rpclb-call's calls_per_s with `--concurrency inflight` against an rpclb-node's demo.echo.
double rpclb_call_rate(const Options& o, std::optional<int> cpu) {
    const std::filesystem::path bin = o.bin_dir;
    bench::ChildSpec node;
    node.argv = {(bin / "rpclb-node").string(), "--name", tool_node, "--listen", "127.0.0.1:0",
                 "--cookie", cookie, "--log-level", "warning"};
    node.cpu = cpu;
    node.stop_with_sigterm = true;
    bench::Child server(std::move(node));

    bench::ChildSpec call;
    call.argv = {(bin / "rpclb-call").string(), "--seed", "127.0.0.1:" + std::to_string(server.port()),
                 "--node", tool_node, "--cookie", cookie, "--count", std::to_string(o.tool_calls),
                 "--concurrency", std::to_string(o.inflight), "demo", "echo", "[1,\"abc\"]"};
    call.cpu = cpu;
    call.read_port = false;
    bench::Child client(std::move(call));
    const auto out = client.read_all(std::chrono::minutes(5));
    const int status = client.wait(std::chrono::seconds(10));
    std::printf("# rpclb-call --concurrency %ld --count %ld: %s", o.inflight, o.tool_calls, out.c_str());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("rpclb-call failed (status " + std::to_string(status) + ")");
    boost::system::error_code ec;
    const auto summary = json::parse(out, ec);
    const auto* rate = summary.is_object() ? summary.as_object().if_contains("calls_per_s") : nullptr;
    if (ec || !rate || !rate->is_number()) die("rpclb-call printed no calls_per_s: " + out);
    return rate->to_number<double>();
}

// ---- the run -----------------------------------------------------------------------------

struct Payload {
    json::array args;
    std::string text;  // args as JSON: what the raw floor sends
};

Payload make_payload(json::array args) {
    auto text = json::serialize(args);
    return {std::move(args), std::move(text)};
}

/// `["xxx...x"]` with a string of `size` bytes.
Payload string_payload(std::size_t size) {
    json::array args;
    args.emplace_back(json::string(size, 'x'));
    return make_payload(std::move(args));
}

/// Sum of a stack's blocks for one payload.
struct Tally {
    long calls = 0;
    Clock::duration elapsed{};
    bench::ProcessCost client, server;
    double rate() const { return static_cast<double>(calls) / seconds(elapsed); }
};

void print_cost(const char* label, std::size_t payload, const Tally& t) {
    const double n = static_cast<double>(t.calls);
    std::printf("# %s payload=%zu calls=%ld per_call client_cpu_us=%.2f client_csw=%.3f server_cpu_us=%.2f"
                " server_csw=%.3f (cpu = user+system from clock ticks; csw = voluntary+involuntary)\n",
                label, payload, t.calls, (t.client.user_us + t.client.system_us) / n,
                static_cast<double>(t.client.switches()) / n, (t.server.user_us + t.server.system_us) / n,
                static_cast<double>(t.server.switches()) / n);
}

int run_client(const Options& o) {
    bench::print_run_header("rpc_throughput",
                            "duration_ms=" + std::to_string(o.duration_ms) + " rounds=" +
                                std::to_string(o.rounds) + " inflight=" + std::to_string(o.inflight) +
                                " completion=" + (o.pool ? "pool" : "inline"),
                            o.pin);
    const std::optional<int> cpu = o.pin ? std::optional<int>(o.cpu) : std::nullopt;

    // The payloads to run and the ratio each prints (--payload picks one).
    std::vector<Payload> payloads;
    std::vector<const char*> names;
    if (o.payload == "all" || o.payload == "small") {
        payloads.push_back(make_payload({1, "abc"}));
        names.push_back("ratio_throughput");
    }
    if (o.payload == "all" || o.payload == "1k") {
        payloads.push_back(string_payload(1024));
        names.push_back("ratio_throughput_1k");
    }
    if (o.payload == "all" || o.payload == "64k") {
        payloads.push_back(string_payload(64 * 1024));
        names.push_back("ratio_throughput_64k");
    }

    // Children are destroyed (stopped and reaped) after the clients below, on every path.
    bench::Child raw_server(bench::self_child("--raw-serve", cpu));
    bench::Child rpclb_server(bench::self_child("--serve", cpu));

    RawPipeline raw(raw_server.port());
    rpclb::ClusterOptions options;
    options.name = client_node;
    options.cookie = cookie;
    options.client = true;
    options.seeds = {"127.0.0.1:" + std::to_string(rpclb_server.port())};
    rpclb::Cluster cluster(std::move(options));
    cluster.start();
    bench::wait_connected(cluster, server_node);
    RpclbPipeline rpc(cluster, o.pool);

    const std::chrono::milliseconds duration(o.duration_ms);
    std::vector<std::array<Tally, 2>> tallies(payloads.size());  // [0] raw, [1] rpclb
    for (std::size_t p = 0; p < payloads.size(); ++p) {
        // Warm-up: connections, buffers and allocator caches at this size.
        raw.run(payloads[p].text, o.inflight, duration / 5);
        rpc.run(payloads[p].args, o.inflight, duration / 5);
        for (long r = 0; r < o.rounds; ++r) {
            for (int k = 0; k < 2; ++k) {
                const pid_t server = k == 0 ? raw_server.pid() : rpclb_server.pid();
                const auto client0 = bench::process_cost(::getpid());
                const auto server0 = bench::process_cost(server);
                const auto block = k == 0 ? raw.run(payloads[p].text, o.inflight, duration)
                                          : rpc.run(payloads[p].args, o.inflight, duration);
                auto& t = tallies[p][static_cast<std::size_t>(k)];
                t.client += bench::process_cost(::getpid()) - client0;
                t.server += bench::process_cost(server) - server0;
                t.calls += block.calls;
                t.elapsed += block.elapsed;
            }
        }
    }
    cluster.stop();  // while the server still answers the WebSocket close
    rpclb_server.stop();
    raw_server.stop();

    // The lines to parse first, in a fixed form; '#' lines follow. rpclb-call runs after
    // the lines above are out, so that a missing or failing tool loses nothing else.
    for (std::size_t p = 0; p < payloads.size(); ++p) {
        std::printf("rpclb_throughput payload=%zu calls_per_s=%.0f\n", payloads[p].text.size(), tallies[p][1].rate());
        std::printf("raw_pipelined payload=%zu calls_per_s=%.0f\n", payloads[p].text.size(), tallies[p][0].rate());
    }
    for (std::size_t p = 0; p < payloads.size(); ++p)
        std::printf("%s %.2f\n", names[p], tallies[p][1].rate() / tallies[p][0].rate());
    std::fflush(stdout);
    std::optional<double> tool_rate;
    if (o.tools && o.payload == "all") tool_rate = rpclb_call_rate(o, cpu);
    // The tool's floor is the small payload's raw echo.
    if (tool_rate && o.payload == "all") std::printf("rpclb_call_vs_raw %.2f\n", *tool_rate / tallies[0][0].rate());
    for (std::size_t p = 0; p < payloads.size(); ++p) {
        print_cost("raw_pipelined", payloads[p].text.size(), tallies[p][0]);
        print_cost("rpclb_throughput", payloads[p].text.size(), tallies[p][1]);
    }
    if (tool_rate) std::printf("# rpclb_call calls_per_s=%.0f\n", *tool_rate);
    return 0;
}

void usage() {
    std::puts(
        "rpc_throughput [--duration-ms N] [--rounds N] [--inflight N] [--pin|--no-pin] [--cpu N]\n"
        "               [--bin-dir DIR] [--tool-calls N] [--no-tools] [--payload P]\n"
        "               [--completion inline|pool]\n"
        "  Calls per second with N calls in flight on one connection: rpclb (async_call,\n"
        "  inline echo) against a raw pipelined TCP echo, for three payload sizes.\n"
        "  --duration-ms N  length of each timed block (default 1000)\n"
        "  --rounds N       alternating raw/rpclb blocks per payload (default 3)\n"
        "  --inflight N     calls in flight (default 64)\n"
        "  --completion C   where rpclb's completions run: inline (the network thread,\n"
        "                   CallOptions::run_completion_inline; default) or pool (the worker pool)\n"
        "  --pin            pin client and servers to one CPU (default)\n"
        "  --no-pin         let the kernel place them\n"
        "  --cpu N          the CPU to pin to (default 0)\n"
        "  --bin-dir DIR    where rpclb-node and rpclb-call are (default: ../bin from here)\n"
        "  --tool-calls N   calls rpclb-call makes (default 20000)\n"
        "  --no-tools       skip the rpclb-call run\n"
        "  --payload P      run one payload only: small, 1k or 64k (default all; rpclb_call_vs_raw\n"
        "                   needs all)\n"
        "  (--serve and --raw-serve are internal: run a server child)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        enum class Mode { client, serve, raw_serve } mode = Mode::client;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> const char* {
                if (i + 1 >= argc) die(a + " needs a value");
                return argv[++i];
            };
            if (a == "--duration-ms") o.duration_ms = bench::parse_count("--duration-ms", next(), 10);
            else if (a == "--rounds") o.rounds = bench::parse_count("--rounds", next(), 1);
            else if (a == "--inflight") o.inflight = bench::parse_count("--inflight", next(), 1);
            else if (a == "--tool-calls") o.tool_calls = bench::parse_count("--tool-calls", next(), 1);
            else if (a == "--bin-dir") o.bin_dir = next();
            else if (a == "--no-tools") o.tools = false;
            else if (a == "--completion") {
                const std::string c = next();
                if (c != "inline" && c != "pool") die("--completion takes inline or pool, not " + c);
                o.pool = c == "pool";
            }
            else if (a == "--payload") {
                o.payload = next();
                if (o.payload != "all" && o.payload != "small" && o.payload != "1k" && o.payload != "64k")
                    die("--payload takes small, 1k, 64k or all, not " + o.payload);
            }
            else if (a == "--cpu") o.cpu = static_cast<int>(bench::parse_count("--cpu", next(), 0));
            else if (a == "--pin") o.pin = true;
            else if (a == "--no-pin") o.pin = false;
            else if (a == "--serve") mode = Mode::serve;
            else if (a == "--raw-serve") mode = Mode::raw_serve;
            else if (a == "--help" || a == "-h") return usage(), 0;
            else die("unknown option " + a + " (see --help)");
        }
        if (o.bin_dir.empty())
            o.bin_dir = (std::filesystem::path(bench::self_path()).parent_path().parent_path() / "bin").string();
        // Before any thread exists, so that every thread of this process inherits it. A
        // server child was pinned (or not) by the parent before it started.
        if (o.pin && mode == Mode::client) bench::pin_to(o.cpu);
        rpclb::log::init("warning");
        switch (mode) {
        case Mode::serve: return run_rpclb_server();
        case Mode::raw_serve: return bench::run_raw_echo_server();
        case Mode::client: bench::install_signal_handlers(); return run_client(o);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rpc_throughput: %s\n", e.what());
        return 1;
    }
    return 1;
}
