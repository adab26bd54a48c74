// What the C++ peer benchmarks share beyond bench/support/harness.hpp: their options, a
// server child process that is always reaped, nearest-rank percentiles and a throughput
// window.
//
// A server child is this same binary run again with a server flag. It binds 127.0.0.1 port
// 0, prints "PORT <n>" on stdout and serves until its stdin reaches end of file, which
// happens when the parent closes the pipe or dies (PR_SET_PDEATHSIG covers SIGKILL too).
#pragma once

#include "../support/harness.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace peer_bench {

using Clock = std::chrono::steady_clock;

// Pinning, the load average, the port announcement and fail() are the harness's, shared
// with rpclb's own benches.
using bench::load_average;
using bench::pin_to;
[[noreturn]] inline void fail(const std::string& what) { bench::die(what); }

/// Options every peer binary takes: --pin/--no-pin, --cpu N, --count N, --warmup N,
/// --seconds S, --inflight N, and the internal server flag.
struct Options {
    long count = 20000;   // timed sequential calls
    long warmup = 2000;   // untimed calls before them
    double seconds = 3;   // throughput window, after a 0.5 s warm-up
    long inflight = 64;   // calls outstanding in the throughput run
    bool pin = true;
    int cpu = 0;
    std::string serve;    // non-empty in a server child: which server to run
};

inline long parse_long(const std::string& flag, const char* text, long min) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min)
        fail(flag + " needs an integer >= " + std::to_string(min) + ", got \"" + text + "\"");
    return v;
}

/// Parses argv into Options; `servers` lists the accepted --serve values. Returns false
/// after printing `usage` for --help.
inline bool parse_options(int argc, char** argv, const std::vector<std::string>& servers, const char* usage,
                          Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--count") o.count = parse_long(a, value(), 1);
        else if (a == "--warmup") o.warmup = parse_long(a, value(), 0);
        else if (a == "--inflight") o.inflight = parse_long(a, value(), 1);
        else if (a == "--cpu") o.cpu = static_cast<int>(parse_long(a, value(), 0));
        else if (a == "--seconds") {
            const char* text = value();
            o.seconds = std::strtod(text, nullptr);
            if (!(o.seconds > 0)) fail("--seconds needs a positive number, got \"" + std::string(text) + "\"");
        } else if (a == "--pin") o.pin = true;
        else if (a == "--no-pin") o.pin = false;
        else if (a == "--serve") {
            o.serve = value();
            if (std::find(servers.begin(), servers.end(), o.serve) == servers.end())
                fail("unknown server " + o.serve);
        } else if (a == "--help" || a == "-h") {
            std::puts(usage);
            return false;
        } else fail("unknown option " + a + " (see --help)");
    }
    return true;
}

/// Server side: print the port for the parent, then block until the parent goes away.
inline void announce_port_and_wait(unsigned port) {
    bench::announce_port(static_cast<unsigned short>(port));
    bench::wait_for_stdin_eof();
}

namespace detail {
// Live children for the signal handler (lock-free atomics are async-signal-safe).
inline std::atomic<pid_t> children[4];

extern "C" inline void kill_children_and_reraise(int sig) {
    for (auto& c : children)
        if (const pid_t pid = c.load(); pid > 0) ::kill(pid, SIGKILL);
    for (auto& c : children)
        if (const pid_t pid = c.load(); pid > 0) ::waitpid(pid, nullptr, 0);
    std::signal(sig, SIG_DFL);
    ::raise(sig);
}
}  // namespace detail

/// Makes SIGINT, SIGTERM and SIGHUP to the client kill and reap its servers first.
inline void reap_children_on_signals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, detail::kill_children_and_reraise);
    std::signal(SIGPIPE, SIG_IGN);
}

