// HOST:PORT text, read and written in one place: seeds, listen and admin addresses, peers
// in logs. An IPv6 address is written in brackets, "[::1]:4370" (RFC 3986, section 3.2.2),
// so that the last ':' always separates the port.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// The two halves of "HOST:PORT".
struct HostPort {
    std::string host;  ///< without the brackets of an IPv6 address
    std::string port;  ///< as written; see parse_port
};

/// Splits `address` at its last ':' and removes the brackets of "[v6]:PORT". nullopt when
/// there is no ':' or HOST is empty; PORT is not checked (it may be empty or a service
/// name, as a resolver accepts). Thread safety: pure function.
std::optional<HostPort> split_host_port(std::string_view address);

/// PORT as a number when it is 1 to 5 decimal digits and at most 65535 (0 included);
/// nullopt otherwise. Thread safety: pure function.
std::optional<unsigned short> parse_port(std::string_view port) noexcept;

/// The prefix of a seed that stands for every address of a DNS name, "dns:NAME:PORT" (a
/// Kubernetes headless service): the mesh resolves NAME at start and at every redial.
inline constexpr std::string_view dns_seed_prefix = "dns:";

/// Why `address` cannot be dialled as HOST:PORT, or as dns:NAME:PORT ("is not HOST:PORT",
/// "has no port in 1..65535"), or nullopt when it can be tried (HOST is resolved only when
/// dialled). Used for seeds: a node logs the problem and keeps serving; rpclb-call refuses
/// the command line. Thread safety: pure function.
std::optional<std::string> dial_problem(std::string_view address);

/// "ADDRESS:PORT" of `endpoint`, with an IPv6 address in brackets ("[::1]:4370"), so that
/// the text reads back through split_host_port. Thread safety: pure function.
std::string to_host_port(const boost::asio::ip::tcp::endpoint& endpoint);

/// Parses a listen address `HOST:PORT`: HOST is an IPv4 address, an IPv6 address in
/// brackets, or `localhost` (taken as 127.0.0.1; no other name is resolved, so a node never
/// listens somewhere a resolver chose); PORT is 0..65535 (0: any free port). Throws
/// std::invalid_argument whose what() reads after the field name ("must be HOST:PORT ...,
/// got \"x\"").
boost::asio::ip::tcp::endpoint parse_listen_address(const std::string& address);

}  // namespace rpclb::detail
