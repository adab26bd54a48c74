// The admin port: one Beast listener serving HTTP (/metrics, /healthz, /readyz, the
// console page at / and its files) and the admin protocol on WebSocket /admin. Every
// handler runs on the admin's one I/O thread; commands run on its command pool and post
// their answers back.
#include "admin/admin_impl.hpp"
#include "admin/page.hpp"
#include <rpclb/telemetry.hpp>

#include <system_error>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <deque>
#include <map>

namespace rpclb::admin {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;

/// A connection of the admin port; close() ends it from the I/O thread.
class Session {
public:
    virtual ~Session() = default;
    virtual void close() = 0;
};

namespace {

constexpr auto http_timeout = std::chrono::seconds(30);
constexpr std::size_t read_chunk = 16 * 1024;

// One telemetry subscription of a WebSocket session. The bus listener (any thread) queues
// events here, up to `capacity`, and wakes the session once; the session moves them to its
// write queue when it has written everything before. So a slow reader costs dropped
// events, never a blocked emitter.
struct Subscription {
    std::uint64_t id = 0;
    EventFilter filter;
    std::size_t capacity = 0;
    std::shared_ptr<std::atomic<std::uint64_t>> dropped_total;
    std::mutex mutex;
    std::deque<std::string> queue;
    std::uint64_t dropped = 0;
    bool woken = false;  // a wake-up is posted and not yet served
    TelemetryBus::ScopedConnection connection;
};

class WebSocketSession final : public Session, public std::enable_shared_from_this<WebSocketSession> {
public:
    WebSocketSession(State& admin, tcp::socket socket) : admin_(admin), ws_(std::move(socket)) {}

    ~WebSocketSession() override { drop_subscriptions(); }

    void run(http::request<http::string_body> request) {
        if (admin_.options.token.empty()) {
            authenticated_ = true;
        } else if (auto auth = request.find(http::field::authorization); auth != request.end()) {
            constexpr std::string_view bearer = "Bearer ";
            const std::string_view value(auth->value().data(), auth->value().size());
            // A wrong header is counted with the first request it makes fail.
            if (value.substr(0, bearer.size()) == bearer && token_matches(admin_.options.token, value.substr(bearer.size())))
                authenticated_ = true;
            else
                wrong_header_ = true;
        }
        ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
        // Messages over max_request_size are read in pieces and discarded (then answered
        // with too_large); this only bounds what one message may cost before the close.
        ws_.read_message_max(16u * 1024u * 1024u);
        ws_.text(true);
        ws_.async_accept(request, [self = shared_from_this()](beast::error_code ec) {
            if (!ec) self->read();
        });
    }

    void close() override {
        drop_subscriptions();
        beast::error_code ec;
        beast::get_lowest_layer(ws_).socket().close(ec);
    }

    /// Queues an answer or event message (I/O thread).
    void send(std::string text) {
        out_.push_back(std::move(text));
        if (!writing_) write_next();
    }

    /// A subscription has events (I/O thread).
    void wake() {
        if (!writing_) write_next();
    }

private:
    void read() {
        ws_.async_read_some(buffer_, read_chunk, [self = shared_from_this()](beast::error_code ec, std::size_t) {
            self->on_read(ec);
        });
    }

    void on_read(beast::error_code ec) {
        if (ec) {
            drop_subscriptions();
            return;
        }
        if (buffer_.size() > max_request_size) {
            oversized_ = true;
            buffer_.consume(buffer_.size());
        }
        if (!ws_.is_message_done()) return read();
        if (oversized_) {
            oversized_ = false;
            ++admin_.requests;
            ++admin_.bad_requests;
            send(json::serialize(error_answer(nullptr, {std::string(code::too_large),
                                                        "the request is over " + std::to_string(max_request_size) +
                                                            " bytes; nothing of it was read"})));
        } else {
            handle(beast::buffers_to_string(buffer_.data()));
        }
        buffer_.consume(buffer_.size());
        read();
    }

    void handle(const std::string& text) {
        Request r;
        if (auto e = parse_request(text, r)) {
            ++admin_.requests;
            ++admin_.bad_requests;
            return send(json::serialize(error_answer(r.id, *e)));
        }
        if (!authorised(r)) return;
        if (r.cmd == "auth") authenticated_ = true;
        if (r.cmd == "subscribe" || r.cmd == "unsubscribe") {
            if (r.node.empty() || r.node == admin_.cluster.name()) {
                ++admin_.requests;
                return send(json::serialize(r.cmd == "subscribe" ? subscribe(r) : unsubscribe(r)));
            }
        }
        asio::post(admin_.commands, [self = shared_from_this(), r = std::move(r)] {
            auto answer = json::serialize(self->admin_.execute(r));
            asio::post(self->ws_.get_executor(), [self, answer = std::move(answer)]() mutable {
                self->send(std::move(answer));
            });
        });
    }

