// Cluster internals shared by cluster.cpp (life cycle, balancers), mesh.cpp (membership)
// and rpc.cpp (calls).
#pragma once

#include "connection.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/supervisor.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace rpclb {

struct Cluster::Impl : detail::ConnectionOwner, std::enable_shared_from_this<Cluster::Impl> {
    Impl(Cluster& owner, ClusterOptions options);
    ~Impl() override;

    // ---- life cycle (cluster.cpp) -------------------------------------------------------
    void start();
    void stop();
    /// What supervisors of this node report to: the log and `supervisor.restart`.
    std::function<void(const SupervisorEvent&)> supervisor_events();
    /// Loads an algorithm plugin and publishes `plugin.loaded` / `plugin.rejected`.
    boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> create_algorithm(
        const std::string& name);

    // ---- mesh (mesh.cpp) ----------------------------------------------------------------
    void start_listener();
    void do_accept();
    void dial(const std::string& address);
    void schedule_reconnect();
    void on_established(const std::shared_ptr<detail::Connection>& c) override;
    void on_frame(const std::shared_ptr<detail::Connection>& c, detail::wire::Frame&& frame) override;
    void on_closed(const std::shared_ptr<detail::Connection>& c, const std::string& reason,
                   bool established) override;
    void on_bad_frame(const std::shared_ptr<detail::Connection>& c,
                      const detail::wire::DecodeError& error) override;
    void on_handshake_failed(const std::shared_ptr<detail::Connection>& c,
                             const std::string& reason) override;
    void on_nodes(const detail::wire::Nodes& nodes);
    void broadcast(const std::string& frame);
    /// The connection to `node` that may carry a new request, or null (unknown, not
    /// connected, or the peer said bye).
    std::shared_ptr<detail::Connection> connection_to(std::string_view node) const;
    /// Sends "bye" to every peer and waits (up to `limit`) until each has answered or
    /// closed; see wire::Bye. Called by stop() once balancers are drained.
    void say_goodbye(std::chrono::milliseconds limit);
    detail::wire::Nodes known_nodes() const;

    // ---- rpc (rpc.cpp) ------------------------------------------------------------------
    std::shared_ptr<const Handler> find_handler(std::string_view module, std::string_view function) const;
    /// Runs a registered function here; `threw` (if given) tells whether it threw.
    CallResult run_handler(std::string_view module, std::string_view function,
                           const boost::json::array& args, bool* threw = nullptr) const;
    void serve_request(const std::shared_ptr<detail::Connection>& c, detail::wire::Request&& request);
    void serve_cast(detail::wire::Cast&& cast);
    /// Sends a request to `node` (or runs it on the worker pool when it is this node).
    /// `load_balancer` names the balancer that picked `node`, so that a draining target
    /// refuses it; empty for direct calls.
    void direct_call(std::string node, std::string module, std::string function,
                     boost::json::array args, std::chrono::milliseconds timeout,
                     std::string load_balancer, std::function<void(CallResult)> done);
    Result<void> direct_cast(std::string_view node, std::string_view module, std::string_view function,
                             boost::json::array args, std::string_view load_balancer = {});
    bool on_network_thread() const;

    // ---- routing (routing.cpp) ----------------------------------------------------------
    /// Runs `then(true)` after `delay` on the retry strand, or `then(false)` at once when
    /// the node stops first (see cancel_waits). Never blocks.
    void after(std::chrono::milliseconds delay, std::function<void(bool fired)> then);
    /// Ends every wait of after() with `then(false)`; called when stop() begins.
    void cancel_waits();
    /// Connected nodes a random-node helper may choose: not clients, not saying bye.
    std::vector<std::string> routable_nodes() const;
    /// The balancer started on this node under `name`, or an error naming it.
    Result<std::shared_ptr<LoadBalancer>> hosted_balancer(std::string_view name) const;
    /// The hosted balancer `balancer` when this node is a live member of it and takes calls
    /// routed by it; null while it drains or after it left (the caller then gets `draining`).
    std::shared_ptr<LoadBalancer> accepting(std::string_view balancer) const;

    Cluster& owner;
    ClusterOptions options;
    std::string incarnation;
    detail::ConnectionSettings settings;

    // Hint 1 when one thread runs the loop lets Asio skip some of its internal locking.
    boost::asio::io_context ioc{static_cast<int>(options.network_threads)};
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    boost::asio::thread_pool workers;
    std::optional<boost::asio::ip::tcp::acceptor> acceptor;
    std::optional<boost::asio::ip::tcp::endpoint> bound;
    boost::asio::steady_timer reconnect_timer;
    // No-route retry timers, all on one strand so that arming and cancelling never race.
    boost::asio::strand<boost::asio::io_context::executor_type> retry_strand{ioc.get_executor()};
    std::set<std::shared_ptr<boost::asio::steady_timer>> retry_timers;

    TelemetryBus bus;
    Groups groups;
    PluginRegistry plugins;

    mutable std::mutex mesh_mutex;
    std::map<std::string, std::shared_ptr<detail::Connection>, std::less<>> peers;  // established
    std::set<std::shared_ptr<detail::Connection>> connecting;  // handshaking
    std::set<std::string> dialing;       // targets being dialled
    std::set<std::string> self_targets;  // seeds that turned out to be this node
    // Nodes learnt from connections and gossip, redialled while not connected (by the
    // node that dials first) until they fail max_redials times in a row.
    struct KnownNode {
        detail::wire::PeerInfo info;
        int failures = 0;
    };
    static constexpr int max_redials = 30;
    std::map<std::string, KnownNode, std::less<>> known;

    mutable std::shared_mutex functions_mutex;
    // Keyed "module.function"; found by string_view (see find_handler).
    struct KeyHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, std::shared_ptr<const Handler>, KeyHash, std::equal_to<>> functions;

    mutable std::mutex balancers_mutex;
    std::map<std::string, std::shared_ptr<LoadBalancer>, std::less<>> hosted;
    std::map<std::string, std::shared_ptr<LoadBalancer>, std::less<>> routing;
    // The root of the node's supervision tree: one one_for_all subtree per hosted
    // balancer (its algorithm's services, then the LoadBalancer), named after it. Declared
    // after `groups`, which the balancers use until they are destroyed.
    Supervisor root{SupervisorOptions{.name = options.name, .on_event = supervisor_events()}};


    std::atomic<std::uint64_t> bad_frames{0};
    std::atomic<std::uint64_t> auth_failures{0};
    std::atomic<std::uint64_t> peers_lost{0};
    std::atomic<std::int64_t> serving{0};  // requests and casts received, not yet answered
    std::atomic<bool> running{false};
    std::atomic<bool> stopping{false};
};

}  // namespace rpclb
