// The admin listener's state, shared by the commands (admin_server.cpp) and the network
// sessions (listener.cpp). Private to librpclb.
#pragma once

#include "admin/node_view.hpp"
#include "admin/protocol.hpp"

#include <rpclb/admin.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/metrics.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace rpclb {

/// The module and function of the internal RPC that carries forwarded requests.
inline constexpr std::string_view admin_module = "rpclb_admin";
inline constexpr std::string_view admin_function = "command";

namespace admin {

class Session;  // an HTTP or WebSocket connection (listener.cpp)

/// What AdminServer owns: options, counters, the I/O context and the command pool.
struct State {
    State(Cluster& cluster, AdminOptions options, std::function<void()> request_stop);

    // ---- commands (admin_server.cpp) ----------------------------------------------------
    /// A request already parsed and authorised: forwarded when it names another node, run
    /// here otherwise. Never throws.
    boost::json::object execute(const admin::Request& request);
    boost::json::value run_local(const admin::Request& request);  // throws CommandError
    boost::json::object forward(const admin::Request& request);
    admin::NodeView view() const;
    std::string metrics_text() const;
    /// Why /readyz answers 503 now ("starting", "drained", "stopping", "cookie refused by
    /// NODE"); empty when the node is ready.
    std::string not_ready_reason() const;
    bool ready_now() const { return not_ready_reason().empty(); }

    // ---- network (listener.cpp) ---------------------------------------------------------
    void listen();   // binds, starts accepting and the I/O thread
    void shutdown(); // closes everything, joins the threads
    void accept();
    void track(const std::shared_ptr<admin::Session>& session);

    Cluster& cluster;
    const AdminOptions options;
    const std::function<void()> request_stop;
    const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
    std::unique_ptr<Metrics> metrics;

    std::atomic<bool> ready{false};
    std::atomic<bool> stopping{false};
    std::atomic<bool> drained{false};
    std::mutex drain_mutex;  // one drain or undrain at a time
    std::vector<LoadBalancerOptions> drained_balancers;

    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> wrong_tokens{0};
    std::atomic<std::uint64_t> bad_requests{0};
    std::atomic<std::uint64_t> subscribers{0};
    // Shared with subscription listeners, which may run briefly after we are gone.
    std::shared_ptr<std::atomic<std::uint64_t>> events_dropped = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::atomic<std::uint64_t> next_subscription{1};

    // One I/O thread: every session's handlers run on it, so sessions need no strand.
    boost::asio::io_context io{1};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
    boost::asio::ip::tcp::acceptor acceptor{io};
    boost::asio::ip::tcp::endpoint configured;
    std::optional<boost::asio::ip::tcp::endpoint> bound;
    std::thread io_thread;
    std::promise<void> io_done;
    // Commands block (a drain waits for calls), so they run here, off the I/O thread.
    boost::asio::thread_pool commands{2};

    std::mutex state_mutex;
    bool started = false;
    bool stopped = false;
    std::vector<std::weak_ptr<admin::Session>> sessions;  // I/O thread only
};

/// An admin error raised inside a command.
struct CommandError {
    Error error;
};

/// Whether `host` is a loopback address (127.0.0.0/8, ::1). False when it doesn't parse.
bool is_loopback(const boost::asio::ip::address& address) noexcept;

}  // namespace admin

}  // namespace rpclb
