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
    std::shared_ptr<detail::Connection> connection_to(std::string_view node) const;
    detail::wire::Nodes known_nodes() const;

    // ---- rpc (rpc.cpp) ------------------------------------------------------------------
    std::shared_ptr<const Handler> find_handler(std::string_view module, std::string_view function) const;
    CallResult run_handler(std::string_view module, std::string_view function,
                           const boost::json::array& args) const;
    void serve_request(const std::shared_ptr<detail::Connection>& c, detail::wire::Request&& request);
    void serve_cast(detail::wire::Cast&& cast);
    void direct_call(std::string node, std::string module, std::string function,
                     boost::json::array args, std::chrono::milliseconds timeout,
                     std::function<void(CallResult)> done);
    Result<void> direct_cast(std::string_view node, std::string_view module, std::string_view function,
                             boost::json::array args);
    bool on_network_thread() const;

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
    std::unordered_map<std::string, std::shared_ptr<const Handler>> functions;

    mutable std::mutex balancers_mutex;
    std::map<std::string, std::shared_ptr<LoadBalancer>, std::less<>> hosted;
    std::map<std::string, std::shared_ptr<LoadBalancer>, std::less<>> routing;
    // The root of the node's supervision tree: one one_for_all subtree per hosted
    // balancer (its algorithm's services, then the LoadBalancer), named after it. Declared
    // after `groups`, which the balancers use until they are destroyed.
    Supervisor root{SupervisorOptions{.name = options.name}};

    std::atomic<const PickObserver*> pick_observer{nullptr};
    std::mutex observers_mutex;
    std::vector<std::unique_ptr<const PickObserver>> observers;  // every one ever set

    std::atomic<std::uint64_t> bad_frames{0};
    std::atomic<std::uint64_t> auth_failures{0};
    std::atomic<std::uint64_t> peers_lost{0};
    std::atomic<std::int64_t> serving{0};  // requests and casts received, not yet answered
    std::atomic<bool> running{false};
    std::atomic<bool> stopping{false};
};

}  // namespace rpclb
