// The defaults of ClusterOptions that come from the environment and from chance.
#include <rpclb/cluster_options.hpp>

#include <boost/asio/ip/host_name.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <random>
#include <sstream>
#include <utility>

namespace rpclb {

std::string environment_cookie() {
    const char* value = std::getenv("RPCLB_COOKIE");
    return value ? std::string(value) : std::string();
}

std::string unique_client_name() {
    std::random_device rd;
    const std::uint64_t bits = (std::uint64_t(rd()) << 32) ^ rd();
    boost::system::error_code ec;
    std::string host = boost::asio::ip::host_name(ec);
    // The name is "short@host": a host name with an '@' (none should have one) or none at
    // all would make a name that the options check refuses.
    if (ec || host.empty() || host.find('@') != std::string::npos) host = "localhost";
    std::ostringstream out;
    out << "client-" << std::hex << std::setfill('0') << std::setw(16) << bits << '@' << host;
    return out.str();
}

ClusterOptions with_defaults(ClusterOptions options) {
    if (options.cookie.empty()) options.cookie = environment_cookie();
    if (options.client && options.name.empty()) options.name = unique_client_name();
    return options;
}

}  // namespace rpclb
