// The admin console of one node: Prometheus and health endpoints, and the admin protocol
// (JSON over WebSocket) that shows and steers the whole cluster from any one node.
#pragma once

#include <rpclb/admin_options.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace rpclb {

class Cluster;

namespace admin {
struct State;  // the listener's state (src/admin/admin_impl.hpp)
}  // namespace admin

/// Counters of the admin listener itself (also in `/metrics` and the `stats` command).
struct AdminStats {
    std::uint64_t requests = 0;        ///< admin requests answered, errors included
    std::uint64_t wrong_tokens = 0;    ///< requests refused for a missing or wrong token
    std::uint64_t bad_requests = 0;    ///< malformed, unknown or oversized requests
    std::uint64_t subscribers = 0;     ///< telemetry subscriptions open now
    std::uint64_t events_dropped = 0;  ///< events dropped because a subscriber was slow
};

/// The admin listener of one node: one TCP port serving HTTP (`GET /metrics`, `/healthz`,
/// `/readyz`, the console page at `/` with its files) and the admin protocol on `WebSocket /admin`
/// (doc/reference/admin-protocol.md). It runs its own I/O thread and two command threads,
/// so a slow command (a drain waits for calls) never holds up the node's network threads
/// or other admin clients.
///
/// Constructing it registers the internal function `rpclb_admin.command` on the cluster;
/// the admin listener of another node calls it to forward a request naming this node.
/// Any node holding the cluster cookie may call it, as it may call any function.
///
/// It also connects an rpclb::Metrics to the node's telemetry bus (from start() on), so
/// the node emits telemetry events from then on.
///
/// Thread safety: distinct objects safe; shared objects safe. The Cluster must outlive it.
class AdminServer {
public:
    /// `request_stop` is what the `stop` command runs (after its answer is queued): it
    /// should make the program stop the node the way a SIGTERM does, from a thread of its
    /// own. Empty: the `stop` command answers an error.
    ///
    /// Throws std::invalid_argument when the options are out of range, `listen` is not
    /// "IP:PORT", or it is not a loopback address and `token` is empty.
    AdminServer(Cluster& cluster, AdminOptions options, std::function<void()> request_stop = {});
    /// Calls stop().
    ~AdminServer();

    AdminServer(const AdminServer&) = delete;
    AdminServer& operator=(const AdminServer&) = delete;

    /// Binds the listener and starts serving. Throws boost::system::system_error (a
    /// std::runtime_error) when the address can't be bound; std::logic_error when called
    /// twice.
    void start();

    /// Closes the listener and every admin connection, waits for running commands (a
    /// drain may take its balancers' drain_timeout), joins the threads. Idempotent.
    void stop();

    /// The bound listener (with the chosen port); nullopt before start().
    std::optional<boost::asio::ip::tcp::endpoint> endpoint() const;

    /// Whether the node is ready for traffic: `/readyz` answers 200 only when it is, the
    /// node is not drained, and set_stopping() has not been called. The program sets it
    /// once its balancers have started. Default false.
    void set_ready(bool ready) noexcept;

    /// The node is stopping: `/readyz` answers 503 from now on, `/healthz` still 200.
    void set_stopping() noexcept;

    /// True between a `drain` and the next `undrain`.
    bool drained() const noexcept;

    /// The listener's own counters.
    AdminStats stats() const noexcept;

    /// The `/metrics` body: Prometheus text exposition format 0.0.4.
    std::string metrics_text() const;

    /// Runs one admin request on this node, or forwards it when its `node` names another
    /// one, and returns the answer object `{"id":..., "result":...}` or
    /// `{"id":..., "error":{"code","message"}}`. `request` is the decoded request without
    /// any token check (the caller checked it). Blocks for as long as the command takes;
    /// must not run on a network thread of the cluster.
    boost::json::object execute(const boost::json::object& request);

private:
    std::shared_ptr<admin::State> impl_;
};

}  // namespace rpclb
