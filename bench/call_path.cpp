// call_path: one blocking call through a balancer to another node, made in a window that
// `valgrind --tool=callgrind` can fence, so that the functions and files of rpclb the call
// crosses (caller and serving node together) can be counted: bash bench/call_path.sh.
//
// One process, two nodes on 127.0.0.1: a serving node `s` (member of balancer `w`,
// round_robin, serving bench.echo on its worker pool, or inline with --inline) and a client
// node `c` that routes through `w`. After warm-up calls, call_in_window() makes the calls
// counted (--calls, default 1); bench/call_path.sh counts from its entry to that of
// window_closed().
// --no-call-channels sends the client's blocking calls on the mesh link.
#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace {

[[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "call_path: %s\n", why.c_str());
    std::exit(1);
}

void call_once(rpclb::Cluster& client) {
    auto r = client.call("bench", "echo", boost::json::array{1, "abc"}, {.load_balancer = "w"});
    if (!r) die("the call failed: " + r.error().message);
}

// The calls callgrind counts, from the entry of call_in_window() to that of window_closed()
// (callgrind keeps one option of two given the same pattern, so the end has a function of
// its own). Both kept out of line so that their names stay in the binary.
[[gnu::noinline]] void call_in_window(rpclb::Cluster& client, long calls) {
    for (long i = 0; i < calls; ++i) call_once(client);
}

[[gnu::noinline]] void window_closed() { asm volatile(""); }

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path plugins =
        std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "plugins";
    bool channels = true, inline_handler = false;
    long calls = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--no-call-channels") channels = false;
        else if (a == "--inline") inline_handler = true;
        else if (a == "--calls" && i + 1 < argc) calls = std::atol(argv[++i]);
        else if (a.starts_with("--plugins=")) plugins = std::string(a.substr(10));
        else die("usage: call_path [--calls N] [--inline] [--no-call-channels] [--plugins=DIR]");
    }
    if (calls < 1) die("--calls must be at least 1");

    rpclb::ClusterOptions so;
    so.name = "s@127.0.0.1";
    so.cookie = "call-path";
    so.plugin_path = {plugins};
    rpclb::Cluster server(so);
    server.register_function(
        "bench", "echo", [](const boost::json::array& args) -> rpclb::CallResult { return boost::json::value(args); },
        rpclb::HandlerOptions{.run_inline = inline_handler});
    server.start();
    rpclb::LoadBalancerOptions lb;
    lb.name = "w";
    lb.algorithm = "round_robin";
    server.start_balancer(lb);

    rpclb::ClusterOptions co;
    co.name = "c@127.0.0.1";
    co.cookie = so.cookie;
    co.client = true;
    co.call_channels = channels;
    co.plugin_path = {plugins};
    co.seeds = {"127.0.0.1:" + std::to_string(server.listen_endpoint()->port())};
    rpclb::Cluster client(co);
    client.start();
    if (auto ready = client.wait_for_members("w", 1, std::chrono::seconds(10)); !ready)
        die("balancer w has no member: " + ready.error().message);
    for (int i = 0; i < 20; ++i) call_once(client);  // warm: a call channel open, caches filled
    // A window at a random moment of the probe interval, so that the runs of call_path.sh
    // do not all meet the failure detector's timer.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device{}() % 1000));

    call_in_window(client, calls);
    window_closed();
    std::printf("call_path: %ld call(s) counted, call channels %s, handler %s\n", calls, channels ? "on" : "off",
                inline_handler ? "inline" : "on the worker pool");
    client.stop();
    server.stop();
    return 0;
}
