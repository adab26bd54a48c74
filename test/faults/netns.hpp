// Fault-test support: a small network of Linux network namespaces on one machine, with
// links that can be cut silently (per direction) or narrowed. faults/lab_mesh.hpp runs
// rpclb-node processes in it; faults/delay_hub.hpp makes its links slow and lossy.
//
// Layout of one NetnsLab with N nodes (names unique per lab: rpclbf-<pid>-<seq>-...):
//
//     <prefix>-n0  eth0 10.77.0.1/24 ──veth── p0 ┐
//     <prefix>-n1  eth0 10.77.0.2/24 ──veth── p1 ├─ br0 in <prefix>-hub
//     <prefix>-n2  eth0 10.77.0.3/24 ──veth── p2 ┘
//
// Every address and interface lives inside namespaces the lab created; the machine's own
// namespace is not touched. Cuts are nftables rules on the hub's bridge (packets are
// dropped, never rejected, so a cut looks like a pulled cable: no RST, no ICMP); bandwidth
// is a tbf qdisc on the hub port and the node's eth0; delay and random loss come from
// DelayHub (faults/delay_hub.hpp), since netem is not in every kernel.
#pragma once

#include "support/process.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mount.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

namespace rpclb::test::faults {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace detail {

/// `tool` (ip, tc, nft) from PATH or the sbin directories; throws when it is missing.
inline std::filesystem::path system_tool(const std::string& tool) {
    std::vector<std::filesystem::path> dirs;
    if (const char* path = std::getenv("PATH")) {
        std::string p(path);
        for (std::size_t start = 0; start <= p.size();) {
            const auto end = std::min(p.find(':', start), p.size());
            if (end > start) dirs.emplace_back(p.substr(start, end - start));
            start = end + 1;
        }
    }
    for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
    for (const auto& d : dirs)
        if (::access((d / tool).c_str(), X_OK) == 0) return d / tool;
    throw std::runtime_error("the fault tests need `" + tool + "` (" +
                             (tool == "nft" ? std::string("apt-get install nftables") : std::string("iproute2")) +
                             "), which is not installed");
}

inline const std::filesystem::path netns_dir = "/var/run/netns";

// Names of live labs, removed by the registry's destructor at exit() if a test left
// through a path that skipped NetnsLab's destructor (Boost.Test longjmps out of a test
// case on SIGSEGV). A run killed outright is cleaned by the next run (sweep_stale).
class LabRegistry {
public:
    static LabRegistry& instance() {
        static LabRegistry r;
        return r;
    }
    void add(const std::string& ns) {
        std::lock_guard lock(mutex_);
        names_.insert(ns);
    }
    void remove(const std::string& ns) {
        std::lock_guard lock(mutex_);
        names_.erase(ns);
    }
    ~LabRegistry() {
        for (const auto& ns : names_) {
            ::umount2((netns_dir / ns).c_str(), MNT_DETACH);
            ::unlink((netns_dir / ns).c_str());
        }
    }

private:
    std::mutex mutex_;
    std::set<std::string> names_;
};

/// Moves the calling thread into network namespace `ns`; throws std::system_error.
inline void enter_namespace(const std::string& ns) {
    const int fd = ::open((netns_dir / ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open netns " + ns);
    const int rc = ::setns(fd, CLONE_NEWNET);
    const int saved = errno;
    ::close(fd);
    if (rc != 0) throw std::system_error(saved, std::generic_category(), "setns " + ns);
}

}  // namespace detail

/// What one command printed and how it ended.
struct CommandResult {
    int status = -1;  ///< exit code; -1 when it did not exit normally within its time
    std::string out;
    std::string err;
};

/// Runs `program args...` (no shell), waits up to `timeout`; `log` receives its stderr.
inline CommandResult run_command(const std::filesystem::path& program, const std::vector<std::string>& args,
                                 const std::filesystem::path& log, std::chrono::milliseconds timeout = 30s) {
    Process p(program, args, {}, log);
    const auto deadline = Clock::now() + timeout;
    p.wait_for_line("\x01 no such line", deadline);  // reads stdout to its end
    const auto status = p.wait_exit(deadline);
    CommandResult r;
    if (!status)
        p.kill();
    else if (WIFEXITED(*status))
        r.status = WEXITSTATUS(*status);
    for (const auto& line : p.stdout_lines()) r.out += line + "\n";
    r.err = p.stderr_text();
    return r;
}

/// Runs `f` on a fresh thread that has entered network namespace `ns` and returns its
/// result (or rethrows its exception). Sockets opened there belong to `ns` for good, and
/// may then be used from any thread: this is how the test process reaches a node's
/// loopback admin port without having an address in the lab itself.
template <class F>
auto in_namespace(const std::string& ns, F&& f) -> decltype(f()) {
    using R = decltype(f());
    std::promise<R> result;
    std::thread t([&] {
        try {
            detail::enter_namespace(ns);
            if constexpr (std::is_void_v<R>) {
                f();
                result.set_value();
            } else {
                result.set_value(f());
            }
        } catch (...) {
            result.set_exception(std::current_exception());
        }
    });
    t.join();
    return result.get_future().get();
}

/// A network of `nodes` namespaces joined by a bridge (see the top of this file).
///
/// Throws std::runtime_error naming the command and its error when the network cannot be
/// built, in particular when the process is not root: the fault tests fail then, they
/// never pass without having run. The destructor deletes every namespace it made; a run
/// killed before that is cleaned up by the next lab's constructor (namespaces whose
/// creator pid is gone).
///
/// Thread safety: distinct objects safe; shared objects unsafe.
class NetnsLab {
public:
    NetnsLab(std::filesystem::path log_dir, int nodes) : log_dir_(std::move(log_dir)), nodes_(nodes) {
        if (::geteuid() != 0)
            throw std::runtime_error("the fault tests build network namespaces and must run as root (euid is " +
                                     std::to_string(::geteuid()) + "); CI runs them as root");
        ip_ = detail::system_tool("ip");
        tc_ = detail::system_tool("tc");
        nft_ = detail::system_tool("nft");
        sweep_stale();
        static std::atomic<int> seq{0};
        prefix_ = "rpclbf-" + std::to_string(::getpid()) + "-" + std::to_string(seq++);
        try {
            add_namespace(hub());
            ip({"-n", hub(), "link", "add", "br0", "type", "bridge"});
            ip({"-n", hub(), "link", "set", "br0", "up"});
            ip({"-n", hub(), "link", "set", "lo", "up"});
            for (int i = 0; i < nodes_; ++i) {
                add_namespace(ns(i));
                const auto port = "p" + std::to_string(i);
                ip({"-n", hub(), "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns(i)});
                ip({"-n", hub(), "link", "set", port, "master", "br0", "up"});
                ip({"-n", ns(i), "addr", "add", address(i) + "/24", "dev", "eth0"});
                ip({"-n", ns(i), "link", "set", "eth0", "up"});
                ip({"-n", ns(i), "link", "set", "lo", "up"});
            }
            apply_rules();
        } catch (...) {
            teardown();
            throw;
        }
    }

    ~NetnsLab() { teardown(); }

    NetnsLab(const NetnsLab&) = delete;
    NetnsLab& operator=(const NetnsLab&) = delete;

    int size() const noexcept { return nodes_; }
    /// Namespace of node `i` (0-based).
    std::string ns(int i) const { return prefix_ + "-n" + std::to_string(i); }
    /// Namespace holding the bridge.
    std::string hub() const { return prefix_ + "-hub"; }
    /// IPv4 address of node `i`: 10.77.0.(i+1).
    std::string address(int i) const { return "10.77.0." + std::to_string(i + 1); }

    /// From now on, packets from node `from` to node `to` vanish (one direction).
    void cut(int from, int to) {
        cuts_.insert({from, to});
        apply_rules();
    }
    /// Cuts both directions between `a` and `b`.
    void cut_both(int a, int b) {
        cuts_.insert({a, b});
        cuts_.insert({b, a});
        apply_rules();
    }
    /// Removes every cut (loss, delay and rate limits stay).
    void heal() {
        cuts_.clear();
        apply_rules();
    }
    /// Takes node `i`'s port off the bridge (DelayHub forwards between the ports then),
    /// and puts it back.
    void detach_port(int i) { ip({"-n", hub(), "link", "set", "p" + std::to_string(i), "nomaster"}); }
    void attach_port(int i) { ip({"-n", hub(), "link", "set", "p" + std::to_string(i), "master", "br0", "up"}); }
    /// Limits node `i`'s link to `rate` (tc syntax, e.g. "10mbit") in both directions with
    /// a token bucket (tbf).
    void limit_rate(int i, const std::string& rate) {
        const std::vector<std::string> tbf{"root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"};
        auto to_node = std::vector<std::string>{"-n", hub(), "qdisc", "replace", "dev", "p" + std::to_string(i)};
        auto from_node = std::vector<std::string>{"-n", ns(i), "qdisc", "replace", "dev", "eth0"};
        to_node.insert(to_node.end(), tbf.begin(), tbf.end());
        from_node.insert(from_node.end(), tbf.begin(), tbf.end());
        tc(to_node);
        tc(from_node);
    }

    /// Runs `f` on a thread inside node `i`'s namespace (see in_namespace).
    template <class F>
    auto in_node(int i, F&& f) {
        return in_namespace(ns(i), std::forward<F>(f));
    }

    /// Argument vector that runs `program args...` inside node `i`'s namespace, for Process
    /// (whose program is then ip_tool()).
    std::vector<std::string> exec_args(int i, const std::filesystem::path& program,
                                       const std::vector<std::string>& args) const {
        std::vector<std::string> v{"netns", "exec", ns(i), program.string()};
        v.insert(v.end(), args.begin(), args.end());
        return v;
    }
    const std::filesystem::path& ip_tool() const noexcept { return ip_; }

private:
    CommandResult command(const std::filesystem::path& tool, const std::vector<std::string>& args) {
        return run_command(tool, args, log_dir_ / "lab-command.log");
    }
    void check(const std::filesystem::path& tool, const std::vector<std::string>& args) {
        const auto r = command(tool, args);
        if (r.status == 0) return;
        std::string line = tool.filename().string();
        for (const auto& a : args) line += " " + a;
        throw std::runtime_error("fault lab: `" + line + "` failed (status " + std::to_string(r.status) +
                                 "): " + r.err);
    }
    void ip(const std::vector<std::string>& args) { check(ip_, args); }
    void tc(const std::vector<std::string>& args) { check(tc_, args); }

    void add_namespace(const std::string& name) {
        detail::LabRegistry::instance().add(name);
        made_.push_back(name);
        ip({"netns", "add", name});
    }

    // One nftables transaction replaces the whole rule set of the hub, so a change is
    // atomic: no moment where an old cut is gone and the new one not yet in.
    void apply_rules() {
        std::string rules = "flush ruleset\ntable bridge rpclb_faults {\n  chain forward {\n"
                            "    type filter hook forward priority 0; policy accept;\n";
        for (const auto& [from, to] : cuts_)
            rules += "    ip saddr " + address(from) + " ip daddr " + address(to) + " drop\n";
        rules += "  }\n}\n";
        const auto file = log_dir_ / (prefix_ + ".nft");
        std::ofstream(file) << rules;
        check(ip_, {"netns", "exec", hub(), nft_.string(), "-f", file.string()});
    }

    void teardown() {
        for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
            command(ip_, {"netns", "del", *it});
            detail::LabRegistry::instance().remove(*it);
        }
        made_.clear();
    }

    // Deletes labs left by runs that were killed (their creator pid no longer exists).
    void sweep_stale() {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(detail::netns_dir, ec)) {
            const auto name = entry.path().filename().string();
            if (name.rfind("rpclbf-", 0) != 0) continue;
            const auto pid = std::atol(name.c_str() + 7);
            if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
                command(ip_, {"netns", "del", name});
        }
    }

    std::filesystem::path log_dir_;
    int nodes_;
    std::filesystem::path ip_, tc_, nft_;
    std::string prefix_;
    std::vector<std::string> made_;
    std::set<std::pair<int, int>> cuts_;
};

}  // namespace rpclb::test::faults
