// The settings every link of a node shares (internal).
#pragma once

#include "transport/load_gauge.hpp"
#include "transport/tls.hpp"

#include <rpclb/detail/wire.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// What the connections of a node have written, summed (relaxed counters; any thread).
struct WireCounters {
    std::atomic<std::uint64_t> frames_sent{0};    ///< frames written, batched or not
    std::atomic<std::uint64_t> messages_sent{0};  ///< WebSocket messages written
    std::atomic<std::uint64_t> overloaded{0};     ///< requests and casts refused: send queue full
};

/// The reason text of the WebSocket close (code 1008, policy violation) by which an
/// acceptor tells a dialer that its cookie proof failed. It carries nothing about the
/// cookie; a dialer that gets it stops dialling that address.
inline constexpr std::string_view cookie_refused_close_reason = "rpclb: cookie refused";
/// The reason of the WebSocket close (policy_error) with which a node refuses, or drops, a
/// connection from an incarnation whose name an older live incarnation holds: the
/// receiver reads it as LinkError::name_taken.
inline constexpr std::string_view name_taken_close_reason = "rpclb: name taken";
/// The reason of the WebSocket close (policy_error) with which a node refuses an
/// incarnation it declared dead (it stopped answering probes; a restart may hold its name
/// now): the receiver reads it as LinkError::declared_dead and gives its name up.
inline constexpr std::string_view declared_dead_close_reason = "rpclb: incarnation declared dead";

/// The reason of the WebSocket close (normal) with which a node refuses a link it does not
/// keep (a duplicate of a link it holds, a link to itself): the receiver reads it as
/// LinkError::refused, not as a failed handshake.
inline constexpr std::string_view refused_close_reason = "rpclb: refused";

/// Settings shared by every connection of a node.
struct ConnectionSettings {
    wire::PeerInfo local;
    std::string cookie;
    std::size_t max_message_size = wire::default_max_message_size;
    /// Most frames per message towards a peer that reads batches (ClusterOptions); 1: none.
    std::size_t max_batch_frames = 64;
    /// Most bytes queued for writing per connection (ClusterOptions::max_send_queue_bytes).
    std::size_t max_send_queue_bytes = std::size_t(64) << 20;
    /// Shared by the node's connections; the pointer itself never changes.
    std::shared_ptr<WireCounters> counters = std::make_shared<WireCounters>();
    std::chrono::milliseconds handshake_timeout{5000};
    /// TLS for every connection: each takes the current context when it is made; null:
    /// plain TCP. The pointer itself never changes (a reload swaps the context inside).
    std::shared_ptr<TlsCredentials> tls;
    /// This node accepts call channels from its peers (ClusterOptions::call_channels);
    /// its hellos say so (wire::Hello::channels).
    bool accept_channels = true;
    /// This node's load, which its answers to probes report (LoadGauge); shared with the
    /// RpcServer, whose answers report it too. The pointer itself never changes.
    std::shared_ptr<LoadGauge> load = std::make_shared<LoadGauge>();
};

}  // namespace rpclb::detail
