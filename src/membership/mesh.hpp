// Membership: the listener, dialling, gossip of known nodes, one connection per pair,
// peer loss (internal).
#pragma once

#include "membership/failure_detector.hpp"
#include "membership/frame_budget.hpp"
#include "membership/pause_watch.hpp"
#include "transport/connection.hpp"

#include <rpclb/groups.hpp>
#include <rpclb/tls.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// What the mesh needs of a node's options. Built by Cluster from the ClusterOptions fields
/// of the same names, which document each one (ranges are checked there, not here). Plain
/// data.
struct MeshOptions {
    std::string name;                   ///< this node, `short@host`
    bool client = false;                ///< a client node: no listener, dials every node
    std::string listen;                 ///< listener "HOST:PORT" (not for a client node)
    std::vector<std::string> seeds;     ///< "HOST:PORT" of nodes to join through
    std::string cookie;                 ///< the cluster's shared secret
    std::chrono::milliseconds reconnect_interval{1000};
    std::chrono::milliseconds idle_timeout{3000};
    std::chrono::milliseconds handshake_timeout{5000};
    std::size_t max_message_size = 16u * 1024u * 1024u;
    std::size_t max_batch_frames = 64;
    std::size_t max_send_queue_bytes = 64u * 1024u * 1024u;
    bool call_channels = true;          ///< accept call channels from peers
    TlsOptions tls;                     ///< TLS on every mesh connection, or off
    /// This node's load, reported to the peers that probe it; null: one of its own.
    std::shared_ptr<LoadGauge> load;
};

/// The mesh's counters; Cluster folds them into ClusterStats, whose fields of the same
/// names document them. A copy taken at one moment (each field read on its own).
struct MeshStats {
    std::uint64_t bad_frames = 0;
    std::uint64_t auth_failures = 0;
    std::uint64_t peers_lost = 0;
    std::uint64_t frames_sent = 0;
    std::uint64_t messages_sent = 0;
    std::uint64_t overloaded = 0;
    std::uint64_t known_nodes = 0;
    std::uint64_t cookie_refusals = 0;
    std::uint64_t tls_failures = 0;
    std::uint64_t unauthenticated_refused = 0;
    std::uint64_t oversize_before_handshake = 0;
    std::uint64_t name_conflicts = 0;  ///< links a peer refused: an older incarnation holds this node's name
};

/// Why this node is locked out of its cluster (Mesh::locked_out): the nodes it could reach
/// all refused it, by cookie or in the TLS handshake.
struct LockedOut {
    /// A cookie refusal: the refusing node's name. A TLS failure: the address dialled.
    std::string by;
    /// Empty for a cookie refusal; else why the TLS handshake with `by` failed.
    std::string tls_reason;
};

/// Where the mesh hands the calls and casts that peers send.
class RequestSink {
public:
    virtual ~RequestSink() = default;
    /// Runs on the connection's strand; the answer goes back through `connection`.
    virtual void serve_request(const std::shared_ptr<Connection>& connection, wire::Request&& request) = 0;
    virtual void serve_cast(wire::Cast&& cast) = 0;
    /// The caller gave up request `id` it sent on `connection` (wire::Cancel). On the
    /// connection's strand.
    virtual void cancel_request(const Connection& connection, std::uint64_t id) {
        (void)connection;
        (void)id;
    }
    /// `connection`, established, closed: its caller gave up every request it sent there
    /// that is still served. On the connection's strand, after every serve_request() of it.
    virtual void connection_closed(const Connection& connection) { (void)connection; }
};

/// The full mesh of authenticated connections (doc/architecture.md "Nodes and the mesh"):
/// listener, seeds, discovered nodes and redials, gossip, duplicate and restart
/// resolution, failure detection over the links (FailureDetector, one timer for the node),
/// peer loss (the peer leaves every group at once), and the "bye" exchange of a stopping
/// node.
/// Group frames go to `Groups`; requests and casts to the RequestSink.
///
/// Thread safety: every public member may be called from any thread; connection events
/// arrive on the connections' strands.
class Mesh final : public ConnectionOwner {
public:
    /// Throws std::invalid_argument when `options.tls` is refused (make_tls_context).
    Mesh(MeshOptions options, const std::string& incarnation, boost::asio::io_context& ioc, Groups& groups,
         RequestSink& sink);

