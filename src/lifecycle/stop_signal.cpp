#include "lifecycle/stop_signals.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/stop_signal.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <atomic>
#include <csignal>
#include <mutex>
#include <set>

namespace rpclb {

// One io_context of its own, run only by the waiting thread: the signal_set queues a
// signal that arrives while nobody waits, and async_wait hands it over later.
struct StopSignal::Impl {
    boost::asio::io_context io;
    boost::asio::signal_set signals{io, SIGINT, SIGTERM};
    std::atomic<bool> requested{false};  // request_stop() was called: its cancel is not a timeout's
};

namespace {

// Every StopSignal alive, for detail::stop_every_signal(). One removed under the mutex is
// never reached again, so it may go once that returns.
std::mutex live_mutex;
std::set<StopSignal*> live;

}  // namespace

void detail::stop_every_signal() noexcept {
    std::lock_guard lock(live_mutex);
    for (auto* signal : live) signal->request_stop();
}

StopSignal::StopSignal() : impl_(std::make_unique<Impl>()) {
    std::lock_guard lock(live_mutex);
    live.insert(this);
}

StopSignal::~StopSignal() {
    std::lock_guard lock(live_mutex);
    live.erase(this);
}

std::optional<int> StopSignal::wait_for(std::chrono::milliseconds timeout) {
    std::optional<int> got;
    impl_->signals.async_wait([&got](const boost::system::error_code& ec, int signal) {
        got = ec ? 0 : signal;  // cancelled: by request_stop(), or by the timeout below
    });
    impl_->io.restart();
    impl_->io.run_for(timeout);
    if (!got) {
        impl_->signals.cancel();  // the wait goes; a signal not yet taken stays queued
        impl_->io.restart();
        impl_->io.run();
        // Cancelled by the timeout is nothing; a signal that raced the cancel is something.
        if (got == 0 && !impl_->requested) got.reset();
    }
    if (got == 0) impl_->requested = false;
    return got;
}

int StopSignal::wait() {
    for (;;)
        if (auto got = wait_for(std::chrono::hours(24))) return *got;
}

void StopSignal::request_stop() {
    impl_->requested = true;
    boost::asio::post(impl_->io, [this] { impl_->signals.cancel(); });
}

int run_until_signalled(Cluster& cluster, StopSignal& signal) {
    // A name given up before `signal` was made reached no wait of it.
    const int got = cluster.name_taken() ? 0 : signal.wait();
    for (const auto& b : cluster.balancer_names()) cluster.stop_balancer(b);
    cluster.stop();
    return got;
}

int run_until_signalled(Cluster& cluster) {
    StopSignal signal;
    return run_until_signalled(cluster, signal);
}

}  // namespace rpclb
