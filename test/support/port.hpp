// A TCP port on 127.0.0.1 held for a node that is not started yet.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <string>

namespace rpclb::test {

/// Binds a socket to 127.0.0.1:0 (the kernel picks the port) with SO_REUSEADDR and does
/// not listen on it. While the reservation lives, no other socket can take the port: the
/// kernel hands it to no other port-0 bind or outgoing connection. A listener that also
/// sets SO_REUSEADDR (rpclb's does) can still bind and listen on it, since the holder
/// never listens. So two nodes can be told each other's address before either starts,
/// without the race of "find a free port, close it, hope nobody takes it".
///
/// Keep the reservation until the node has bound the port; dropping it afterwards is
/// harmless. Not thread-safe; throws boost::system::system_error when the bind fails.
class PortReservation {
public:
    PortReservation() : socket_(ioc_) {
        namespace ip = boost::asio::ip;
        socket_.open(ip::tcp::v4());
        socket_.set_option(boost::asio::socket_base::reuse_address(true));
        socket_.bind({ip::make_address("127.0.0.1"), 0});
    }

    /// The reserved port (1..65535).
    std::uint16_t port() const { return socket_.local_endpoint().port(); }
    /// "127.0.0.1:PORT", for ClusterOptions::listen and seeds.
    std::string address() const { return "127.0.0.1:" + std::to_string(port()); }

private:
    boost::asio::io_context ioc_;
    boost::asio::ip::tcp::socket socket_;
};

}  // namespace rpclb::test
