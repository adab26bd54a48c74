// Resident memory of a node: idle, and what each connected peer adds.
//
// The measured node ("hub") is this binary run again with --hub (bench/support/harness.hpp):
// a started Cluster listening on 127.0.0.1 with the default options and one registered
// function, which prints the number of nodes it is connected to whenever it changes. Its
// RSS (VmRSS of /proc/PID/status) is read
//   idle   `--settle-ms` after it started, with no connection;
//   loaded `--settle-ms` after `--peers` peer nodes, each a separate process (--peer: a
//          Cluster with default options seeded with the hub), are all connected to it,
//          keep-alive pings flowing.
//   first  `--settle-ms` after the first peer connected, before the others start.
// rss_per_peer_kib = (loaded - idle) / peers, of RssAnon: the memory the node allocates for
// its peers (buffers, tables, OpenSSL state). RssFile, the pages of shared libraries
// (libcrypto, Beast's connection path) that the first connection touches for the first
// time, is a one-time cost shared with every process mapping those libraries, not memory
// per peer; `# rss_per_peer_total_kib` gives the growth of both together. The detail lines
// split the first peer's share from the marginal cost of each further peer,
// (loaded - first) / (peers - 1). Unless
// --no-tools, an rpclb-node from --bin-dir is started the same way and its idle RSS given
// as a detail line.
//
// Output: `rss_idle_mib X`, `rss_per_peer_kib X`; '#' lines carry RssAnon (heap, stacks),
// RssFile (library pages) and the thread count at each point.
#include "support/harness.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using bench::Clock;
using bench::die;

