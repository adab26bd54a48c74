// What rpclb logs in a process that never calls rpclb::log::init: warnings and errors
// only, on stderr, never on stdout; and, after rpclb::log::use_application_sinks, only to
// the application's own sinks. This test binary never calls rpclb::log::init.
#define BOOST_TEST_MODULE log_default
#include <rpclb/cluster.hpp>
#include <rpclb/log.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/basic_sink_backend.hpp>
#include <boost/log/sinks/unlocked_frontend.hpp>
#include <boost/test/unit_test.hpp>

#include "support/port.hpp"
#include "support/wait.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

// Sends file descriptor `fd` (1: stdout, 2: stderr) to a file while it lives; so_far()
// and text() read what was written.
class Captured {
public:
    explicit Captured(int fd) : fd_(fd) {
        std::fflush(stdout);
        std::fflush(stderr);
        file_ = std::tmpfile();
        BOOST_TEST_REQUIRE(file_ != nullptr);
        saved_ = ::dup(fd_);
        ::dup2(::fileno(file_), fd_);
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
        if (saved_ < 0) return;
        std::fflush(stdout);
        std::fflush(stderr);
        ::dup2(saved_, fd_);
        ::close(saved_);
        saved_ = -1;
    }
    int fd_;
    std::FILE* file_ = nullptr;
    int saved_ = -1;
};

// The messages of every record a Boost.Log sink of the test's own receives.
struct Messages : boost::log::sinks::basic_sink_backend<boost::log::sinks::concurrent_feeding> {
    void consume(const boost::log::record_view& record) {
        const auto message = record[boost::log::expressions::smessage];
        std::lock_guard lock(mutex);
        messages.push_back(message ? *message : std::string());
    }
    std::size_t count(const std::string& text) const {
        std::lock_guard lock(mutex);
        std::size_t n = 0;
        for (const auto& m : messages) n += m.find(text) != std::string::npos;
        return n;
    }
    mutable std::mutex mutex;
    std::vector<std::string> messages;
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
        Captured out(1);
        Captured err(2);
        const auto so_far = [&] { return out.so_far() + err.so_far(); };
        {
            rpclb::Cluster a(options("a@127.0.0.1"));
            a.start();
            auto ob = options("b@127.0.0.1");
            ob.seeds = {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port()), silent_seed};
            rpclb::Cluster b(ob);
            b.start();  // "connected to" records are at info, dials at debug
            met = eventually([&] { return a.connected_nodes().size() == 1 && b.connected_nodes().size() == 1; }, 5s);
            // The refused seed, redialled every 100 ms, is reported at warning level.
            warned = eventually([&] { return so_far().find(warning) != std::string::npos; }, 5s);
            b.stop();
            a.stop();
        }
        text = out.text() + err.text();
    }
    BOOST_TEST(met);
    BOOST_TEST_MESSAGE("captured:\n" << text);
    BOOST_TEST(text.find("connected to") == std::string::npos, text);
    BOOST_TEST(text.find("dialling") == std::string::npos, text);
    BOOST_TEST(warned, text);
}

BOOST_AUTO_TEST_CASE(without_init_records_go_to_stderr_and_stdout_stays_clean) {
    rpclb::test::PortReservation silent;
    const auto warning = "seed \"" + silent.address() + "\": cannot connect";
    std::string out_text;
    std::string err_text;
    bool warned = false;
    {
        Captured out(1);
        Captured err(2);
        std::cout << "{\"program\": \"output\"}" << std::endl;
        {
            auto o = options("c@127.0.0.1");
            o.seeds = {silent.address()};
            rpclb::Cluster c(o);
            c.start();
            warned = eventually([&] { return err.so_far().find(warning) != std::string::npos; }, 5s);
            c.stop();
        }
        out_text = out.text();
        err_text = err.text();
    }
    BOOST_TEST(warned, "stderr:\n" << err_text << "stdout:\n" << out_text);
    BOOST_TEST(out_text == "{\"program\": \"output\"}\n");
}

// Run last: from here on rpclb installs no sink of its own in this process.
BOOST_AUTO_TEST_CASE(with_application_sinks_records_reach_only_them) {
    rpclb::log::use_application_sinks("warning");
    auto backend = boost::make_shared<Messages>();
    auto sink = boost::make_shared<boost::log::sinks::unlocked_sink<Messages>>(backend);
    boost::log::core::get()->add_sink(sink);
    rpclb::test::PortReservation silent;
    const auto warning = "seed \"" + silent.address() + "\": cannot connect";
    std::string out_text;
    std::string err_text;
    bool warned = false;
    {
        Captured out(1);
        Captured err(2);
        {
            auto o = options("d@127.0.0.1");
            o.seeds = {silent.address()};
            rpclb::Cluster d(o);
            d.start();
            warned = eventually([&] { return backend->count(warning) > 0; }, 5s);
            d.stop();
        }
        out_text = out.text();
        err_text = err.text();
    }
    boost::log::core::get()->remove_sink(sink);
    BOOST_TEST(warned);
    BOOST_TEST(out_text.empty(), out_text);
    BOOST_TEST(err_text.find(warning) == std::string::npos, err_text);
}
