#include <rpclb/detail/discovery_url.hpp>

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <stdexcept>

namespace rpclb::detail {

std::string EtcdUrl::authority() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

EtcdUrl parse_discovery_url(std::string_view url) {
    const auto refuse = [&](const std::string& why) {
        throw std::invalid_argument("must be etcd://HOST:PORT/PREFIX (" + why + "), got \"" + std::string(url) +
                                    "\"");
    };
    if (!url.starts_with(etcd_scheme)) refuse("the only scheme is etcd://");
    auto rest = url.substr(etcd_scheme.size());
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) refuse("no /PREFIX");
    const auto authority = rest.substr(0, slash);
    auto prefix = rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);

    EtcdUrl parsed;
    const auto parts = split_host_port(authority);
    if (!authority.empty() && (authority.back() == ']' || authority.find(':') == std::string_view::npos))
        refuse("no :PORT; etcd's 2379 is not assumed");
    if (!parts || parts->host.empty()) refuse("no HOST:PORT");
    if (parts->host.find_first_of("[]/@ ") != std::string::npos) refuse("\"" + parts->host + "\" is not a host");
    // A bare IPv6 address would be cut at its last ':' for a port: it needs its brackets.
    if (parts->host.find(':') != std::string::npos && !authority.starts_with("["))
        refuse("an IPv6 address goes in brackets");
    const auto port = parse_port(parts->port);
    if (!port || *port == 0) refuse("PORT must be in 1..65535");
    parsed.host = parts->host;
    parsed.port = *port;

    if (prefix.empty()) refuse("PREFIX is empty");
    if (prefix.size() > max_discovery_prefix)
        refuse("PREFIX is longer than " + std::to_string(max_discovery_prefix) + " bytes");
    if (!valid_utf8(prefix)) refuse("PREFIX is not UTF-8");
    for (const unsigned char c : prefix)
        if (c < 0x21 || c == 0x7f || c == '?' || c == '#')
            refuse("PREFIX holds a space, a control character, '?' or '#'");
    parsed.prefix = std::string(prefix);
    return parsed;
}

}  // namespace rpclb::detail
