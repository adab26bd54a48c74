// The admin protocol client of rpclb-admin: one WebSocket connection to a node's admin
// listener, used request by request, every step bounded by a timeout.
#pragma once

#include <rpclb/detail/host_port.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace rpclb::tools {

namespace admin_client_detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;

/// A bad command line (exit status 2).
struct Usage {
    std::string message;
};

/// An error answer, or a failure to talk to the node (exit status 1). `error`: the node's
/// error object ({code, message[, details]}) when it answered with one; null otherwise.
struct Failure {
    std::string message;
    json::value error = nullptr;
};

/// One WebSocket connection to an admin listener, used request by request. It connects on
/// the first request, so that a bad command line is reported as such whatever the network.
/// Every step (connect, handshake, write, waiting for an answer) is bounded by `timeout`,
/// so a frozen node cannot hang a script; only watch's wait for the next event is not.
class Client {
public:
    Client(std::string address, std::string token, std::chrono::milliseconds timeout)
        : address_(std::move(address)), token_(std::move(token)), timeout_(timeout), ws_(io_) {
        if (!rpclb::detail::split_host_port(address_))
            throw Usage{"--admin must be HOST:PORT, got \"" + address_ + "\""};
    }

    // Sends `request` with a fresh id and returns its `result`; an error answer throws.
    json::value call(json::object request) {
        const auto id = next_id_++;
        request["id"] = id;
        send(request);
        for (;;) {
            auto message = receive(true);
            const auto* got = message.if_contains("id");
            // Ours: an answer with this id, or an error whose id the node could not read (its
            // id is null: the request was not JSON to it). One request is out at a time.
            const bool ours = got && ((got->is_int64() && got->as_int64() == id) ||
                                      (got->is_null() && message.contains("error")));
            if (!ours) continue;  // an event, or another answer
            if (const auto* error = message.if_contains("error")) {
                const auto& e = error->as_object();
                throw Failure{json::value_to<std::string>(e.at("code")) + ": " +
                                  json::value_to<std::string>(e.at("message")),
                              e};
            }
            return message.at("result");
        }
    }

    void send(const json::object& request) {
        connect();
        const auto text = json::serialize(request);
        const auto ec = bounded("sending a request", true, [&](auto done) { ws_.async_write(asio::buffer(text), done); });
        if (ec) throw Failure{"cannot send to the admin listener: " + ec.message()};
    }

    // The next message; `bounded`: fail after the timeout (an answer), else wait (an event).
    json::object receive(bool bounded_wait = false) {
        connect();
        beast::flat_buffer buffer;
        auto ec = bounded("waiting for an answer", bounded_wait, [&](auto done) { ws_.async_read(buffer, done); });
        if (ec) throw Failure{"the connection to the admin listener closed: " + ec.message()};
        auto value = json::parse(beast::buffers_to_string(buffer.data()), ec);
        if (ec || !value.is_object()) throw Failure{"the admin listener sent something that is not a JSON object"};
        return std::move(value.as_object());
    }

private:
    void connect() {
        if (connected_) return;
        const auto& address = address_;
        const auto& token = token_;
        const auto parts = *rpclb::detail::split_host_port(address);  // checked by the constructor
        tcp::resolver resolver(io_);
        beast::error_code ec;
        const auto endpoints = resolver.resolve(parts.host, parts.port, ec);
        if (ec) throw Failure{"cannot resolve " + address + ": " + ec.message()};
        ec = bounded("connecting", true, [&](auto done) {
            asio::async_connect(ws_.next_layer(), endpoints,
                                [done](beast::error_code e, const tcp::endpoint&) mutable { done(e, 0); });
        });
        if (ec) throw Failure{"cannot connect to " + address + ": " + ec.message()};
        if (!token.empty())
            ws_.set_option(websocket::stream_base::decorator([token](websocket::request_type& request) {
                request.set(beast::http::field::authorization, "Bearer " + token);
            }));
        ec = bounded("the WebSocket handshake", true, [&](auto done) {
            ws_.async_handshake(address, "/admin", [done](beast::error_code e) mutable { done(e, 0); });
        });
        if (ec) throw Failure{"WebSocket handshake with " + address + "/admin failed: " + ec.message()};
        ws_.text(true);
        connected_ = true;
    }

    // Starts one asynchronous step with start(done) and runs it to its end, or, when
    // `with_timeout`, at most timeout_: then the connection is closed and Failure thrown.
    template <class Start>
    beast::error_code bounded(const char* what, bool with_timeout, Start start) {
        beast::error_code result;
        bool finished = false;
        start([&result, &finished](beast::error_code ec, std::size_t) {
            result = ec;
            finished = true;
        });
        io_.restart();
        if (with_timeout)
            io_.run_for(timeout_);
        else
            io_.run();
        if (finished) return result;
        beast::error_code ignored;
        ws_.next_layer().close(ignored);  // the step ends with operation_aborted
        io_.restart();
        io_.run();
        throw Failure{"no answer from " + address_ + " within " + std::to_string(timeout_.count()) + " ms (" + what +
                      "); is the node frozen or overloaded?"};
    }

    std::string address_;
    std::string token_;
    std::chrono::milliseconds timeout_;
    bool connected_ = false;
    asio::io_context io_;
    websocket::stream<tcp::socket> ws_;
    std::int64_t next_id_ = 1;
};

}  // namespace admin_client_detail

using admin_client_detail::Client;
using admin_client_detail::Failure;
using admin_client_detail::Usage;

}  // namespace rpclb::tools