    /// Gives the mesh the shared_ptr its asynchronous operations hold (an alias of the
    /// node's). Call once, before listen().
    void set_self(std::weak_ptr<Mesh> self) { self_ = std::move(self); }

    /// Binds the listener (not for client nodes). Throws std::invalid_argument for a bad
    /// address, std::system_error when it can't bind.
    void listen();
    /// Starts accepting, dials the seeds, redials every `reconnect_interval`.
    void start();
    /// The node is stopping: no new connection is accepted or dialled.
    void begin_stop() noexcept { stopping_ = true; }
    /// Sends "bye" to every peer and waits until each has answered or closed, up to
    /// `limit` (wire::Bye).
    void say_goodbye(std::chrono::milliseconds limit);
    /// Stops accepting and redialling, closes every mesh link after its queued frames, and
    /// waits up to `limit` for every connection to close. The call channels peers opened
    /// here are left for their callers to close (they do once the link closes after our
    /// bye), and answered until then, unless `served_all` is false (calls this node was
    /// serving outlived stop_timeout): then they are closed with the links.
    void close_all(std::chrono::milliseconds limit, bool served_all = true);

    /// The peer at the other end of mesh link `link` is taken for lost (a call channel to
    /// it broke while a call waited: CallChannels::set_on_lost): it leaves every group, and
    /// so every balancer, before this returns; then the link is aborted with `reason`
    /// (failing the requests pending on it) and what follows a lost link is done (its
    /// accepted call channels close, set_on_peer_lost). No effect when `link` is no longer
    /// the peer's established link, or the peer has said bye or answered this node's bye.
    /// Any thread but the link's strand.
    void drop_link(const Connection& link, const LinkClose& reason);
    /// The connection to `node` that may carry a new request, or null (unknown, not
    /// connected, or the peer said bye).
    std::shared_ptr<Connection> connection_to(std::string_view node) const;
    /// Connected nodes a random-node helper may choose: not clients, not saying bye.
    std::vector<std::string> routable_nodes() const;
    /// Names of the nodes with an established connection, ascending.
    std::vector<std::string> connected_nodes() const;
    /// The round trip of the last direct probe of connected node `node` that it answered
    /// (FailureDetector::rtt); nullopt when it is not connected or has not answered one yet.
    std::optional<std::chrono::microseconds> keepalive_rtt(std::string_view node) const;
    std::optional<boost::asio::ip::tcp::endpoint> listen_endpoint() const { return bound_; }
    /// The "HOST:PORT" peers dial to reach this node (see listen()); empty for a client
    /// node. Fixed once listen() has returned.
    const std::string& advertised_address() const noexcept { return settings_.local.listen; }
    /// The nodes a discovery service lists (name → "HOST:PORT"), replacing the previous
    /// list: each one not linked (by name or address) is dialled now and at every
    /// reconnect tick while it stays listed, as a seed is. This node's own entry is
    /// ignored. Any thread.
    void set_discovered(std::map<std::string, std::string, std::less<>> nodes);
    MeshStats stats() const noexcept;
    /// Entries in the table of known nodes (bounded: see on_closed).
    std::size_t known_count() const;

    // ConnectionOwner
    void on_established(const std::shared_ptr<Connection>& c) override;
    void on_frame(const std::shared_ptr<Connection>& c, wire::Frame&& frame) override;
    void on_closed(const std::shared_ptr<Connection>& c, const LinkClose& reason, bool established) override;
    void on_bad_frame(const std::shared_ptr<Connection>& c, const wire::DecodeError& error) override;
    void on_handshake_failed(const std::shared_ptr<Connection>& c, const std::string& reason) override;
    void on_cookie_refused(const std::shared_ptr<Connection>& c) override;
    void on_tls_failed(const std::shared_ptr<Connection>& c, const std::string& reason) override;
    void on_oversize_before_handshake(const std::shared_ptr<Connection>& c) override;
    void on_probe_answered(const std::shared_ptr<Connection>& c, std::uint64_t seq) override;
    void on_name_taken(const std::shared_ptr<Connection>& c) override;
    void on_declared_dead(const std::shared_ptr<Connection>& c) override;

