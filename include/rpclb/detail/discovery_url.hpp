// The `discovery` option's text, read in one place: `etcd://HOST:PORT/PREFIX`, where a node
// registers itself and finds the others (doc/how-to/discovery.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// The only scheme of ClusterOptions::discovery: an etcd v3 cluster reached through its
/// JSON gateway over plain HTTP.
inline constexpr std::string_view etcd_scheme = "etcd://";

/// Longest PREFIX, in bytes: etcd takes keys far longer, but a key is PREFIX/NAME and is
/// read back into every node's memory.
inline constexpr std::size_t max_discovery_prefix = 512;

/// A parsed `etcd://HOST:PORT/PREFIX`.
struct EtcdUrl {
    std::string host;            ///< an IP address or a name to resolve, without IPv6 brackets
    unsigned short port = 0;     ///< 1..65535
    std::string prefix;          ///< without its trailing '/'; never empty
    /// "HOST:PORT", with an IPv6 address in brackets: the HTTP Host header and logs.
    std::string authority() const;
    /// The key a node named `node` registers under: "PREFIX/NODE".
    std::string key_of(std::string_view node) const { return prefix + "/" + std::string(node); }
};

/// Parses `url`, `etcd://HOST:PORT/PREFIX`: HOST an IPv4 address, an IPv6 address in
/// brackets or a host name; PORT 1..65535 (required: etcd's own default, 2379, is not
/// assumed); PREFIX one or more characters, printable UTF-8 without spaces, '?' or '#', at
/// most max_discovery_prefix bytes once its trailing '/' are removed.
///
/// Throws std::invalid_argument whose what() reads after the field name ("must be
/// etcd://HOST:PORT/PREFIX ..., got \"x\""), like parse_listen_address.
/// Thread safety: pure function.
EtcdUrl parse_discovery_url(std::string_view url);

}  // namespace rpclb::detail