    // Checks the request's token, or the session's; answers `unauthorized` when neither
    // passes (and returns false).
    bool authorised(const Request& r) {
        if (admin_.options.token.empty()) return true;
        std::string_view why;
        if (r.token) {
            if (token_matches(admin_.options.token, *r.token)) return true;
            why = "wrong token";
        } else if (authenticated_) {
            return true;
        } else if (wrong_header_) {
            why = "wrong token (Authorization header)";
        } else {
            why = "this request needs a token (field \"token\", an \"auth\" request, or an Authorization: Bearer header)";
        }
        ++admin_.requests;
        ++admin_.wrong_tokens;
        send(json::serialize(error_answer(r.id, {std::string(code::unauthorized), std::string(why)})));
        return false;
    }

    json::object subscribe(const Request& r) {
        EventFilter filter;
        if (auto e = parse_filter(r.body, filter)) {
            ++admin_.bad_requests;
            return error_answer(r.id, *e);
        }
        if (++admin_.subscribers > admin_.options.max_subscribers) {
            --admin_.subscribers;
            return error_answer(r.id, {std::string(code::too_many_subscribers),
                                       "this node already has " + std::to_string(admin_.options.max_subscribers) +
                                           " subscriptions (admin max_subscribers)"});
        }
        auto sub = std::make_shared<Subscription>();
        sub->id = admin_.next_subscription++;
        sub->filter = std::move(filter);
        sub->capacity = admin_.options.subscriber_queue;
        sub->dropped_total = admin_.events_dropped;
        std::weak_ptr<WebSocketSession> weak = shared_from_this();
        // The listener owns the subscription's state: Signals2 may still run it once after
        // the disconnect.
        sub->connection = admin_.cluster.telemetry().connect([raw = sub, weak](const Event& e) {
            if (!raw->filter.accepts(e)) return;
            auto text = json::serialize(json::object{{"sub", raw->id}, {"event", event_to_json(e)}});
            {
                std::lock_guard lock(raw->mutex);
                if (raw->queue.size() >= raw->capacity) {
                    ++raw->dropped;
                    ++*raw->dropped_total;
                    return;
                }
                raw->queue.push_back(std::move(text));
                if (raw->woken) return;
                raw->woken = true;
            }
            if (auto self = weak.lock())
                asio::post(self->ws_.get_executor(), [self] { self->wake(); });
        });
        subscriptions_.emplace(sub->id, sub);
        return answer(r.id, json::object{{"subscription", sub->id}});
    }

    json::object unsubscribe(const Request& r) {
        const auto id = r.body.at("subscription").to_number<std::uint64_t>();
        auto it = subscriptions_.find(id);
        if (it == subscriptions_.end())
            return error_answer(r.id, {std::string(code::not_found), "no subscription " + std::to_string(id) +
                                                                         " on this connection"});
        release(*it->second);
        subscriptions_.erase(it);
        return answer(r.id, json::object{{"unsubscribed", id}});
    }

    void release(Subscription& sub) {
        sub.connection.disconnect();
        --admin_.subscribers;
    }

    void drop_subscriptions() {
        for (auto& [id, sub] : subscriptions_) release(*sub);
        subscriptions_.clear();
    }

    // Moves the subscriptions' queued events (and a note of new drops) to the write queue.
    void collect_events() {
        for (auto& [id, sub] : subscriptions_) {
            std::deque<std::string> events;
            std::uint64_t dropped = 0;
            {
                std::lock_guard lock(sub->mutex);
                events.swap(sub->queue);
                sub->woken = false;
                dropped = sub->dropped;
            }
            for (auto& e : events) out_.push_back(std::move(e));
            if (dropped != reported_drops_[id]) {
                reported_drops_[id] = dropped;
                out_.push_back(json::serialize(json::object{{"sub", id}, {"dropped", dropped}}));
            }
        }
    }

    void write_next() {
        if (out_.empty()) collect_events();
        if (out_.empty()) {
            writing_ = false;
            return;
        }
        writing_ = true;
        ws_.async_write(asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
            self->out_.pop_front();
            if (ec) {
                self->out_.clear();
                self->writing_ = false;
                self->drop_subscriptions();
                return;
            }
            self->write_next();
        });
    }

    State& admin_;
    websocket::stream<beast::tcp_stream> ws_;
    beast::flat_buffer buffer_;
    bool oversized_ = false;
    bool authenticated_ = false;
    bool wrong_header_ = false;
    std::deque<std::string> out_;
    bool writing_ = false;
    std::map<std::uint64_t, std::shared_ptr<Subscription>> subscriptions_;
    std::map<std::uint64_t, std::uint64_t> reported_drops_;
};

class HttpSession final : public Session, public std::enable_shared_from_this<HttpSession> {
public:
    HttpSession(State& admin, tcp::socket socket) : admin_(admin), stream_(std::move(socket)) {}

    void run() { read(); }