/// A server child: this binary run with `--serve <server>` and the same pinning.
/// The destructor closes the child's stdin, waits up to 3 s, then SIGKILLs; it always reaps.
class ServerChild {
public:
    ServerChild(const std::string& server, const Options& o) {
        int to_child[2], from_child[2];
        if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0)
            fail(std::string("pipe2: ") + std::strerror(errno));
        char self[4096];
        const auto len = ::readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) fail("cannot read /proc/self/exe");
        self[len] = '\0';
        std::vector<std::string> args{self, "--serve", server, o.pin ? "--pin" : "--no-pin", "--cpu",
                                      std::to_string(o.cpu)};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        const pid_t parent = ::getpid();
        pid_ = ::fork();
        if (pid_ < 0) fail(std::string("fork: ") + std::strerror(errno));
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(1);
            ::dup2(to_child[0], STDIN_FILENO);
            ::dup2(from_child[1], STDOUT_FILENO);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        for (auto& slot : detail::children) {
            pid_t empty = 0;
            if (slot.compare_exchange_strong(empty, pid_)) break;
        }
        ::close(to_child[0]);
        ::close(from_child[1]);
        stdin_ = to_child[1];
        stdout_ = from_child[0];
        try {
            port_ = read_port(server);
        } catch (...) {
            stop();
            throw;
        }
    }
    ~ServerChild() { stop(); }
    ServerChild(const ServerChild&) = delete;
    ServerChild& operator=(const ServerChild&) = delete;

    unsigned short port() const { return port_; }

    void stop() noexcept {
        if (pid_ <= 0) return;
        ::close(stdin_);
        const auto deadline = Clock::now() + std::chrono::seconds(3);
        for (;;) {
            const pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) break;
            if (Clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
                }
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        for (auto& slot : detail::children) {
            pid_t mine = pid_;
            slot.compare_exchange_strong(mine, 0);
        }
        ::close(stdout_);
        pid_ = -1;
    }

private:
    unsigned short read_port(const std::string& server) {
        std::string line;
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (line.find('\n') == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) fail(server + " server printed no port within 10 s");
            pollfd p{stdout_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char buf[128];
            const auto n = ::read(stdout_, buf, sizeof buf);
            if (n <= 0) fail(server + " server exited before printing its port");
            line.append(buf, static_cast<std::size_t>(n));
        }
        unsigned port = 0;
        if (std::sscanf(line.c_str(), "PORT %u", &port) != 1 || port == 0 || port > 65535)
            fail(server + " server printed \"" + line + "\" instead of PORT <n>");
        return static_cast<unsigned short>(port);
    }

    pid_t pid_ = -1;
    int stdin_ = -1, stdout_ = -1;
    unsigned short port_ = 0;
};

/// Median and p99 (nearest rank) in µs of per-call durations in ns.
struct Latency {
    double median_us, p99_us;
};

inline Latency latency_of(std::vector<std::int64_t> ns) {
    if (ns.empty()) fail("no timed calls");
    std::sort(ns.begin(), ns.end());
    auto rank = [&](double p) {
        const auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(ns.size())));
        return static_cast<double>(ns[std::clamp<std::size_t>(r, 1, ns.size()) - 1]) / 1000.0;
    };
    return {rank(0.50), rank(0.99)};
}

/// Times `count` sequential calls of `op` after `warmup` untimed ones.
template <class Op>
Latency time_sequential(const Options& o, Op&& op) {
    for (long i = 0; i < o.warmup; ++i) op();
    std::vector<std::int64_t> ns;
    ns.reserve(static_cast<std::size_t>(o.count));
    for (long i = 0; i < o.count; ++i) {
        const auto t0 = Clock::now();
        op();
        ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    }
    return latency_of(std::move(ns));
}

/// Calls per second from a completion counter that something else advances: sleeps through
/// 0.5 s of warm-up, then reads the counter across `seconds`.
inline double rate_over_window(const std::atomic<std::uint64_t>& done, double seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto c0 = done.load();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const auto c1 = done.load();
    const auto t1 = Clock::now();
    return static_cast<double>(c1 - c0) / std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace peer_bench