namespace {

constexpr const char* hub_node = "bench_hub@127.0.0.1";
constexpr const char* cookie = "memory-bench";

// ---- nodes (child processes) -------------------------------------------------------------

rpclb::ClusterOptions node_options(std::string name) {
    rpclb::ClusterOptions options;
    options.name = std::move(name);
    options.cookie = cookie;
    return options;
}

void register_echo(rpclb::Cluster& cluster) {
    cluster.register_function("bench", "echo",
                              [](const boost::json::array& args) -> rpclb::CallResult { return boost::json::value(args); });
}

/// The measured node: prints `PEERS n` each time the number of connected nodes changes,
/// until its stdin closes.
int run_hub() {
    rpclb::Cluster cluster(node_options(hub_node));
    register_echo(cluster);
    cluster.start();
    bench::announce_port(cluster.listen_endpoint()->port());
    std::thread watcher([&] {
        std::size_t last = 0;
        for (;;) {
            const auto n = cluster.connected_nodes().size();
            if (n != last) {
                last = n;
                std::printf("PEERS %zu\n", n);
                std::fflush(stdout);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    watcher.detach();
    bench::wait_for_stdin_eof();
    std::_Exit(0);  // the watcher never returns; the process holds nothing to flush
}

int run_peer(int index, unsigned short hub_port) {
    auto options = node_options("bench_peer" + std::to_string(index) + "@127.0.0.1");
    options.seeds = {"127.0.0.1:" + std::to_string(hub_port)};
    rpclb::Cluster cluster(std::move(options));
    register_echo(cluster);
    cluster.start();
    bench::wait_for_stdin_eof();
    cluster.stop();
    return 0;
}

// ---- the run -----------------------------------------------------------------------------

struct Options {
    long peers = 20;
    long settle_ms = 2000;
    bool tools = true;
    std::string bin_dir;
    bool pin = false;
    int cpu = 0;
};

/// RSS and friends of one process at one moment, in KiB (threads: a count).
struct Memory {
    long rss = 0, anon = 0, file = 0, threads = 0;
};

Memory memory_of(pid_t pid) {
    return {bench::status_field(pid, "VmRSS"), bench::status_field(pid, "RssAnon"),
            bench::status_field(pid, "RssFile"), bench::status_field(pid, "Threads")};
}

void print_memory(const char* label, const Memory& m) {
    std::printf("# %s rss_kib=%ld rss_anon_kib=%ld rss_file_kib=%ld threads=%ld\n", label, m.rss, m.anon, m.file,
                m.threads);
}

// Reads the hub's `PEERS n` lines until n reaches `want`.
void wait_for_peers(bench::Child& hub, long want) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    long have = 0;
    while (have < want) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) break;
        const auto line = hub.read_line(left);
        if (std::sscanf(line.c_str(), "PEERS %ld", &have) != 1) die("hub printed \"" + line + "\"");
    }
    if (have < want)
        die("only " + std::to_string(have) + " of " + std::to_string(want) + " peers connected within 60 s");
}

int run_client(const Options& o) {
    bench::print_run_header("memory",
                            "peers=" + std::to_string(o.peers) + " settle_ms=" + std::to_string(o.settle_ms), o.pin);
    const std::optional<int> cpu = o.pin ? std::optional<int>(o.cpu) : std::nullopt;
    const std::chrono::milliseconds settle(o.settle_ms);

    bench::Child hub(bench::self_child("--hub", cpu));
    std::this_thread::sleep_for(settle);
    const auto idle = memory_of(hub.pid());

    std::vector<std::unique_ptr<bench::Child>> peers;
    auto add_peers = [&](long until) {
        for (auto i = static_cast<long>(peers.size()); i < until; ++i) {
            auto spec = bench::self_child("--peer", cpu, {std::to_string(i), std::to_string(hub.port())});
            spec.read_port = false;
            peers.push_back(std::make_unique<bench::Child>(std::move(spec)));
        }
        wait_for_peers(hub, until);
        std::this_thread::sleep_for(settle);
    };
    add_peers(1);
    const auto first = memory_of(hub.pid());
    add_peers(o.peers);
    const auto loaded = memory_of(hub.pid());
    long peer_rss = 0;
    for (const auto& p : peers) peer_rss += memory_of(p->pid()).rss;
    peers.clear();  // stopped and reaped
    hub.stop();

    std::optional<Memory> tool;
    if (o.tools) {
        bench::ChildSpec spec;
        spec.argv = {(std::filesystem::path(o.bin_dir) / "rpclb-node").string(), "--name", "bench_node@127.0.0.1",
                     "--listen", "127.0.0.1:0", "--cookie", cookie, "--log-level", "warning"};
        spec.cpu = cpu;
        spec.stop_with_sigterm = true;
        bench::Child node(std::move(spec));
        std::this_thread::sleep_for(settle);
        tool = memory_of(node.pid());
    }

    std::printf("rss_idle_mib %.1f\n", static_cast<double>(idle.rss) / 1024.0);
    std::printf("rss_per_peer_kib %.1f\n",
                static_cast<double>(loaded.anon - idle.anon) / static_cast<double>(o.peers));
    std::printf("# rss_per_peer_total_kib %.1f (RssAnon + RssFile)\n",
                static_cast<double>(loaded.rss - idle.rss) / static_cast<double>(o.peers));
    print_memory("hub_idle", idle);
    print_memory("hub_with_1_peer", first);
    print_memory(("hub_with_" + std::to_string(o.peers) + "_peers").c_str(), loaded);
    std::printf("# rss_first_peer_kib %ld (anon %ld, file %ld)\n", first.rss - idle.rss, first.anon - idle.anon,
                first.file - idle.file);
    if (o.peers > 1) {
        const double more = static_cast<double>(o.peers - 1);
        std::printf("# rss_marginal_per_peer_kib %.1f (anon %.1f, file %.1f; peers 2..%ld)\n",
                    static_cast<double>(loaded.rss - first.rss) / more,
                    static_cast<double>(loaded.anon - first.anon) / more,
                    static_cast<double>(loaded.file - first.file) / more, o.peers);
    }
    std::printf("# peer_node mean_rss_kib=%.0f (each peer is connected to the hub and to every other peer)\n",
                static_cast<double>(peer_rss) / static_cast<double>(o.peers));
    if (tool) print_memory("rpclb_node_idle", *tool);
    return 0;
}

void usage() {
    std::puts(
        "memory [--peers N] [--settle-ms N] [--pin|--no-pin] [--cpu N] [--bin-dir DIR] [--no-tools]\n"
        "  Resident memory of an idle started node and its growth per connected peer node.\n"
        "  --peers N       peer node processes connected to the measured node (default 20)\n"
        "  --settle-ms N   wait before each reading (default 2000)\n"
        "  --pin           run every process on one CPU\n"
        "  --no-pin        let the kernel place them (default)\n"
        "  --cpu N         the CPU to pin to (default 0)\n"
        "  --bin-dir DIR   where rpclb-node is (default: ../bin from here)\n"
        "  --no-tools      skip the rpclb-node reading\n"
        "  (--hub and --peer I PORT are internal: run a node child)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Options o;
        enum class Mode { client, hub, peer } mode = Mode::client;
        int peer_index = 0;
        unsigned short hub_port = 0;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> const char* {
                if (i + 1 >= argc) die(a + " needs a value");
                return argv[++i];
            };
            if (a == "--peers") o.peers = bench::parse_count("--peers", next(), 1);
            else if (a == "--settle-ms") o.settle_ms = bench::parse_count("--settle-ms", next(), 0);
            else if (a == "--bin-dir") o.bin_dir = next();
            else if (a == "--no-tools") o.tools = false;
            else if (a == "--cpu") o.cpu = static_cast<int>(bench::parse_count("--cpu", next(), 0));
            else if (a == "--pin") o.pin = true;
            else if (a == "--no-pin") o.pin = false;
            else if (a == "--hub") mode = Mode::hub;
            else if (a == "--peer") {
                mode = Mode::peer;
                peer_index = static_cast<int>(bench::parse_count("--peer", next(), 0));
                hub_port = static_cast<unsigned short>(bench::parse_count("--peer", next(), 1));
            } else if (a == "--help" || a == "-h") return usage(), 0;
            else die("unknown option " + a + " (see --help)");
        }
        if (o.peers > 60) die("--peers must be at most 60 (the harness tracks 64 children)");
        if (o.bin_dir.empty())
            o.bin_dir = (std::filesystem::path(bench::self_path()).parent_path().parent_path() / "bin").string();
        if (o.pin && mode == Mode::client) bench::pin_to(o.cpu);
        rpclb::log::init("warning");
        switch (mode) {
        case Mode::hub: return run_hub();
        case Mode::peer: return run_peer(peer_index, hub_port);
        case Mode::client: bench::install_signal_handlers(); return run_client(o);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "memory: %s\n", e.what());
        return 1;
    }
    return 1;
}
