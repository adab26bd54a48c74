// What the process benchmarks share: server children (this binary run again with an
// internal flag, or another program such as rpclb-node), CPU pinning, reaping children on
// every exit path, per-process CPU time, context switches and RSS from /proc, and the
// length-prefixed raw TCP echo server that serves as the floor.
//
// Children are killed and reaped on every exit path: Child's destructor closes the child's
// stdin (a server made by this harness stops cleanly on end of file; rpclb-node gets
// SIGTERM) then SIGKILLs it after a grace period; SIGINT/SIGTERM/SIGHUP to the parent kill
// and reap them (install_signal_handlers); and each child has PR_SET_PDEATHSIG so it dies
// with the parent even when the parent is killed with SIGKILL.
//
// Header-only on purpose: each bench is one executable made from one .cpp (bench/CMakeLists
// and the Jamroot glob bench/*.cpp), and these functions are used by several of them.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

using Clock = std::chrono::steady_clock;

[[noreturn]] inline void die(const std::string& what) { throw std::runtime_error(what); }

/// Binds the calling thread (and every thread it creates afterwards) to `cpu`, as
/// `taskset -c CPU` would. Throws std::runtime_error when the kernel refuses.
inline void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("sched_setaffinity(cpu " + std::to_string(cpu) + "): " + std::strerror(errno));
}

/// The 1-minute load average as text ("7.88"): other work on the machine shows in figures.
inline std::string load_average() {
    double one = 0;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &one) != 1) one = -1;
        std::fclose(f);
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", one);
    return text;
}

/// The CPUs this thread may run on, as "0" or "0,1".
inline std::string affinity_text() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
    std::string out;
    for (int i = 0; i < CPU_SETSIZE; ++i)
        if (CPU_ISSET(i, &set)) out += (out.empty() ? "" : ",") + std::to_string(i);
    return out;
}

/// The `# NAME key=value ...` header line every bench starts with.
inline void print_run_header(const std::string& name, const std::string& settings, bool pin) {
    std::printf("# %s %s pin=%s affinity=%s nproc=%u loadavg=%s\n", name.c_str(), settings.c_str(),
                pin ? "on" : "off", affinity_text().c_str(), std::thread::hardware_concurrency(),
                load_average().c_str());
    std::fflush(stdout);
}

// ---- the child side --------------------------------------------------------------------

/// Blocks until stdin reaches end of file: the parent closed its end or died.
inline void wait_for_stdin_eof() {
    char buf[64];
    for (;;) {
        const auto n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0) return;
        if (n < 0 && errno != EINTR) return;
    }
}

/// Tells the parent (Child's constructor) the port this server child listens on.
inline void announce_port(unsigned short port) {
    std::printf("PORT %u\n", static_cast<unsigned>(port));
    std::fflush(stdout);
}

