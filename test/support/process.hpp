// A child process for integration tests: spawned with posix_spawn, stdout read through a
// pipe, stderr written to a log file, killed and reaped when the owner goes away.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace rpclb::test {

namespace detail {

// Every live child of this test process. A test that dies in a way that skips
// destructors (Boost.Test turns SIGSEGV and friends into a failed test case by
// longjmp-ing out of it) still leaves the process through exit(), which destroys this
// registry and with it any child left behind.
class ChildRegistry {
public:
    static ChildRegistry& instance() {
        static ChildRegistry registry;
        return registry;
    }
    void add(pid_t pid) {
        std::lock_guard lock(mutex_);
        pids_.insert(pid);
    }
    void remove(pid_t pid) {
        std::lock_guard lock(mutex_);
        pids_.erase(pid);
    }
    ~ChildRegistry() {
        for (pid_t pid : pids_) {
            ::kill(pid, SIGKILL);
            int status = 0;
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
    }

private:
    ChildRegistry() = default;
    std::mutex mutex_;
    std::set<pid_t> pids_;
};

inline std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

}  // namespace detail

/// A `listening on HOST:PORT` line, parsed.
struct ListenAddress {
    std::string host;
    std::uint16_t port = 0;
    std::string text() const { return host + ":" + std::to_string(port); }
};

/// Parses `listening on HOST:PORT`; nullopt when the line has another shape or the port
/// is not 1..65535.
inline std::optional<ListenAddress> parse_listening_line(std::string_view line) {
    constexpr std::string_view prefix = "listening on ";
    if (line.substr(0, prefix.size()) != prefix) return std::nullopt;
    line.remove_prefix(prefix.size());
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    const auto colon = line.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == line.size()) return std::nullopt;
    unsigned long port = 0;
    for (char c : line.substr(colon + 1)) {
        if (c < '0' || c > '9') return std::nullopt;
        port = port * 10 + static_cast<unsigned long>(c - '0');
        if (port > 65535) return std::nullopt;
    }
    if (port == 0) return std::nullopt;
    return ListenAddress{std::string(line.substr(0, colon)), static_cast<std::uint16_t>(port)};
}

/// One child process. Not copyable or movable (hold it in a unique_ptr); every member is
/// for the thread that owns it.
///
/// stdin is /dev/null, stdout is a pipe read by wait_for_line(), stderr goes to
/// `stderr_path` (truncated). Where util-linux `setpriv` exists the child is started
/// through it with a parent-death signal of SIGKILL, so that even a test process killed
/// outright (a ctest timeout) leaves no node running.
///
/// The destructor SIGKILLs the child if it has not been reaped yet and reaps it.
class Process {
public:
    using Clock = std::chrono::steady_clock;

    /// Starts `program` with `args` (argv[1..]) and the environment of this process plus
    /// `env` (entries replace variables of the same name). Throws std::system_error when
    /// the pipe, the log file or the spawn fails.
    Process(const std::filesystem::path& program, const std::vector<std::string>& args,
            const std::vector<std::pair<std::string, std::string>>& env,
            std::filesystem::path stderr_path)
        : program_(program), stderr_path_(std::move(stderr_path)) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
        stdout_fd_ = fds[0];

        std::vector<std::string> argv_strings;
        static const std::filesystem::path setpriv = "/usr/bin/setpriv";
        std::filesystem::path executable = program;
        if (std::filesystem::exists(setpriv)) {
            executable = setpriv;
            argv_strings = {"setpriv", "--pdeathsig", "KILL", "--", program.string()};
        } else {
            argv_strings = {program.string()};
        }
        argv_strings.insert(argv_strings.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : argv_strings) argv.push_back(a.data());
        argv.push_back(nullptr);

