// A connection that has failed handles nothing more, even what its socket had already
// read. The case that matters: a dialer's handshake timer fires while the acceptor's Ready
// waits, read but not yet handled, on the dialer's strand. Handled after the timeout, that
// Ready would establish a connection whose socket is closed and whose close was already
// reported: the mesh would hold a link its peer has lost, for good.
//
// The order is forced, not hoped for: the test blocks the dialer's strand, lets the
// handshake timer's handler queue behind the blocker, then delivers the Ready and lets its
// read complete, and only then releases the strand.
#define BOOST_TEST_MODULE late_handshake
#include "../../src/transport/connection.hpp"

#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/test/unit_test.hpp>

#include "support/wait.hpp"

#include <sys/ioctl.h>
#include <linux/sockios.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace wire = rpclb::detail::wire;
using rpclb::detail::Connection;
using rpclb::detail::LinkClose;
using rpclb::detail::LinkError;

namespace {

using Clock = std::chrono::steady_clock;

// Counts what the connection reports.
struct Owner : rpclb::detail::ConnectionOwner {
    std::atomic<int> established{0};
    std::atomic<int> closed{0};
    std::atomic<int> handshake_failed{0};
    std::atomic<LinkError> close_kind{LinkError::stopping};
    void on_established(const std::shared_ptr<Connection>&) override { ++established; }
    void on_frame(const std::shared_ptr<Connection>&, wire::Frame&&) override {}
    void on_closed(const std::shared_ptr<Connection>&, const LinkClose& reason, bool) override {
        close_kind = reason.kind;
        ++closed;
    }
    void on_bad_frame(const std::shared_ptr<Connection>&, const wire::DecodeError&) override {}
    void on_handshake_failed(const std::shared_ptr<Connection>&, const std::string&) override { ++handshake_failed; }
    void on_tls_failed(const std::shared_ptr<Connection>&, const std::string&) override {}
    void on_cookie_refused(const std::shared_ptr<Connection>&) override {}
};

// Returns once every handler of `ioc` ready by now has run: a timer due now, whose handler
// runs on a thread that is not blocked, comes after them (the io_context runs ready
// handlers in the order they became ready).
void drain_ready(asio::io_context& ioc, Clock::time_point due = Clock::now()) {
    std::promise<void> ran;
    asio::steady_timer timer(ioc, due);
    timer.async_wait([&](boost::system::error_code) { ran.set_value(); });
    BOOST_REQUIRE(ran.get_future().wait_for(10s) == std::future_status::ready);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ready_that_arrives_after_the_handshake_timed_out_does_not_establish) {
    asio::io_context ioc;
    auto work = asio::make_work_guard(ioc);
    std::vector<std::jthread> threads;
    for (int i = 0; i < 2; ++i) threads.emplace_back([&] { ioc.run(); });

    // The acceptor: a plain WebSocket driven by this thread, speaking the cookie handshake.
    asio::io_context acceptor_ioc;
    asio::ip::tcp::acceptor listener(acceptor_ioc, {asio::ip::make_address("127.0.0.1"), 0});
    const auto port = listener.local_endpoint().port();

    const std::string cookie = "late-handshake";
    rpclb::detail::ConnectionSettings settings;
    settings.local = {"dialer@127.0.0.1", rpclb::detail::make_nonce(), "", false};
    settings.cookie = cookie;
    settings.handshake_timeout = 5s;  // long enough for this thread's steps, even under a sanitizer and load
    Owner owner;
    auto strand = asio::make_strand(ioc);
    auto dialer = std::make_shared<Connection>(strand, "127.0.0.1:" + std::to_string(port), owner, settings);
    dialer->start();
    const auto timer_due_by = Clock::now() + settings.handshake_timeout;

    beast::websocket::stream<asio::ip::tcp::socket> ws(listener.accept());
    ws.accept();
    rpclb::detail::Handshake acceptor(rpclb::detail::Role::acceptor,
                                      {"acceptor@127.0.0.1", rpclb::detail::make_nonce(), "127.0.0.1:1", false},
                                      cookie);
    auto step = acceptor.start();
    auto exchange = [&] {
        beast::flat_buffer buffer;
        ws.read(buffer);
        auto frame = wire::decode(beast::buffers_to_string(buffer.data()));
        BOOST_REQUIRE(frame);
        step = acceptor.on_frame(*frame);
        BOOST_REQUIRE(!step.error);
    };
    exchange();  // the dialer's Hello
    for (const auto& f : step.send) ws.write(asio::buffer(wire::encode(f)));
    exchange();  // the dialer's proof
    BOOST_REQUIRE(step.done);
    BOOST_REQUIRE(Clock::now() < timer_due_by);  // else the test proves nothing: make the timeout longer

    // Block the dialer's strand.
    std::promise<void> blocked;
    std::promise<void> release;
    auto released = release.get_future();
    asio::post(strand, [&] {
        blocked.set_value();
        released.wait_for(20s);
    });
    BOOST_REQUIRE(blocked.get_future().wait_for(10s) == std::future_status::ready);

    // The handshake timer fires; its handler queues behind the blocker.
    drain_ready(ioc, timer_due_by + 10ms);

    // Then the Ready: sent, acknowledged by the dialer's kernel, read by its reactor.
    for (const auto& f : step.send) ws.write(asio::buffer(wire::encode(f)));
    const int fd = ws.next_layer().native_handle();
    BOOST_REQUIRE(rpclb::test::eventually(
        [&] {
            int unacknowledged = -1;
            return ::ioctl(fd, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0;
        },
        10s, 1ms));
    drain_ready(ioc);

    std::weak_ptr<Connection> gone = dialer;
    dialer.reset();
    release.set_value();
    // Every handler of the connection has run once nothing holds it.
    BOOST_REQUIRE(rpclb::test::eventually([&] { return gone.expired(); }, 10s));
    BOOST_TEST(owner.closed == 1);
    BOOST_TEST((owner.close_kind == LinkError::handshake_timed_out));
    BOOST_TEST(owner.established == 0);  // the late Ready is dropped
    BOOST_TEST(owner.handshake_failed == 0);  // a timeout is not a refused cookie

    work.reset();
    ioc.stop();
}
