// Node configuration as JSON: ClusterOptions, LoadBalancerOptions and a whole node
// (rpclb-node --config FILE), to and from Boost.JSON values.
#pragma once

#include <rpclb/admin_options.hpp>
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/conversion.hpp>
#include <boost/json/value_from.hpp>
#include <boost/json/value_to.hpp>
#include <boost/json/value.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace rpclb {

/// Everything one node runs with: its options, its log level and the balancers it hosts.
/// The shape rpclb-node reads with `--config FILE` (doc/reference/configuration.md).
struct NodeConfig {
    /// The node's options; defaults as ClusterOptions documents them.
    ClusterOptions cluster;
    /// Minimum log severity: trace, debug, info, warning, error or fatal. Default "info".
    std::string log_level = "info";
    /// Balancers started on this node, in order. Names are unique. Default none.
    std::vector<LoadBalancerOptions> balancers;
    /// The admin listener (rpclb-node --admin); off while `admin.listen` is empty.
    AdminOptions admin;
};

/// Whether to_json writes the cookie.
enum class Secrets {
    include,  ///< write `"cookie"`: the output converts back to the same options
    omit,     ///< leave `"cookie"` and `"admin.token"` out: for showing a configuration (the admin console)
};

// ---- from JSON -----------------------------------------------------------------------------
//
// The JSON shape (durations in milliseconds, sizes in bytes):
//
//   {"name": "a@10.0.0.1", "listen": "0.0.0.0:7001", "seeds": ["10.0.0.2:7001"],
//    "discovery": "etcd://10.0.0.9:2379/rpclb", "cookie": "...", "client": false,
//    "plugins": "/opt/rpclb/plugins" | [...],
//    "network_threads": 1, "worker_threads": 2, "idle_timeout_ms": 3000,
//    "handshake_timeout_ms": 5000, "reconnect_interval_ms": 1000, "stop_timeout_ms": 15000,
//    "max_message_size": 16777216, "max_batch_frames": 64, "max_send_queue_bytes": 67108864,
//    "tls": {"cert": "node.pem", "key": "node.key", "ca": "ca.pem", "min_version": "1.3"},
//    "call_channels": true, "call_directly": false, "retry": true,
//    "retry_count": 5 | "infinity", "excluded_node_patterns": ["test"],
//    "log_level": "info",                                   (NodeConfig only)
//    "balancers": [{"name": "workers", "algorithm": "weighted_round_robin",
//                   "algorithm_opts": {...}, "node_match_list": "all" | ["web", "/^w[0-9]+@/"],
//                   "drain_timeout_ms": 15000}],             (NodeConfig only)
//    "admin": {"listen": "127.0.0.1:9090", "token": "...", "max_subscribers": 16,
//              "subscriber_queue": 1024, "forward_timeout_ms": 30000}}  (NodeConfig only)
//
// Common rules of every function below:
// - A key that is absent keeps the value of `defaults` (the struct's own defaults unless
//   given). `null` is not "absent": it is a type error.
// - An unknown key is an error naming it, so a misspelt key ("idle_timout_ms") never passes
//   silently; when a document has an unknown key and another error, the unknown key is the
//   one reported, since the other is often its consequence.
// - Types and ranges are those of detail::check (the Cluster constructor's own checks), plus:
//   strings where strings are expected, non-negative integers (not 1.0, not 1e3) for counts
//   and durations, a node_match_list regex must compile, balancer names are unique,
//   log_level is a known level. "name" and "cookie" may be absent or empty (a config still
//   being assembled); a non-empty "name" must be short@host.
// - Errors: ErrorMessage code `bad_request`, message `config field "<path>": <reason>`, for
//   example `config field "balancers[0].drain_timeout_ms": must be a non-negative integer
//   (milliseconds), got -1`, details {"field": "<path>"}. Paths use `.` for keys and `[i]`
//   for array elements; the whole document is the empty path.
// - Not checked here (only known when the node starts): that `listen` and `seeds` resolve,
//   that the plugin directories exist, that an algorithm's plugin loads and accepts its
//   algorithm_opts.
//
// Thread safety: pure functions.

