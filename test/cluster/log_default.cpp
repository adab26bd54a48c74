// What rpclb logs in a process that never calls rpclb::log::init: warnings and errors
// only, through Boost.Log's default sink. This test binary never sets logging up.
#define BOOST_TEST_MODULE log_default
#include <rpclb/cluster.hpp>

#include <boost/test/unit_test.hpp>

#include "support/port.hpp"
#include "support/wait.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

// Sends file descriptors 1 and 2 to a file while it lives; text() reads what was written.
class Captured {
public:
    Captured() {
        std::fflush(stdout);
        std::fflush(stderr);
        file_ = std::tmpfile();
        BOOST_TEST_REQUIRE(file_ != nullptr);
        out_ = ::dup(1);
        err_ = ::dup(2);
        ::dup2(::fileno(file_), 1);
        ::dup2(::fileno(file_), 2);
    }
    ~Captured() { restore(); }
    /// What was written so far (the capture goes on).
    std::string so_far() const {
        std::string all;
        char buffer[4096];
        off_t at = 0;
        for (ssize_t n; (n = ::pread(::fileno(file_), buffer, sizeof buffer, at)) > 0; at += n)
            all.append(buffer, static_cast<std::size_t>(n));
        return all;
    }
    /// Everything written, once the capture has ended.
    std::string text() {
        restore();
        return so_far();
    }

private:
    void restore() {
        if (out_ < 0) return;
        std::fflush(stdout);
        std::fflush(stderr);
        ::dup2(out_, 1);
        ::dup2(err_, 2);
        ::close(out_);
        ::close(err_);
        out_ = err_ = -1;
    }
    std::FILE* file_ = nullptr;
    int out_ = -1;
    int err_ = -1;
};

rpclb::ClusterOptions options(std::string name) {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.listen = "127.0.0.1:0";
    o.cookie = "log-cookie";
    o.reconnect_interval = 100ms;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(without_init_only_warnings_are_logged_and_a_seed_not_listening_is_one_of_them) {
    rpclb::test::PortReservation silent;  // bound, never listening: connects are refused
    const auto silent_seed = "127.0.0.1:" + std::to_string(silent.port());
    const auto warning = "seed \"" + silent_seed + "\": cannot connect";
    std::string text;
    bool met = false;
    bool warned = false;
    {
        Captured captured;
        {
            rpclb::Cluster a(options("a@127.0.0.1"));
            a.start();
            auto ob = options("b@127.0.0.1");
            ob.seeds = {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port()), silent_seed};
            rpclb::Cluster b(ob);
            b.start();  // "connected to" records are at info, dials at debug
            met = eventually([&] { return a.connected_nodes().size() == 1 && b.connected_nodes().size() == 1; }, 5s);
            // The refused seed, redialled every 100 ms, is reported at warning level.
            warned = eventually([&] { return captured.so_far().find(warning) != std::string::npos; }, 5s);
            b.stop();
            a.stop();
        }
        text = captured.text();
    }
    BOOST_TEST(met);
    BOOST_TEST_MESSAGE("captured:\n" << text);
    BOOST_TEST(text.find("connected to") == std::string::npos, text);
    BOOST_TEST(text.find("dialling") == std::string::npos, text);
    BOOST_TEST(warned, text);
}