/// Polls until `cluster` (an rpclb::Cluster: a template so that the peer benches can
/// include this header without rpclb) is connected to `node`; dies after 10 s.
template <class Cluster>
void wait_connected(Cluster& cluster, const std::string& node) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto nodes = cluster.connected_nodes();
        for (const auto& n : nodes)
            if (n == node) return;
        if (Clock::now() > deadline) die("client did not connect to " + node + " within 10 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

/// The floor: a blocking Asio echo of messages framed by a 4-byte big-endian length.
/// Reads as much as the socket holds into one buffer and sends each whole message back
/// with one write system call, so that it serves a ping-pong client and a client with
/// many messages in flight alike. One connection at a time; returns when stdin closes.
inline int run_raw_echo_server() {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    announce_port(acceptor.local_endpoint().port());
    // The echo loop blocks in socket reads; the main thread watches stdin and ends the
    // process when the parent goes away.
    std::thread echo([&] {
        std::vector<unsigned char> buffer(256 * 1024);
        for (;;) {
            tcp::socket socket(ioc);
            boost::system::error_code ec;
            acceptor.accept(socket, ec);
            if (ec) return;
            socket.set_option(tcp::no_delay(true));
            std::size_t begin = 0, end = 0;  // unread bytes are buffer[begin, end)
            for (;;) {
                const auto n = socket.read_some(asio::buffer(buffer.data() + end, buffer.size() - end), ec);
                if (ec) break;
                end += n;
                // Echo every complete message in the buffer, one write each.
                while (end - begin >= 4) {
                    const unsigned char* h = buffer.data() + begin;
                    const std::size_t size = std::size_t(h[0]) << 24 | std::size_t(h[1]) << 16 |
                                             std::size_t(h[2]) << 8 | std::size_t(h[3]);
                    if (end - begin < 4 + size) {
                        if (4 + size > buffer.size()) buffer.resize(4 + size);
                        break;
                    }
                    asio::write(socket, asio::buffer(h, 4 + size), ec);
                    if (ec) break;
                    begin += 4 + size;
                }
                if (ec) break;
                // Move the partial message to the front, making room for the rest.
                std::memmove(buffer.data(), buffer.data() + begin, end - begin);
                end -= begin;
                begin = 0;
            }
        }
    });
    echo.detach();
    wait_for_stdin_eof();
    std::_Exit(0);  // the detached echo thread may be blocked in a read
}

// ---- the parent side -------------------------------------------------------------------

namespace detail {
// Live children, for the signal handler (lock-free atomics are async-signal-safe).
inline std::array<std::atomic<pid_t>, 64> children{};

inline void track_child(pid_t pid) {
    for (auto& slot : children) {
        pid_t empty = 0;
        if (slot.compare_exchange_strong(empty, pid)) return;
    }
    die("more than 64 live children");
}

inline void untrack_child(pid_t pid) {
    for (auto& slot : children) {
        pid_t expected = pid;
        slot.compare_exchange_strong(expected, 0);
    }
}

extern "C" inline void on_fatal_signal(int sig) {
    for (auto& slot : children)
        if (const pid_t pid = slot.load(); pid > 0) ::kill(pid, SIGKILL);
    // Reap them too (waitpid is async-signal-safe), so that none is left a zombie.
    for (auto& slot : children)
        if (const pid_t pid = slot.load(); pid > 0) ::waitpid(pid, nullptr, 0);
    std::signal(sig, SIG_DFL);
    ::raise(sig);
}
}  // namespace detail

/// In the parent, before the first Child: SIGINT/SIGTERM/SIGHUP kill and reap every live
/// child, then end the process; SIGPIPE is ignored so that a dead server surfaces as a
/// socket error.
inline void install_signal_handlers() {
    std::signal(SIGINT, detail::on_fatal_signal);
    std::signal(SIGTERM, detail::on_fatal_signal);
    std::signal(SIGHUP, detail::on_fatal_signal);
    std::signal(SIGPIPE, SIG_IGN);
}

/// This executable's path (resolved, so that a child has a proper name in ps and perf and
/// valgrind --trace-children works; there /proc/self/exe is valgrind).
inline std::string self_path() {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    return ec ? "/proc/self/exe" : self;
}

/// How to start a Child.
struct ChildSpec {
    /// Program and arguments; argv[0] is the path executed.
    std::vector<std::string> argv;
    /// Pin the child to this CPU before it execs (it and all its threads inherit it).
    std::optional<int> cpu;
    /// Wait for the port line: `PORT N` (announce_port) or rpclb-node's `listening on H:N`.
    bool read_port = true;
    /// Stop with SIGTERM rather than by closing stdin (rpclb-node ignores its stdin).
    bool stop_with_sigterm = false;
    /// Extra environment entries NAME=VALUE.
    std::vector<std::string> env;
};

/// A child process whose stdout is read by the parent. Distinct objects: safe; shared: unsafe.
class Child {
public:
    explicit Child(ChildSpec spec) : spec_(std::move(spec)) {
        int out[2], in[2];
        if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0)
            die(std::string("pipe: ") + std::strerror(errno));
        const auto parent = ::getpid();
        std::vector<char*> argv;
        for (auto& a : spec_.argv) argv.push_back(a.data());
        argv.push_back(nullptr);
        std::vector<std::string> env_text;
        for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
        for (const auto& e : spec_.env) env_text.push_back(e);
        std::vector<char*> envp;
        for (auto& e : env_text) envp.push_back(e.data());
        envp.push_back(nullptr);
        cpu_set_t set;
        CPU_ZERO(&set);
        if (spec_.cpu) CPU_SET(*spec_.cpu, &set);
        pid_ = ::fork();
        if (pid_ < 0) die(std::string("fork: ") + std::strerror(errno));
        if (pid_ == 0) {
            // Dies with the parent, however the parent ends.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(1);
            if (spec_.cpu && sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(126);
            ::dup2(in[0], STDIN_FILENO);
            ::dup2(out[1], STDOUT_FILENO);
            ::execve(argv[0], argv.data(), envp.data());
            ::_exit(127);
        }
        detail::track_child(pid_);
        ::close(out[1]);
        ::close(in[0]);
        stdout_ = out[0];
        stdin_ = in[1];
        if (!spec_.read_port) return;
        try {
            port_ = parse_port(read_line(std::chrono::seconds(10)));
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

    /// The next line of the child's stdout, without its newline. Throws when the child
    /// closes its stdout or prints no whole line within `limit`.
    std::string read_line(std::chrono::milliseconds limit) {
        const auto deadline = Clock::now() + limit;
        for (;;) {
            if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
                auto line = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                return line;
            }
            if (!fill(deadline)) die(name() + " printed no line within " + std::to_string(limit.count()) + " ms");
        }
    }

    /// Everything the child prints until it closes stdout (normally: exits). Throws after
    /// `limit`.
    std::string read_all(std::chrono::milliseconds limit) {
        const auto deadline = Clock::now() + limit;
        while (!eof_)
            if (!fill(deadline)) die(name() + " did not finish within " + std::to_string(limit.count()) + " ms");
        return std::exchange(pending_, {});
    }

    /// Waits for the child to exit by itself (up to `limit`, else SIGKILL) and reaps it.
    /// Returns its exit status as waitpid gives it.
    int wait(std::chrono::milliseconds limit) {
        if (pid_ <= 0) die(name() + " was already reaped");
        const int status = reap(limit);
        release();
        return status;
    }

    /// Asks the child to stop (stdin closed, or SIGTERM), SIGKILL after 3 s; reaps it.
    void stop() noexcept {
        if (pid_ <= 0) return;
        if (spec_.stop_with_sigterm) ::kill(pid_, SIGTERM);
        if (stdin_ >= 0) ::close(stdin_);
        stdin_ = -1;
        reap(std::chrono::seconds(3));
        release();
    }

private:
    std::string name() const { return spec_.argv.empty() ? "child" : spec_.argv[0]; }

    int reap(std::chrono::milliseconds limit) noexcept {
        const auto deadline = Clock::now() + limit;
        int status = 0;
        for (;;) {
            const auto r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) return status;
            if (Clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
                }
                return status;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    void release() noexcept {
        detail::untrack_child(pid_);
        pid_ = -1;
        if (stdin_ >= 0) ::close(stdin_);
        stdin_ = -1;
        if (stdout_ >= 0) ::close(stdout_);
        stdout_ = -1;
    }

    // Reads what the child's stdout holds into pending_; false when the deadline passed.
    bool fill(Clock::time_point deadline) {
        for (;;) {
            if (eof_) die(name() + " exited (closed its stdout) early");
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return false;
            pollfd p{stdout_, POLLIN, 0};
            const int r = ::poll(&p, 1, static_cast<int>(left.count()));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) continue;
            char buf[4096];
            const auto n = ::read(stdout_, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                eof_ = true;
                return true;
            }
            pending_.append(buf, static_cast<std::size_t>(n));
            return true;
        }
    }

    unsigned short parse_port(const std::string& line) const {
        unsigned port = 0;
        const auto at = line.rfind(':');
        const bool ok = std::sscanf(line.c_str(), "PORT %u", &port) == 1 ||
                        (line.rfind("listening on ", 0) == 0 && at != std::string::npos &&
                         std::sscanf(line.c_str() + at + 1, "%u", &port) == 1);
        if (!ok || port == 0 || port > 65535) die(name() + " printed \"" + line + "\" instead of its port");
        return static_cast<unsigned short>(port);
    }

    ChildSpec spec_;
    pid_t pid_ = -1;
    int stdout_ = -1;
    int stdin_ = -1;
    bool eof_ = false;
    std::string pending_;
    unsigned short port_ = 0;
};

/// A child running this executable with `mode` (an internal server flag) plus `args`.
inline ChildSpec self_child(const std::string& mode, std::optional<int> cpu, std::vector<std::string> args = {}) {
    ChildSpec spec;
    spec.argv = {self_path(), mode};
    for (auto& a : args) spec.argv.push_back(std::move(a));
    spec.cpu = cpu;
    return spec;
}

// ---- cost from /proc -------------------------------------------------------------------

/// CPU time and context switches of a whole process (all its threads), from /proc. They
/// show where a call's time goes: each hand-off between threads is a context switch.
struct ProcessCost {
    double user_us = 0;    ///< CPU time in user space
    double system_us = 0;  ///< CPU time in the kernel
    long voluntary = 0;    ///< context switches: blocked (a wait, a read)
    long involuntary = 0;  ///< context switches: preempted

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
    long switches() const { return voluntary + involuntary; }
};

/// ProcessCost of `pid` now: CPU from /proc/PID/stat clock ticks (±1 tick), context
/// switches summed over /proc/PID/task/*/status (the process-level line only counts the
/// main thread). Threads that already exited are not counted.
inline ProcessCost process_cost(pid_t pid) {
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

/// A `Key:   N kB` field of /proc/PID/status (VmRSS, RssAnon, RssFile, VmStk, Threads...),
/// in its own unit (kB, or a count); -1 when absent. `pid` 0 = this process.
inline long status_field(pid_t pid, const char* key) {
    const std::string path = pid == 0 ? "/proc/self/status" : "/proc/" + std::to_string(pid) + "/status";
    long value = -1;
    if (std::FILE* f = std::fopen(path.c_str(), "r")) {
        char line[256];
        const std::size_t len = std::strlen(key);
        while (std::fgets(line, sizeof line, f))
            if (std::strncmp(line, key, len) == 0 && line[len] == ':') {
                value = std::strtol(line + len + 1, nullptr, 10);
                break;
            }
        std::fclose(f);
    }
    return value;
}

/// Parses a command-line integer >= `min`; throws naming `flag` otherwise.
inline long parse_count(const char* flag, const char* text, long min) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min)
        die(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got \"" + text + "\"");
    return v;
}

}  // namespace bench
