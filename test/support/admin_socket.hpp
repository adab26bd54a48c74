// Plain HTTP requests (a node's admin listener, etcd) and a raw WebSocket on a node's admin
// listener, for the integration tests. Compiled once, in the test support library (admin_socket.cpp), so that
// the tests using them do not each compile Beast's HTTP and WebSocket code.
#pragma once

#include <boost/json/object.hpp>

#include <memory>
#include <string>

namespace rpclb::test {

/// An HTTP answer.
struct HttpAnswer {
    unsigned status = 0;
    std::string content_type;
    std::string body;
};

/// GET `target` from "HOST:PORT" (HTTP/1.1, one request per connection, 5 s at most). Throws on
/// network errors.
HttpAnswer http_get(const std::string& address, const std::string& target);

/// POSTs `body` (application/json) to `target` at "HOST:PORT" (HTTP/1.1, one request per
/// connection, 5 s at most). Throws on network errors.
HttpAnswer http_post(const std::string& address, const std::string& target, const std::string& body);

/// A raw WebSocket on a node's /admin, for sending what rpclb-admin never would.
/// Blocking; throws on network errors.
class AdminSocket {
public:
    /// Connects and upgrades; `bearer` (when not empty) goes in an Authorization header.
    explicit AdminSocket(const std::string& address, const std::string& bearer = {});
    ~AdminSocket();

    void send(const std::string& text);

    /// The next message, as JSON.
    boost::json::object receive();

    /// Sends `text` and returns the next message that has an `id` (skipping events).
    boost::json::object ask(const std::string& text) {
        send(text);
        for (;;) {
            auto m = receive();
            if (m.contains("id")) return m;
        }
    }

private:
    struct Stream;
    std::unique_ptr<Stream> stream_;
};

}  // namespace rpclb::test
