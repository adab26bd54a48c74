// The valid ranges of ClusterOptions and LoadBalancerOptions, checked in one place: by the
// Cluster constructor and start_balancer (which throw) and by the JSON config loader (which
// names the field in an ErrorMessage).
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// Longest duration an option accepts: 2^32 − 1 ms (about 49.7 days), the largest timeout
/// Erlang accepts, so that a deadline `now + duration` can never overflow a steady_clock
/// time point. The seed's `:infinity` drain timeout maps to this.
inline constexpr std::chrono::milliseconds max_option_duration{4'294'967'295};

/// One option outside its valid range.
struct OptionProblem {
    /// The option's JSON config key (`worker_threads`, `idle_timeout_ms`, `name`...).
    std::string field;
    /// Why, as a predicate that reads after the field: "must be in 1..64, got 0".
    std::string reason;

    /// `field + " " + reason`, the text Cluster's constructor throws.
    std::string message() const { return field + " " + reason; }
    /// The command-line flag of `field` as rpclb-node and rpclb-call spell it: "--" and
    /// the field with '.' and '_' as '-' (`tls.min_version` -> `--tls-min-version`).
    std::string flag() const {
        std::string f = "--" + field;
        for (auto& c : f)
            if (c == '.' || c == '_') c = '-';
        return f;
    }
};

/// Whether `name` and `cookie` must be set. `optional` is for a configuration that is still
/// being assembled (a config file whose name or cookie come from flags or the environment):
/// an empty name or cookie passes, a non-empty malformed name does not.
enum class Identity { required, optional };

/// The first problem of `options`, or nullopt when every field is in range:
///
/// | field | valid |
/// |---|---|
/// | name | `short@host`: exactly one '@', both parts non-empty; UTF-8 without control characters |
/// | cookie | non-empty |
/// | network_threads | 1..64 |
/// | worker_threads | 1..1024 |
/// | idle_timeout, handshake_timeout, reconnect_interval | 1 ms..max_option_duration |
/// | stop_timeout | 0..max_option_duration |
/// | max_message_size | at least 1024 bytes |
/// | max_batch_frames | 1..1024 |
/// | listen (not for a client node) | as parse_listen_address accepts |
///
/// `seeds` are checked when the node dials them (they may be host names to resolve).
/// Thread safety: pure function.
std::optional<OptionProblem> check(const ClusterOptions& options, Identity identity = Identity::required);

/// The problem of a function's HandlerOptions, or nullopt: `slow_threshold` must be at
/// least 1 us. register_function throws its message(). Thread safety: pure function.
std::optional<OptionProblem> check(const HandlerOptions& options);

/// The first problem of the TLS options, or nullopt when TLS is off or its files load:
/// reads `cert`, `key` and `ca` with OpenSSL exactly as the Cluster constructor does.
/// Problems, each naming its field (`tls.cert`, `tls.key`, `tls.ca`): `key` or `ca` set
/// without `cert`; `cert` without `key`; a file that cannot be read (its strerror); a
/// file without a PEM certificate or key (OpenSSL's reason); a key that does not match
/// the certificate. `min_version` needs no check (an enum). Not a pure function (reads
/// files); thread safety: safe from any thread.
std::optional<OptionProblem> check_tls(const TlsOptions& options);

/// Parses a listen address `HOST:PORT`: HOST is an IPv4 address, an IPv6 address in
/// brackets, or `localhost` (taken as 127.0.0.1; no other name is resolved, so a node never
/// listens somewhere a resolver chose); PORT is 0..65535 (0: any free port). Throws
/// std::invalid_argument whose what() reads after the field name ("must be HOST:PORT ...,
/// got \"x\"").
boost::asio::ip::tcp::endpoint parse_listen_address(const std::string& address);

/// The first problem of `options`, or nullopt: name non-empty, UTF-8 without control characters,
/// algorithm non-empty, drain_timeout in 0..max_option_duration. Whether the algorithm's
/// plugin exists and accepts `algorithm_opts` is only known when the balancer starts.
/// Thread safety: pure function.
std::optional<OptionProblem> check(const LoadBalancerOptions& options);

/// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
/// nothing above U+10FFFF), as the JSON decoder of a frame requires of every string.
/// Thread safety: pure function.
bool valid_utf8(std::string_view text) noexcept;

}  // namespace rpclb::detail