    void close() override {
        beast::error_code ec;
        stream_.socket().close(ec);
    }

private:
    void read() {
        parser_.emplace();
        parser_->body_limit(max_request_size);
        parser_->header_limit(8 * 1024);
        stream_.expires_after(http_timeout);
        http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
            self->on_read(ec);
        });
    }

    void on_read(beast::error_code ec) {
        if (ec == http::error::body_limit || ec == http::error::header_limit) {
            ++admin_.bad_requests;
            return respond(http::status::payload_too_large, "request too large\n", false);
        }
        if (ec) return close();
        auto request = parser_->release();
        if (websocket::is_upgrade(request)) {
            if (path(request) != "/admin") return respond(http::status::not_found, "WebSocket path is /admin\n", false);
            stream_.expires_never();
            auto ws = std::make_shared<WebSocketSession>(admin_, stream_.release_socket());
            admin_.track(ws);
            ws->run(std::move(request));
            return;
        }
        const bool keep_alive = request.keep_alive();
        head_ = request.method() == http::verb::head;
        if (request.method() != http::verb::get && request.method() != http::verb::head)
            return respond(http::status::method_not_allowed, "only GET\n", keep_alive);
        const auto target = path(request);
        if (target == "/healthz") return respond(http::status::ok, "ok\n", keep_alive);
        if (target == "/readyz") {
            const auto why = admin_.not_ready_reason();
            if (why.empty()) return respond(http::status::ok, "ready\n", keep_alive);
            return respond(http::status::service_unavailable, why + "\n", keep_alive);
        }
        if (target == "/metrics")
            return respond(http::status::ok, admin_.metrics_text(), keep_alive,
                           "text/plain; version=0.0.4; charset=utf-8");
        if (const auto* asset = find_page_asset(target))
            return respond(http::status::ok, std::string(asset->body), keep_alive, asset->content_type);
        return respond(http::status::not_found, "not found; try /, /metrics, /healthz, /readyz or WebSocket /admin\n",
                       keep_alive);
    }

    static std::string path(const http::request<http::string_body>& request) {
        const std::string_view target(request.target().data(), request.target().size());
        return std::string(target.substr(0, target.find('?')));
    }

    void respond(http::status status, std::string body, bool keep_alive,
                 std::string_view content_type = "text/plain; charset=utf-8") {
        auto response = std::make_shared<http::response<http::string_body>>(status, 11);
        response->set(http::field::server, "rpclb-admin");
        response->set(http::field::content_type, content_type);
        response->set(http::field::cache_control, "no-store");
        response->set("X-Content-Type-Options", "nosniff");
        // The console page loads only its own files and talks only to this port; no other
        // site may frame it (its buttons drain and stop nodes).
        if (content_type.starts_with("text/html"))
            response->set("Content-Security-Policy",
                          "default-src 'self'; img-src 'self' data:; "
                          "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
        response->keep_alive(keep_alive);
        response->body() = std::move(body);
        response->prepare_payload();
        // HEAD: the headers of the GET answer (its Content-Length too) and no body, or the
        // client would read the body as the next answer on this connection.
        if (head_) response->body().clear();
        stream_.expires_after(http_timeout);
        http::async_write(stream_, *response, [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
            if (ec || !response->keep_alive()) {
                beast::error_code ignored;
                self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                return;
            }
            self->read();
        });
    }

    State& admin_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    bool head_ = false;  // the request being answered is a HEAD
};

}  // namespace


void State::listen() {
    acceptor.open(configured.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    boost::system::error_code ec;
    acceptor.bind(configured, ec);
    if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
    // A plain "Address already in use", not Boost's source location.
    if (ec) throw std::system_error(ec);  // the caller names the address
    bound = acceptor.local_endpoint();
    accept();
    io_thread = std::thread([this] {
        io.run();
        io_done.set_value();
    });
}

void State::accept() {
    acceptor.async_accept(asio::make_strand(io), [this](boost::system::error_code ec, tcp::socket socket) {
        if (ec) return;  // closed by shutdown()
        auto session = std::make_shared<HttpSession>(*this, std::move(socket));
        track(session);
        session->run();
        accept();
    });
}

void State::track(const std::shared_ptr<admin::Session>& session) {
    std::erase_if(sessions, [](const auto& w) { return w.expired(); });
    sessions.push_back(session);
}

void State::shutdown() {
    // Close the listener and every connection on the I/O thread, wait for the commands
    // (their answers then have nowhere to go), and let run() return once every operation
    // has seen its socket closed; stop the context if something still lingers.
    asio::post(io, [this] {
        boost::system::error_code ec;
        acceptor.close(ec);
        for (auto& w : sessions)
            if (auto s = w.lock()) s->close();
        sessions.clear();
    });
    commands.join();
    asio::post(io, [this] {
        for (auto& w : sessions)
            if (auto s = w.lock()) s->close();
        sessions.clear();
    });
    work.reset();
    if (!io_thread.joinable()) return;  // never listened
    if (io_done.get_future().wait_for(std::chrono::seconds(2)) != std::future_status::ready) io.stop();
    if (io_thread.joinable()) io_thread.join();
}

}  // namespace rpclb::admin