    /// Runs (on a network thread) when a node refuses this node's cookie and leaves it
    /// shut out (see shut_out()), so that calls waiting for a route fail at once
    /// (Router::wake). Set before start().
    void set_on_cookie_refused(std::function<void()> f) { on_cookie_refused_ = std::move(f); }
    /// Runs (on a network thread) after each refusal (a refused cookie, a dial's failed TLS
    /// handshake) that leaves this node locked out (see locked_out()), with why, so that
    /// readiness waits fail at once. Set before start().
    void set_on_locked_out(std::function<void(const LockedOut&)> f) { on_locked_out_ = std::move(f); }
    /// Runs (on a network thread, no lock held) when a link to a node is established and
    /// kept, with its name, so that waits for a node end (Cluster::wait_for_node). Set
    /// before start().
    void set_on_linked(std::function<void(const std::string&)> f) { on_linked_ = std::move(f); }
    /// Runs (on a network thread, once) when this node gives up its name (name_lost()),
    /// with the message it logged. Set before start().
    void set_on_name_lost(std::function<void(const std::string&)> f) { on_name_lost_ = std::move(f); }
    /// Runs (on a network thread) when the mesh link to a node is lost, with its name, why
    /// the link ended, and whether it ended cleanly after the node's bye (its WebSocket
    /// close, not a drop), so that this node's call channels to it end too, for the same
    /// reason (CallChannels::drop). Set before start().
    void set_on_peer_lost(std::function<void(const std::string&, LinkError why, bool said_bye)> f) {
        on_peer_lost_ = std::move(f);
    }
    /// True when this node's connections run TLS (MeshOptions::tls).
    bool tls() const noexcept { return settings_.tls != nullptr; }
    /// Loads the TLS files again for the connections made from now on
    /// (TlsCredentials::reload); on success, a TLS failure already logged for a peer is
    /// logged again the next time it happens. The problem when a file fails to load (the
    /// credentials stay as they were). Only when tls(). Any thread.
    std::optional<OptionProblem> reload_tls();
    /// The settings every connection of this node uses (CallChannels copies them).
    const ConnectionSettings& settings() const noexcept { return settings_; }
    /// Call channels that peers opened to this node and that are open now.
    std::size_t accepted_channels() const;
    /// The name of the node that refused this node's cookie when `node` (a node name or
    /// a dialled HOST:PORT) did; nullopt when it did not.
    std::optional<std::string> refused_by(std::string_view node) const;
    /// When this node is shut out of the cluster by cookie refusals (no peer connected,
    /// and every seed, known node and discovered node refused the cookie), the name of a
    /// node that refused it; otherwise nullopt.
    std::optional<std::string> shut_out() const;
    /// When no peer is connected and every seed, known node this node dials and discovered
    /// node refused it, its cookie for good (shut_out()) or the TLS handshake of its last
    /// dial there: one such refusal, cookie refusals first; otherwise nullopt. Unlike a
    /// cookie refusal, a TLS failure is dialled again, and a dial that gets through ends it.
    std::optional<LockedOut> locked_out() const;
    /// Once this node has given up its name, why: some peer kept refusing it
    /// (name_taken_close_reason) for name_refusal_window(), because an older live
    /// incarnation of the name holds it there. It then dials no one, refuses every link and
    /// has closed its own. nullopt otherwise.
    std::optional<std::string> name_lost() const;
    /// How long peers may refuse this node's name before it gives the name up: twice the
    /// idle timeout, since a holder that froze is declared dead within about one and a half
    /// (doc/explanation/failure-detection.md), after which a restart gets in.
    std::chrono::milliseconds name_refusal_window() const noexcept { return 2 * options_.idle_timeout; }

private:
    void do_accept();
    /// Closes an accepted socket at once (max_unauthenticated in mesh.cpp), counts and
    /// logs it.
    void refuse_unauthenticated(Connection::Socket& socket);
    /// True at most once per refusal_log_interval (mesh.cpp) for one `last_logged`, which
    /// it updates; any thread.
    static bool refusal_log_due(std::atomic<std::chrono::steady_clock::rep>& last_logged) noexcept;
    /// Removes `c` from connecting_ (mutex_ held), keeping unauthenticated_ in step.
    void forget_connecting(const std::shared_ptr<Connection>& c);
    /// An accepted call channel is established: kept while its node's mesh link (same
    /// incarnation) is, closed at once otherwise, and closed too when that node has
    /// max_accepted_channels (mesh.cpp) open already.
    void accept_channel(const std::shared_ptr<Connection>& c);
    /// Every accepted call channel of `node`, removed.
    std::vector<std::shared_ptr<Connection>> take_channels(std::string_view node);
    void dial(const std::string& address);
    /// Dials seed `seed`, or for "dns:NAME:PORT" resolves NAME and dials each address not
    /// linked yet (one resolution in flight per seed).
    void dial_seed(const std::string& seed);
    /// True when a link's peer listens on `address` or was dialled at it (mutex_ held).
    bool linked_to(const std::string& address) const;
    /// Redials the seeds and known nodes not linked, and every regossip_ticks-th time sends
    /// this node's list to one peer in turn. Run by the node's one timer (on_probe_timer).
    void reconnect_tick();
    void on_nodes(const wire::Nodes& nodes);
    void broadcast(const std::string& frame);
    wire::Nodes known_nodes() const;
    /// After `node` was lost: forgets it unless this node redials it.
    void forget_unless_redialled(const std::string& node);
    /// Records `node` at `incarnation` in `names` (heard_ or declared_dead_; mutex_ held),
    /// which is emptied first when it holds max_names others; true if it was not there.
    static bool remember(std::map<std::string, std::string, std::less<>>& names, const std::string& node,
                         const std::string& incarnation);
    /// What follows the loss of peer link `c` once the peer has left every group: counted,
    /// logged, its accepted channels closed (unless `clean`ly closed while stopping), and
    /// on_peer_lost_ told.
    void peer_lost(const std::shared_ptr<Connection>& c, const LinkClose& reason, bool clean);
    bool dials(const std::string& node) const;
    /// Runs one event of the failure detector, `event(now)`, under detector_mutex_, re-arms
    /// probe_timer_, then does what the detector asked (act) with no lock held.
    template <class Event>
    void drive(Event&& event) {
        FailureDetector::Actions actions;
        {
            std::lock_guard lock(detector_mutex_);
            actions = event(FailureDetector::Clock::now());
            arm_probe_timer();
        }
        act(std::move(actions));
    }
    /// Does what the failure detector asked: sends its frames, then drops the links of the
    /// members it found dead or whose links it found broken.
    void act(FailureDetector::Actions actions);
    /// Arms probe_timer_ for the earlier of the detector's next instant and the reconnect
    /// tick, unless armed for it already
    /// (detector_mutex_ held).
    void arm_probe_timer();
    void on_probe_timer();
    /// Counts the detector's probe steps from the wall clock's epoch, read at `now`
    /// (detector_mutex_ held; the steps matter only to on_timer).
    void set_probe_epoch(FailureDetector::Clock::time_point now);
    /// True the first time `key` ("NAME\nINCARNATION") clashes; bounded like tls_warned_.
    bool name_clash_due(const std::string& key);
    /// True while `c`'s incarnation holds its name here (a replaced one's group frames
    /// still in flight are ignored).
    bool holds_name(const std::shared_ptr<Connection>& c) const;
    /// Takes a membership frame's token from `c`'s FrameBudget; false (counted, and said
    /// once for the link) when it is spent and the frame is to be dropped.
    bool within_budget(const std::shared_ptr<Connection>& c);
    /// Gives up this node's name (name_lost()): logs `why`, stops dialling, closes every
    /// link, tells on_name_lost_.
    void give_up_name(const std::string& why);
    /// Tells on_locked_out_ when this node is locked out (locked_out()); no lock held.
    void tell_if_locked_out();
    /// `node` sent its group sync, so it took this incarnation: it no longer refuses the name.
    void accepted_by(const std::string& node);