/// ClusterOptions from a JSON object of the ClusterOptions keys above. "name" and "cookie"
/// may be absent or empty (Cluster's constructor then refuses the options); use
/// `validate(NodeConfig)` or construct the Cluster to require them.
Result<ClusterOptions> cluster_options_from_json(const boost::json::value& json,
                                                 const ClusterOptions& defaults = {});

/// LoadBalancerOptions from a JSON object of the balancer keys above; "name" is required.
/// node_match_list: "all", or an array of strings, each a NodeFilter (`/PATTERN/` = an
/// ECMAScript regex, anything else a substring of `short@host`; NodeFilter::parse); an
/// empty array matches no node. An invalid regex is an error naming the element.
Result<LoadBalancerOptions> load_balancer_options_from_json(const boost::json::value& json);

/// A NodeConfig from a JSON object: the ClusterOptions keys plus "log_level" and
/// "balancers" (an array of balancer objects; when present it replaces the balancers of
/// `defaults`). "name" and "cookie" may be absent or empty, so that rpclb-node can take them
/// from flags or the environment; call validate() once the configuration is complete.
Result<NodeConfig> node_config_from_json(const boost::json::value& json, const NodeConfig& defaults = {});

/// Reads `file` and converts it with node_config_from_json. The file is JSON with two
/// conveniences for hand-written configs: comments (`//` and `/* */`) and trailing commas.
///
/// Errors (`bad_request`, details always hold {"file": path}):
/// - unreadable: `<file>: cannot read the config file: <strerror>`;
/// - not JSON: `<file>:<line>:<column>: invalid JSON: <reason>`, details also hold
///   "line", "column" (1-based) and "offset" (0-based byte offset);
/// - a bad field: `<file>: config field "<path>": <reason>`, details also hold "field".
Result<NodeConfig> load_node_config(const std::filesystem::path& file, const NodeConfig& defaults = {});

/// Checks a complete configuration before anything is built: the rules above with "name"
/// and "cookie" required, then the TLS files (detail::check_tls: they are read, so this is
/// the one function here that touches the file system; relative paths are relative to the
/// working directory). Same errors as node_config_from_json (`config field "tls.key": ...`);
/// returns the first one.
Result<void> validate(const NodeConfig& config);

// ---- to JSON --------------------------------------------------------------------------------

/// The JSON form of `options`: every key of cluster_options_from_json, defaults included,
/// "plugins" always an array, "retry_count" "infinity" for unlimited_retries.
boost::json::object to_json(const ClusterOptions& options, Secrets secrets);

/// The JSON form of a balancer's options. node_match_list is "all" or an array where regex
/// filters are written `/PATTERN/` (so a substring filter whose own text starts and ends
/// with '/' reads back as a regex).
boost::json::object to_json(const LoadBalancerOptions& options);

/// The JSON form of a node's configuration; node_config_from_json of the result (with
/// Secrets::include) gives back an equal configuration.
boost::json::object to_json(const NodeConfig& config, Secrets secrets);

// ---- Boost.JSON conversion customisation --------------------------------------------------
//
// So that `boost::json::value_from(config)` and `boost::json::value_to<rpclb::NodeConfig>(v)`
// work (also inside containers). value_from writes the cookie (Secrets::include); value_to
// throws CallError carrying the ErrorMessage of the *_from_json function.

void tag_invoke(boost::json::value_from_tag, boost::json::value& json, const ClusterOptions& options);
void tag_invoke(boost::json::value_from_tag, boost::json::value& json, const LoadBalancerOptions& options);
void tag_invoke(boost::json::value_from_tag, boost::json::value& json, const NodeConfig& config);
ClusterOptions tag_invoke(boost::json::value_to_tag<ClusterOptions>, const boost::json::value& json);
LoadBalancerOptions tag_invoke(boost::json::value_to_tag<LoadBalancerOptions>, const boost::json::value& json);
NodeConfig tag_invoke(boost::json::value_to_tag<NodeConfig>, const boost::json::value& json);

}  // namespace rpclb
