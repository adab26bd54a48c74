// rpclb::run_until_signalled in a real child process: SIGTERM ends its wait, its balancer
// leaves the group a client watches, and it exits.
#define BOOST_TEST_MODULE stop_signal
#include <boost/asio/ip/tcp.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <rpclb/stop_signal.hpp>

#include <csignal>
#include <string>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace rpclb::test;
using namespace std::chrono;

namespace {

// Reads one line from `fd` within `timeout`; empty when none came.
std::string read_line(int fd, milliseconds timeout) {
    std::string line;
    const auto deadline = steady_clock::now() + timeout;
    while (steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
        if (::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0))) <= 0) break;
        char c;
        if (::read(fd, &c, 1) != 1) break;
        if (c == '\n') return line;
        line += c;
    }
    return {};
}

// The child: a node hosting balancer "w" that reports its address on `out`, runs until
// signalled, reports the signal, and exits 0 (3 when the wait ended otherwise).
[[noreturn]] void run_child(int out) {
    int code = 4;
    try {
        rpclb::StopSignal stop_signal;  // before start(): a SIGTERM from here on is caught
        rpclb::Cluster node(in_process_node_options("sig@127.0.0.1"));
        node.start();
        node.start_balancer(balancer_options("w", "round_robin"));
        const auto line = "listening on 127.0.0.1:" + std::to_string(node.listen_endpoint()->port()) + "\n";
        (void)!::write(out, line.data(), line.size());
        const int got = rpclb::run_until_signalled(node, stop_signal);
        const auto done = "stopped by " + std::to_string(got) + "\n";
        (void)!::write(out, done.data(), done.size());
        code = got == SIGTERM ? 0 : 3;
    } catch (...) {
    }
    ::_exit(code);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(stop_signal, Harness)

BOOST_AUTO_TEST_CASE(sigterm_ends_the_wait_and_the_node_leaves_gracefully) {
    // Forked before this process starts any thread: the child builds its own node.
    int fds[2];
    BOOST_REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        run_child(fds[1]);
    }
    ::close(fds[1]);
    struct Reap {
        pid_t pid;
        ~Reap() {
            if (pid > 0) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, nullptr, 0);
            }
        }
    } reap{pid};

    const auto address = parse_listening_line(read_line(fds[0], 10s));
    BOOST_REQUIRE_MESSAGE(address, "the child did not report its listener");
    auto client = start_client({address->text()});
    BOOST_REQUIRE(client->wait_for_members("w", 1, 5s).has_value());
    BOOST_TEST(client->groups().members("w")->nodes == std::vector<std::string>{"sig@127.0.0.1"},
               boost::test_tools::per_element());

    BOOST_REQUIRE(::kill(pid, SIGTERM) == 0);
    BOOST_TEST(read_line(fds[0], 20s) == "stopped by " + std::to_string(SIGTERM));
    BOOST_TEST(eventually([&] { return client->groups().members("w")->nodes.empty(); }, 5s));

    int status = 0;
    const bool exited = eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 20s);
    BOOST_REQUIRE(exited);
    reap.pid = 0;
    BOOST_TEST(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0);
    ::close(fds[0]);
}

BOOST_AUTO_TEST_CASE(request_stop_ends_a_wait_and_a_timed_wait_times_out) {
    rpclb::StopSignal stop_signal;
    BOOST_TEST(!stop_signal.wait_for(50ms).has_value());
    stop_signal.request_stop();
    BOOST_TEST(stop_signal.wait() == 0);
    // A signal raised while nobody waits is kept for the next wait.
    ::raise(SIGINT);
    BOOST_TEST(stop_signal.wait_for(5s).value_or(-1) == SIGINT);
}

BOOST_AUTO_TEST_SUITE_END()
