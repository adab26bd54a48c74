// The options of a node's admin listener, apart from the listener itself so that a node's
// configuration (config.hpp) can hold them without the admin console's header.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace rpclb {

/// Options of a node's admin listener (`rpclb-node --admin`, the config file's `admin`
/// section; doc/reference/configuration.md).
struct AdminOptions {
    /// Listener "HOST:PORT" (an IP address; port 0 picks a free port). Empty: no admin
    /// listener (the default).
    std::string listen;
    /// The secret every admin request must carry (doc/reference/admin-protocol.md).
    /// Empty is allowed only when `listen` is a loopback address; then no token is asked.
    std::string token;
    /// Telemetry subscriptions open at once on this node, over every connection. Range
    /// 1..1024. Default 16.
    std::size_t max_subscribers = 16;
    /// Events a subscription holds for a subscriber that reads slower than they come; the
    /// ones that don't fit are dropped and counted. Range 1..1000000. Default 1024.
    std::size_t subscriber_queue = 1024;
    /// Longest wait for a request forwarded to another node. Default 30 s, so that a
    /// forwarded drain (which waits up to the balancers' drain_timeout) can finish.
    std::chrono::milliseconds forward_timeout{30000};
};

}  // namespace rpclb