        std::vector<std::string> env_strings;
        for (char** e = environ; *e; ++e) {
            std::string_view entry(*e);
            const auto key = entry.substr(0, entry.find('='));
            const bool replaced = std::any_of(env.begin(), env.end(),
                                              [&](const auto& kv) { return kv.first == key; });
            if (!replaced) env_strings.emplace_back(entry);
        }
        for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
        std::vector<char*> envp;
        for (auto& e : env_strings) envp.push_back(e.data());
        envp.push_back(nullptr);

        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
        const auto log = stderr_path_.string();
        posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND,
                                         0644);

        // Signals blocked or ignored in this process (threads of an in-process Cluster
        // may block some) must not leak into the child, which relies on SIGTERM.
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t empty, defaults;
        sigemptyset(&empty);
        sigemptyset(&defaults);
        for (int s : {SIGTERM, SIGINT, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
        posix_spawnattr_setsigmask(&attr, &empty);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

        const int rc = ::posix_spawn(&pid_, executable.c_str(), &actions, &attr, argv.data(), envp.data());
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        ::close(fds[1]);
        if (rc != 0) {
            ::close(stdout_fd_);
            throw std::system_error(rc, std::generic_category(), "posix_spawn " + program.string());
        }
        detail::ChildRegistry::instance().add(pid_);
    }

    ~Process() {
        if (!status_) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
        }
        detail::ChildRegistry::instance().remove(pid_);
        ::close(stdout_fd_);
    }

    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;

    pid_t pid() const noexcept { return pid_; }
    const std::filesystem::path& program() const noexcept { return program_; }
    const std::filesystem::path& stderr_path() const noexcept { return stderr_path_; }

    /// What the child has written to stderr so far.
    std::string stderr_text() const { return detail::read_file(stderr_path_); }

    /// Every stdout line read so far (without the newline).
    const std::vector<std::string>& stdout_lines() const noexcept { return lines_; }

    /// Reads stdout until a line starting with `prefix` arrives and returns it (without
    /// the newline); nullopt when `deadline` passes or stdout ends first. Lines before it
    /// are kept in stdout_lines() but otherwise skipped.
    std::optional<std::string> wait_for_line(std::string_view prefix, Clock::time_point deadline) {
        for (;;) {
            while (scanned_ < lines_.size()) {
                const auto& line = lines_[scanned_++];
                if (line.substr(0, prefix.size()) == prefix) return line;
            }
            if (eof_) return std::nullopt;
            const auto now = Clock::now();
            if (now >= deadline) return std::nullopt;
            const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
            pollfd p{stdout_fd_, POLLIN, 0};
            const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 1000)));
            if (n < 0 && errno != EINTR) return std::nullopt;
            if (n <= 0) continue;
            char buf[4096];
            const auto got = ::read(stdout_fd_, buf, sizeof buf);
            if (got < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                return std::nullopt;
            }
            if (got == 0) {
                eof_ = true;
                if (!partial_.empty()) lines_.push_back(std::exchange(partial_, {}));
                continue;
            }
            partial_.append(buf, static_cast<std::size_t>(got));
            for (auto nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n')) {
                lines_.push_back(partial_.substr(0, nl));
                partial_.erase(0, nl + 1);
            }
        }
    }

    /// Sends `signal`; false when the child is already reaped or kill() failed.
    bool signal(int signal) {
        if (status_) return false;
        return ::kill(pid_, signal) == 0;
    }

    /// Sends SIGSTOP and waits until every thread of the child has stopped (kill() returns
    /// before they all have: a thread on another CPU may still answer a request). The child
    /// is not reaped (WNOWAIT). False when it was reaped already or is gone.
    bool freeze() {
        if (!signal(SIGSTOP)) return false;
        siginfo_t info{};
        while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WEXITED | WNOWAIT) < 0)
            if (errno != EINTR) return false;
        return info.si_code == CLD_STOPPED;
    }

    /// Waits until the child exits and reaps it; its wait status (decode with WIFEXITED
    /// and friends), or nullopt if it is still running at `deadline`. Once reaped, returns
    /// the same status at once.
    std::optional<int> wait_exit(Clock::time_point deadline) {
        for (;;) {
            if (try_reap()) return status_;
            const auto now = Clock::now();
            if (now >= deadline) return std::nullopt;
            std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(2), deadline - now));
        }
    }

    std::optional<int> wait_exit(std::chrono::milliseconds timeout) { return wait_exit(Clock::now() + timeout); }

    /// True while the child has not exited (reaps it when it has).
    bool running() { return !try_reap(); }

    /// SIGKILLs the child and reaps it; its wait status.
    int kill() {
        if (!status_) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
            status_ = status;
        }
        return *status_;
    }

private:
    bool try_reap() {
        if (status_) return true;
        int status = 0;
        const pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == pid_) status_ = status;
        return status_.has_value();
    }

    std::filesystem::path program_;
    std::filesystem::path stderr_path_;
    pid_t pid_ = -1;
    int stdout_fd_ = -1;
    std::optional<int> status_;
    std::string partial_;
    std::vector<std::string> lines_;
    std::size_t scanned_ = 0;
    bool eof_ = false;
};

/// Describes a wait status for assertion messages ("exited 0", "killed by signal 9").
inline std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

}  // namespace rpclb::test
