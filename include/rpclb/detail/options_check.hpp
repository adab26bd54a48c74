// The valid ranges of ClusterOptions, checked in one place: by the Cluster constructor
// (which throws) and by the JSON config loader (which names the field in an ErrorMessage).
// Each part checks its own options beside them: HandlerOptions in handler.hpp,
// LoadBalancerOptions in load_balancer.hpp, TlsOptions in tls.hpp, a listen address in
// host_port.hpp; this header brings those checks in too.
#pragma once

#include <rpclb/cluster_options.hpp>
#include <rpclb/handler.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/tls.hpp>

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// Whether `name` and `cookie` must be set. `optional` is for a configuration that is still
/// being assembled (a config file whose name or cookie come from flags or the environment):
/// an empty name or cookie passes, a non-empty malformed name does not.
enum class Identity { required, optional };

/// Longest node name, in bytes: a host name's 253 and room for the short part, well inside
/// the handshake's limit before authentication (max_handshake_message).
inline constexpr std::size_t max_node_name = 1024;

/// The first problem of `options`, or nullopt when every field is in range:
///
/// | field | valid |
/// |---|---|
/// | name | `short@host`: exactly one '@', both parts non-empty; UTF-8 without control characters; at most max_node_name (1024) bytes |
/// | cookie | non-empty |
/// | network_threads | 1..64 |
/// | worker_threads | 1..1024 |
/// | idle_timeout, handshake_timeout, reconnect_interval | 1 ms..max_option_duration |
/// | stop_timeout | 0..max_option_duration |
/// | max_message_size | at least 1024 bytes |
/// | max_batch_frames | 1..1024 |
/// | listen (not for a client node) | as parse_listen_address accepts |
/// | discovery | empty, or as parse_discovery_url accepts (`etcd://HOST:PORT/PREFIX`) |
///
/// `seeds` are checked when the node dials them (they may be host names to resolve).
/// Nothing is filled in here: the Cluster constructor applies rpclb::with_defaults() (the
/// cookie from `RPCLB_COOKIE`, a client node's generated name) before this check.
/// Thread safety: pure function.
std::optional<OptionProblem> check(const ClusterOptions& options, Identity identity = Identity::required);

}  // namespace rpclb::detail
