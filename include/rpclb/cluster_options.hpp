// Options of a node (Cluster's constructor, the JSON config loader).
#pragma once

#include <rpclb/tls.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace rpclb {

/// Options of a node. Durations are std::chrono; defaults and ranges: doc/reference/configuration.md.
struct ClusterOptions {
    /// Node name `short@host`: exactly one '@' with non-empty parts. Required for a node
    /// that serves; a client node left without one gets unique_client_name().
    std::string name;
    /// Listener "HOST:PORT"; port 0 picks a free port (see Cluster::listen_endpoint).
    /// Ignored for client nodes.
    std::string listen = "127.0.0.1:0";
    /// "HOST:PORT" of nodes to join through, or "dns:NAME:PORT" for every address of NAME
    /// (resolved at each redial). Re-dialled every `reconnect_interval` while not connected.
    std::vector<std::string> seeds;
    /// Where the nodes register and find each other besides the seeds: empty (none), or
    /// `etcd://HOST:PORT/PREFIX` for an etcd v3 cluster reached through its JSON gateway
    /// (plain HTTP). A serving node keeps the key `PREFIX/<name>` = its advertised listen
    /// address under a lease of max(2 s, 3 × idle_timeout), rounded up to whole seconds,
    /// renewed every third of it and revoked by stop(); a client node registers nothing.
    /// Every node listed under PREFIX is dialled like a seed while it stays listed. While
    /// etcd is unreachable the node keeps serving and retries (doc/how-to/discovery.md).
    /// The URL is checked by the Cluster constructor (detail::parse_discovery_url).
    std::string discovery;
    /// Shared secret; every node of a cluster must hold the same. Required, non-empty;
    /// left empty, it is read from the `RPCLB_COOKIE` environment variable.
    std::string cookie;
    /// A client node (Erlang's hidden node): no listener, dials every node it learns of,
    /// hosts no group members.
    bool client = false;
    /// Plugin directories searched first: before RPCLB_PLUGIN_PATH, the plugin directory
    /// beside the loaded librpclb.so and the compiled-in one (PluginRegistry).
    std::vector<std::filesystem::path> plugin_path;
    /// Threads running the network (io_context). Range 1..64.
    std::size_t network_threads = 1;
    /// Threads running handlers. Range 1..1024.
    std::size_t worker_threads = 2;
    /// Sets the failure detector's timings: a silent peer is suspected after about one
    /// probe interval and dead between idle_timeout / 3 and idle_timeout later
    /// (doc/explanation/failure-detection.md). Default 3 s.
    std::chrono::milliseconds idle_timeout{3000};
    /// Longest time for a connection's WebSocket and cookie handshakes. Default 5 s.
    std::chrono::milliseconds handshake_timeout{5000};
    /// How often unconnected seeds are dialled again. Default 1 s.
    std::chrono::milliseconds reconnect_interval{1000};
    /// Longest wait in stop() for calls this node is serving to finish (after its
    /// balancers have left and drained) before connections close. Handlers still queued on
    /// the worker pool when it has passed are dropped unrun (their callers' calls fail with
    /// the closing connection; local calls with "node stopping"); running ones finish.
    /// Default 15 s.
    std::chrono::milliseconds stop_timeout{15000};
    /// Largest frame sent or accepted, in bytes. Default 16 MiB.
    std::size_t max_message_size = 16u * 1024u * 1024u;
    /// Most frames one WebSocket message carries when frames queue up behind a write on
    /// a connection (coalescing: one message and one system call for many small frames,
    /// never more than `max_message_size` bytes in all). Used only towards a peer that
    /// reads batches (it says so in its handshake); 1 turns batching off. Range 1..1024.
    /// Default 64.
    std::size_t max_batch_frames = 64;
    /// Most bytes of frames waiting to be written on one connection (back-pressure: a peer
    /// that stops reading must not grow this node's memory without bound). A request or
    /// cast that would pass it fails at once with `service_unavailable` "overloaded"
    /// (Failure::overloaded), unless the queue is empty; answers, group updates and
    /// handshake frames are never refused (they count, though). At least
    /// `max_message_size`. Default 64 MiB.
    std::size_t max_send_queue_bytes = 64u * 1024u * 1024u;
    /// Blocking calls do their own I/O: a blocking call() to another node is sent on a
    /// call channel, a connection of its own to that node driven by the calling thread,
    /// instead of being handed to a network thread and back (no thread hand-off, one
    /// context switch per call). Channels are opened on first use (at most 16 per node),
    /// pooled, and live while the pair's mesh link does; both nodes must support them (a
    /// node says so in its handshake). Asynchronous calls, casts and calls that find no
    /// free channel use the mesh link. A dial may take a quarter of the call's timeout at
    /// most; a call whose dial failed goes on the mesh link with the time left. false:
    /// every call uses the mesh link, and the node accepts no channel from its peers
    /// either (its handshake does not offer them). Default true.
    /// doc/architecture.md "Call channels".
    bool call_channels = true;
    /// TLS on every mesh connection (TlsOptions: certificate, key, CA, oldest version).
    /// Off by default (plaintext). Every node of a cluster, clients included, must agree:
    /// a TLS node and a plaintext node refuse each other.
    TlsOptions tls;

    // ---- routing defaults (predecessor-compatibility §6, the application env) --------
    /// Default of CallOptions::call_directly: load-balanced calls and the random-node
    /// helpers run on this node (the predecessor's `call_directly?`). Default false.
    bool call_directly = false;
    /// Default of CallOptions::retry: wait and try again when no member or no node
    /// matches (the predecessor's `retry?`). Default true.
    bool retry = true;
    /// Default of CallOptions::retry_count: retries after the first attempt, or
    /// `unlimited_retries`. Default 5, as in the predecessor.
    std::size_t retry_count = 5;
    /// The predecessor's `excluded_node_patterns` (predecessor-compatibility §4.3): node
    /// short names containing one of these are skipped by node filters unless the filter
    /// names the pattern itself. Default none.
    std::vector<std::string> excluded_node_patterns;
};

/// The value of the `RPCLB_COOKIE` environment variable; empty when it is unset.
///
/// Thread safety: reads the environment; safe while no thread changes it.
std::string environment_cookie();

/// A fresh client node name, `client-<16 hex digits>@<host>`: 64 random bits, and this
/// machine's host name (`localhost` when it has none). Two clients named this way collide
/// with a probability of about n² / 2⁶⁵.
///
/// Thread safety: safe.
std::string unique_client_name();

/// `options` with the values the Cluster constructor fills in before checking them: an
/// empty `cookie` takes environment_cookie(), and a client node (`client`) with an empty
/// `name` takes unique_client_name(). Values that are set are kept; nothing is checked.
/// For a program that checks options itself (rpclb::detail::check) before making a
/// Cluster.
///
/// Thread safety: as environment_cookie().
ClusterOptions with_defaults(ClusterOptions options);

}  // namespace rpclb
