#include "support/admin_socket.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/parse.hpp>

#include <chrono>

namespace rpclb::test {

namespace {

// Sends `request` to "HOST:PORT" on a connection of its own (5 s at most) and reads the answer.
HttpAnswer exchange(const std::string& address, boost::beast::http::request<boost::beast::http::string_body> request) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(5));
    const auto colon = address.rfind(':');
    stream.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
    request.set(http::field::host, address);
    request.keep_alive(false);
    request.prepare_payload();
    http::write(stream, request);
    beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(stream, buffer, response);
    return {response.result_int(), std::string(response[http::field::content_type]), response.body()};
}

}  // namespace

HttpAnswer http_get(const std::string& address, const std::string& target) {
    namespace http = boost::beast::http;
    return exchange(address, http::request<http::string_body>(http::verb::get, target, 11));
}

HttpAnswer http_post(const std::string& address, const std::string& target, const std::string& body) {
    namespace http = boost::beast::http;
    http::request<http::string_body> request(http::verb::post, target, 11);
    request.set(http::field::content_type, "application/json");
    request.body() = body;
    return exchange(address, std::move(request));
}

struct AdminSocket::Stream {
    boost::asio::io_context io;
    boost::beast::websocket::stream<boost::asio::ip::tcp::socket> ws{io};
};

AdminSocket::AdminSocket(const std::string& address, const std::string& bearer) : stream_(std::make_unique<Stream>()) {
    auto& ws = stream_->ws;
    boost::asio::ip::tcp::resolver resolver(stream_->io);
    const auto colon = address.rfind(':');
    boost::asio::connect(ws.next_layer(), resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
    if (!bearer.empty())
        ws.set_option(boost::beast::websocket::stream_base::decorator([bearer](boost::beast::websocket::request_type& r) {
            r.set(boost::beast::http::field::authorization, "Bearer " + bearer);
        }));
    ws.handshake(address, "/admin");
    ws.text(true);
}

AdminSocket::~AdminSocket() = default;

void AdminSocket::send(const std::string& text) { stream_->ws.write(boost::asio::buffer(text)); }

boost::json::object AdminSocket::receive() {
    boost::beast::flat_buffer buffer;
    stream_->ws.read(buffer);
    return boost::json::parse(boost::beast::buffers_to_string(buffer.data())).as_object();
}

}  // namespace rpclb::test