    const MeshOptions options_;
    ConnectionSettings settings_;
    boost::asio::io_context& ioc_;
    Groups& groups_;
    RequestSink& sink_;
    std::weak_ptr<Mesh> self_;
    std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
    std::optional<boost::asio::ip::tcp::endpoint> bound_;
    // After a failed accept (out of descriptors: the connection stays in the backlog, so
    // accepting again at once fails again at once), the next accept waits on this timer;
    // a run of failures is logged once. Both used only by the accept loop.
    boost::asio::steady_timer accept_retry_timer_;
    bool accept_failing_ = false;

    // Held while a lost peer's link leaves peers_ and the peer leaves every group
    // (on_closed, drop_link), so that a second close of the same peer's link waits for
    // the first to finish before its calls fail. Never taken under mutex_.
    std::mutex loss_mutex_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;  // a peer closed or said bye (say_goodbye, close_all)
    std::map<std::string, std::shared_ptr<Connection>, std::less<>> peers_;  // established
    std::set<std::shared_ptr<Connection>> connecting_;                       // handshaking
    std::size_t unauthenticated_ = 0;  // accepted connections in connecting_
    std::set<std::string> dialing_;       // targets being dialled
    std::set<std::string> self_targets_;  // seeds that turned out to be this node
    // Dialled addresses whose node refused our cookie, with that node's name: never
    // dialled again (the refusal is explicit, see cookie_refused_close_reason).
    std::map<std::string, std::string, std::less<>> refused_;
    std::function<void()> on_cookie_refused_;
    std::function<void(const LockedOut&)> on_locked_out_;
    std::function<void(const std::string&)> on_linked_;
    // Dialled addresses whose last dial failed its TLS handshake, with why; one that gets
    // through is erased (on_established). Cleared when it reaches 1024 entries.
    std::map<std::string, std::string, std::less<>> tls_refused_;
    std::function<void(const std::string&)> on_name_lost_;
    // Peers refusing this node's name (name_taken_close_reason), with when each first did;
    // one that sends its group sync (it accepted this incarnation) is erased. Bounded by
    // the peers this node dials.
    std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> name_refused_;
    std::optional<std::string> name_lost_;  // see name_lost()
    std::function<void(const std::string&, LinkError, bool)> on_peer_lost_;
    // Call channels peers opened to this node, by the peer's name (doc/architecture.md
    // "Call channels"); each is closed when that peer's mesh link goes.
    std::multimap<std::string, std::shared_ptr<Connection>, std::less<>> channels_;
    std::set<std::string> bad_seeds_;     // seeds that are not HOST:PORT: warned once, never dialled
    std::set<std::string> warned_seeds_;  // seeds whose host did not resolve: warned once
    std::set<std::string> resolving_;     // dns: seeds whose resolution is in flight
    std::map<std::string, std::string, std::less<>> discovered_;  // set_discovered: name → address
    /// Addresses of discovered_ to dial: not this node, not linked (mutex_ held).
    std::vector<std::string> discovered_to_dial() const;
    // Nodes learnt from connections and gossip, redialled while not connected (by the
    // node that dials) until they fail max_redials times in a row.
    struct KnownNode {
        wire::PeerInfo info;
        int failures = 0;
    };
    static constexpr int max_redials = 30;
    // Every this many reconnect ticks each node sends its peers the list of nodes it is
    // connected to. Without it, two nodes that met through gossip and then gave up on each
    // other during a long cut (max_redials) would never meet again after the heal while
    // both stay connected to a third: gossip was only sent when a connection came up.
    static constexpr int regossip_ticks = 10;
    // While links come and go (a join, a cut healing) a node that missed the announcement
    // of a newcomer would wait regossip_ticks for a list: so for settle_ticks after any
    // change of this node's links, the list goes out every tick.
    static constexpr int settle_ticks = 3;
    int ticks_ = 0;           // reconnect ticks so far; touched only by the one timer's handler
    int settling_until_ = 0;  // a list every tick up to this tick; ditto
    std::size_t lists_sent_ = 0;  // lists sent by the tick; ditto
    std::atomic<bool> view_changed_{false};  // a link came up or was lost since the last tick
    const std::size_t regossip_start_ = std::random_device{}();  // this node's place in the list turns
    std::map<std::string, KnownNode, std::less<>> known_;
    // Each node (name → incarnation) this node has heard of, from a list or a link, since
    // it last lost it. A link to a node heard of already sends it no list and announces it
    // to nobody: the node that heard of it first did both, so a join costs O(N) frames,
    // not O(N) per link. At most max_names names (authenticated peers only send them).
    std::map<std::string, std::string, std::less<>> heard_;
    static constexpr std::size_t max_names = 65536;
    // The incarnation of each name this node declared dead (or heard declared dead), the
    // last one per name, until it is linked again while no other incarnation holds the
    // name: while another holds it, it is refused (a frozen process that resumes after its
    // restart took the name). At most max_names names.
    std::map<std::string, std::string, std::less<>> declared_dead_;

