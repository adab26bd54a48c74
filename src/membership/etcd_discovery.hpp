// Discovery through etcd: this node's key under a lease, and the nodes listed under the
// prefix handed to the mesh (internal).
#pragma once

#include "membership/etcd_codec.hpp"

#include <rpclb/detail/discovery_url.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace rpclb::detail {

/// What EtcdDiscovery needs; built by Cluster from ClusterOptions (`discovery`, `name`,
/// `idle_timeout`) and the mesh's advertised address. Plain data.
struct EtcdDiscoveryOptions {
    EtcdUrl url;
    std::string node;     ///< this node's name: its key is PREFIX/node
    std::string address;  ///< its advertised "HOST:PORT"; empty (a client node): nothing is registered
    std::chrono::seconds ttl{9};  ///< the lease's TTL (lease_ttl)
};

/// The TTL of a node's lease: max(2 s, 3 × `idle_timeout`), rounded up to whole seconds
/// (etcd counts leases in seconds, and its default configuration grants no less than 2).
/// A killed node's key outlives it by at most this; a live node's key survives an etcd
/// hiccup of two renewals. Thread safety: pure function.
std::chrono::seconds lease_ttl(std::chrono::milliseconds idle_timeout);

/// Registers this node in etcd and follows the nodes registered there, through etcd's v3
/// JSON gateway (doc/how-to/discovery.md): this node's address under a lease of `ttl`,
/// renewed every ttl / 3, and every change of the prefix's listing to `on_listed` (name →
/// address, this node left out); its own key, deleted or overwritten, is put back. Errors:
/// any failure (etcd out of reach, or an answer it does not send) ends the session, is
/// logged once per outage and retried after a backoff (250 ms doubling to 5 s); the last
/// listing stays. The outage ends, and the backoff starts over, once a session works: its
/// watch is set up and a third of the TTL later (the first renewal of its lease) it still
/// runs. A session's lease is revoked once the next session's key is put.
/// Every answer is bounded (max_answer bytes). Thread safety: start, begin_stop and
/// wait_stopped from any thread; `on_listed` runs on a network thread, one call at a time.
class EtcdDiscovery final : public std::enable_shared_from_this<EtcdDiscovery> {
public:
    using Listed = std::map<std::string, std::string, std::less<>>;

    /// Largest answer read from etcd, and largest message of a watch stream, in bytes.
    static constexpr std::size_t max_answer = 8u * 1024u * 1024u;
    /// Most keys one listing reads: a range stops there (logged).
    static constexpr std::size_t max_nodes = etcd::NodeList::max_nodes;

    EtcdDiscovery(boost::asio::io_context& ioc, EtcdDiscoveryOptions options, std::function<void(Listed)> on_listed);

    /// Starts the first session. Once.
    void start();
    /// Ends the session and revokes the lease (bounded by a second), which deletes this
    /// node's key at once instead of at its expiry. Returns at once; wait_stopped() waits.
    void begin_stop();
    /// Waits up to `limit` for the stop begun by begin_stop() to finish; true when it has
    /// (or start() was never called). The io_context must run meanwhile.
    bool wait_stopped(std::chrono::milliseconds limit);

private:
    using Stream = boost::beast::tcp_stream;

    boost::asio::awaitable<void> run();
    boost::asio::awaitable<void> session();
    boost::asio::awaitable<void> keep_alive(std::uint64_t generation);
    boost::asio::awaitable<void> watch(std::int64_t start_revision, std::uint64_t generation);
    /// POSTs `body` to `target` and returns the JSON answer; throws (with `target` in the
    /// message) on a network error, after `timeout`, and for an error answer.
    boost::asio::awaitable<boost::json::value> request(const char* target, std::string body,
                                                       std::chrono::milliseconds timeout);
    /// A stream in use: kept in open_ (so that end_session() closes it) while this lives.
    struct Tracked;
    /// Resolves etcd's host (resolver_, which end_session() cancels) and connects `stream`,
    /// with `timeout` set for everything done on it from then on.
    boost::asio::awaitable<void> connect(Stream& stream, std::chrono::milliseconds timeout);
    void publish();
    void log_problems(const std::vector<std::string>& problems);
    /// The session failed because of `what`: logged (warning once per outage).
    void failed(const std::string& what);
    /// The session works (its watch set up, its first renewal done): the outage, if any, ends.
    void working();
    /// Ends the session's streams and timer (on the strand).
    void end_session();
    std::chrono::milliseconds request_timeout() const;

    const EtcdDiscoveryOptions options_;
    const std::string key_;
    std::function<void(Listed)> on_listed_;
    // Everything below is touched on strand_ only, except stopped_ (under mutex_).
    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    boost::asio::ip::tcp::resolver resolver_;
    boost::asio::steady_timer backoff_timer_;
    boost::asio::steady_timer keepalive_timer_;
    std::set<std::shared_ptr<Stream>> open_;  // every stream in use, closed by end_session
    etcd::NodeList list_;
    std::set<std::string> warned_;  // listing problems logged already; emptied at 1024
    std::int64_t lease_ = 0;
    std::uint64_t generation_ = 0;  // sessions started; a keep_alive of an older one ends
    std::string keepalive_failure_;  // why the session's keep_alive ended it
    bool watching_ = false;  // the session's watch is set up
    bool stopping_ = false;
    bool outage_ = false;  // a failure was logged at warning level and no session has worked since
    std::chrono::milliseconds backoff_;

    std::mutex mutex_;
    std::condition_variable stopped_changed_;
    bool stopped_ = true;
};

}  // namespace rpclb::detail
