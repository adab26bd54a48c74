// The threads of one node: the network io_context and its threads, and the worker pool.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

namespace rpclb::detail {

/// Owns the network `io_context` with `network_threads` threads running it, and the
/// worker `thread_pool` (handlers that are not inline, async completions by default).
///
/// Thread safety: start() and stop() from one control thread; the accessors from any.
class Runtime {
public:
    Runtime(std::size_t network_threads, std::size_t worker_threads);

    boost::asio::io_context& network() noexcept { return network_; }
    boost::asio::thread_pool& workers() noexcept { return workers_; }

    /// Starts the network threads; the loop keeps running until stop().
    void start();
    /// Lets the loop run out, stops it, joins the network threads, then the workers.
    /// Handlers still queued are destroyed unrun with the io_context.
    void stop();

    /// True on a thread running this node's network loop, or the network loop of any
    /// other node of the process (where nothing may block on a call: the call may need the
    /// very loop it blocks, as when two nodes in one process call each other).
    bool on_network_thread() const noexcept;

    /// The worker pool has been joined (stop()): work posted to it would never run, so
    /// completions due after that go to Asio's system executor instead.
    bool workers_stopped() const noexcept { return workers_stopped_.load(); }

private:
    std::size_t network_threads_;
    // Hint 1 when one thread runs the loop lets Asio skip some of its internal locking.
    boost::asio::io_context network_;
    boost::asio::thread_pool workers_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
    std::vector<std::thread> threads_;
    std::atomic<bool> workers_stopped_{false};
};

}  // namespace rpclb::detail