    // True for the first frame a link refuses or ignores (the one that is logged).
    bool first_bad_frame(const Connection& c);
    // Each established link's FrameBudget, and whether a frame it sent was refused or
    // ignored (the first is logged, the rest only counted), until it closes.
    struct LinkFrames {
        FrameBudget budget;
        bool refusal_logged = false;
    };
    std::mutex budget_mutex_;
    std::map<const Connection*, LinkFrames> link_frames_;

    std::atomic<std::uint64_t> bad_frames_{0};
    std::atomic<std::uint64_t> auth_failures_{0};
    std::atomic<std::uint64_t> peers_lost_{0};
    std::atomic<std::uint64_t> cookie_refusals_{0};
    std::atomic<std::uint64_t> tls_failures_{0};
    std::atomic<std::uint64_t> unauthenticated_refused_{0};
    std::atomic<std::uint64_t> oversize_before_handshake_{0};
    std::atomic<std::uint64_t> name_conflicts_{0};
    // When each kind of refusal of an unauthenticated peer was last logged (steady_clock
    // ticks; 0: never).
    std::atomic<std::chrono::steady_clock::rep> last_refused_log_{0};
    std::atomic<std::chrono::steady_clock::rep> last_oversize_log_{0};
    // TLS failures already logged as warnings, "WHO\nREASON" (WHO: the address dialled, or
    // an incoming peer's IP address): a peer redialled every reconnect_interval gets one
    // warning, then debug records. Bounded: cleared when it reaches 1024 entries.
    std::set<std::string> tls_warned_;
    std::set<std::string> name_clashes_logged_;  // name clashes already warned of (name_clash_due)
    std::atomic<bool> stopping_{false};

    // The failure detector, its one timer and the instant it is armed for, and when the
    // links' kept large-frame buffers are next trimmed; all under detector_mutex_, which
    // is never held while mutex_ is taken or a frame is sent.
    mutable std::mutex detector_mutex_;
    FailureDetector detector_;
    boost::asio::steady_timer probe_timer_;
    std::optional<FailureDetector::Clock::time_point> probe_timer_at_;
    // When probe_timer_ is due and whether it ran late: a link that times out while this
    // node was not running is this node's pause, said once (peer_lost). Atomics: no lock.
    PauseWatch pause_watch_;
    std::optional<FailureDetector::Clock::time_point> next_reconnect_at_;  // detector_mutex_
    FailureDetector::Clock::time_point next_trim_{};
    bool detector_stopped_ = false;  // close_all() is done: the timer is not armed again
};

}  // namespace rpclb::detail
