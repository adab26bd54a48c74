#include <rpclb/detail/host_port.hpp>

#include <stdexcept>

namespace rpclb::detail {

std::optional<HostPort> split_host_port(std::string_view address) {
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    auto host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return HostPort{std::string(host), std::string(address.substr(colon + 1))};
}

std::optional<unsigned short> parse_port(std::string_view port) noexcept {
    if (port.empty() || port.size() > 5) return std::nullopt;
    unsigned value = 0;
    for (const char c : port) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535) return std::nullopt;
    return static_cast<unsigned short>(value);
}

std::optional<std::string> dial_problem(std::string_view address) {
    if (address.starts_with(dns_seed_prefix)) address.remove_prefix(dns_seed_prefix.size());
    const auto parts = split_host_port(address);
    if (!parts) return "is not HOST:PORT";
    const auto port = parse_port(parts->port);
    if (!port || *port == 0) return "has no port in 1..65535";
    return std::nullopt;
}

std::string to_host_port(const boost::asio::ip::tcp::endpoint& endpoint) {
    const auto address = endpoint.address().to_string();
    const auto port = std::to_string(endpoint.port());
    return endpoint.address().is_v6() ? "[" + address + "]:" + port : address + ":" + port;
}

boost::asio::ip::tcp::endpoint parse_listen_address(const std::string& address) {
    const auto refuse = [&](const std::string& why) {
        throw std::invalid_argument("must be HOST:PORT with HOST an IP address or localhost" + why + ", got " +
                                    "\"" + address + "\"");
    };
    auto parts = split_host_port(address);
    if (!parts) refuse("");
    auto host = parts->host;
    if (host == "localhost") host = "127.0.0.1";
    boost::system::error_code ec;
    const auto ip = boost::asio::ip::make_address(host, ec);
    if (ec) refuse(" (\"" + host + "\" is not an IP address)");
    const auto port = parse_port(parts->port);
    if (!port) refuse(" (port 0..65535)");
    return {ip, *port};
}

}  // namespace rpclb::detail
