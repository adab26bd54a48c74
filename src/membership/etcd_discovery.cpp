// Discovery through etcd's v3 JSON gateway: HTTP/1.1 requests with Beast, driven by
// coroutines on one strand. The JSON is in etcd_codec.cpp.
#include "membership/etcd_discovery.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <utility>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using asio::use_awaitable;

namespace {

constexpr std::chrono::milliseconds first_backoff{250};
constexpr std::chrono::milliseconds last_backoff{5000};
// A stopping node waits no longer than this for etcd to revoke its lease.
constexpr std::chrono::milliseconds revoke_timeout{1000};

// What ended a session, said for the log.
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// At most 300 bytes of what etcd sent, for a log line: control bytes and bytes that are
// not ASCII written as \xNN, so that none cuts the line or hides what came.
std::string clipped(std::string_view text) {
    constexpr std::size_t most = 300;
    std::string shown;
    for (const char c : text.substr(0, most)) {
        const auto b = static_cast<unsigned char>(c);
        if (b >= 0x20 && b < 0x7f) {
            shown += c;
        } else {
            static constexpr char hex[] = "0123456789abcdef";
            shown += {'\\', 'x', hex[b >> 4], hex[b & 15]};
        }
    }
    if (text.size() > most) shown += "...";
    return shown;
}

// An answer's JSON, or Failure naming `what` when it is an error answer or not JSON.
json::value answer_of(const std::string& what, const http::response<http::string_body>& response) {
    boost::system::error_code ec;
    auto answer = json::parse(response.body(), ec);
    const auto status = std::to_string(response.result_int());
    if (ec) throw Failure(what + ": HTTP " + status + " with an answer that is not JSON: " + clipped(response.body()));
    if (auto message = etcd::error_message(answer))
        throw Failure(what + ": etcd answered HTTP " + status + ": " + clipped(*message));
    if (response.result() != http::status::ok) throw Failure(what + ": etcd answered HTTP " + status);
    return answer;
}

// `parse(answer)`, with an answer etcd would not send reported as a Failure of `what`.
template <class Parse>
auto parsed(const std::string& what, const json::value& answer, Parse parse) {
    try {
        return parse(answer);
    } catch (const etcd::BadAnswer& e) {
        throw Failure(what + ": not an answer etcd sends: " + e.what());
    }
}

}  // namespace

std::chrono::seconds lease_ttl(std::chrono::milliseconds idle_timeout) {
    return std::max(std::chrono::seconds(2), std::chrono::ceil<std::chrono::seconds>(3 * idle_timeout));
}

struct EtcdDiscovery::Tracked {
    Tracked(EtcdDiscovery& owner) : owner(owner), stream(std::make_shared<Stream>(owner.strand_)) {
        owner.open_.insert(stream);
    }
    ~Tracked() { owner.open_.erase(stream); }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;
    EtcdDiscovery& owner;
    std::shared_ptr<Stream> stream;
};

EtcdDiscovery::EtcdDiscovery(asio::io_context& ioc, EtcdDiscoveryOptions options,
                             std::function<void(Listed)> on_listed)
    : options_(std::move(options)),
      key_(options_.url.key_of(options_.node)),
      on_listed_(std::move(on_listed)),
      strand_(asio::make_strand(ioc)),
      resolver_(strand_),
      backoff_timer_(strand_),
      keepalive_timer_(strand_),
      list_(options_.url.prefix, options_.node),
      backoff_(first_backoff) {}

std::chrono::milliseconds EtcdDiscovery::request_timeout() const {
    return std::max<std::chrono::milliseconds>(std::chrono::milliseconds(500), options_.ttl / 3);
}

void EtcdDiscovery::start() {
    {
        std::lock_guard lock(mutex_);
        stopped_ = false;
    }
    auto self = shared_from_this();
    asio::co_spawn(strand_, run(), asio::bind_executor(strand_, [self](std::exception_ptr e) {
                       if (e) {
                           try {
                               std::rethrow_exception(e);
                           } catch (const std::exception& x) {
                               RPCLB_LOG("discovery", error) << "etcd discovery ended: " << x.what();
                           }
                       }
                       {
                           std::lock_guard lock(self->mutex_);
                           self->stopped_ = true;
                       }
                       self->stopped_changed_.notify_all();
                   }));
}

void EtcdDiscovery::begin_stop() {
    asio::post(strand_, [self = shared_from_this()] {
        if (self->stopping_) return;
        self->stopping_ = true;
        self->backoff_timer_.cancel();
        self->end_session();
    });
}

bool EtcdDiscovery::wait_stopped(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return stopped_changed_.wait_for(lock, limit, [&] { return stopped_; });
}

void EtcdDiscovery::end_session() {
    ++generation_;
    keepalive_timer_.cancel();
    resolver_.cancel();
    for (const auto& stream : open_) stream->close();  // their pending operations fail
}

asio::awaitable<void> EtcdDiscovery::run() {
    while (!stopping_) {
        try {
            co_await session();
        } catch (const std::exception& e) {
            if (!stopping_) failed(keepalive_failure_.empty() ? e.what() : keepalive_failure_);
        }
        end_session();
        if (stopping_) break;
        backoff_timer_.expires_after(backoff_);
        backoff_ = std::min(2 * backoff_, last_backoff);
        boost::system::error_code ec;
        co_await backoff_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    if (lease_ == 0) co_return;
    std::string problem;
    try {
        co_await request("/v3/lease/revoke", etcd::revoke_request(lease_), revoke_timeout);
    } catch (const std::exception& e) {
        problem = e.what();
    }
    if (problem.empty())
        RPCLB_LOG("discovery", info) << "revoked lease " << lease_ << ": " << key_ << " is deleted from etcd at "
                                     << options_.url.authority();
    else
        RPCLB_LOG("discovery", warning) << "could not revoke lease " << lease_ << " (" << problem << "): " << key_
                                        << " stays in etcd until the lease expires, within "
                                        << options_.ttl.count() << " s";
    lease_ = 0;
}

asio::awaitable<void> EtcdDiscovery::session() {
    const auto generation = ++generation_;
    keepalive_failure_.clear();
    watching_ = false;
    const auto timeout = request_timeout();
    if (!options_.address.empty()) {
        const auto grant = parsed("POST /v3/lease/grant",
                                  co_await request("/v3/lease/grant", etcd::grant_request(options_.ttl), timeout),
                                  etcd::parse_grant);
        co_await request("/v3/kv/put", etcd::put_request(key_, options_.address, grant.lease), timeout);
        // The key is under the new lease now: the previous session's lease holds nothing and
        // is revoked (if that fails it expires within the TTL). A lease granted by a session
        // whose put failed holds nothing either and expires.
        const auto previous = std::exchange(lease_, grant.lease);
        if (previous != 0) {
            try {
                co_await request("/v3/lease/revoke", etcd::revoke_request(previous), timeout);
            } catch (const std::exception& e) {
                RPCLB_LOG("discovery", debug) << "could not revoke lease " << previous << " (" << e.what()
                                              << "): it expires within " << options_.ttl.count() << " s";
            }
            if (generation != generation_) co_return;
        }
    }
    const auto range = parsed(
        "POST /v3/kv/range",
        co_await request("/v3/kv/range", etcd::range_request(options_.url.prefix + "/", max_nodes), timeout),
        etcd::parse_range);
    if (range.more)
        RPCLB_LOG("discovery", warning) << "more than " << max_nodes << " keys under " << options_.url.prefix
                                        << "/ in etcd: only the first " << max_nodes << " are dialled";
    std::vector<std::string> problems;
    list_.reset(range.kvs, problems);
    log_problems(problems);
    publish();
    asio::co_spawn(strand_, keep_alive(generation),
                   asio::bind_executor(strand_, [self = shared_from_this(), generation](std::exception_ptr e) {
                       if (!e || generation != self->generation_ || self->stopping_) return;
                       try {
                           std::rethrow_exception(e);
                       } catch (const std::exception& x) {
                           self->keepalive_failure_ = x.what();
                       }
                       self->end_session();  // the watch ends with it, and so the session
                   }));
    co_await watch(range.revision + 1, generation);
}

asio::awaitable<void> EtcdDiscovery::keep_alive(std::uint64_t generation) {
    const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(options_.ttl) / 3;
    for (;;) {
        keepalive_timer_.expires_after(period);
        boost::system::error_code ec;
        co_await keepalive_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
        if (generation != generation_) co_return;
        if (!options_.address.empty()) {  // a client node has no lease: only the tick
            const auto answer =
                co_await request("/v3/lease/keepalive", etcd::keepalive_request(lease_), request_timeout());
            if (generation != generation_) co_return;
            if (parsed("POST /v3/lease/keepalive", answer, etcd::parse_keepalive) <= 0)
                throw Failure("lease " + std::to_string(lease_) + " expired before it was renewed (etcd was out of "
                              "reach, or this node was not running, for longer than its TTL, " + std::to_string(options_.ttl.count()) + " s)");
        }
        if (watching_) working();
    }
}

asio::awaitable<void> EtcdDiscovery::connect(Stream& stream, std::chrono::milliseconds timeout) {
    const auto endpoints =
        co_await resolver_.async_resolve(options_.url.host, std::to_string(options_.url.port), use_awaitable);
    stream.expires_after(timeout);
    co_await stream.async_connect(endpoints, use_awaitable);
}

namespace {

http::request<http::string_body> post(const char* target, const std::string& host, std::string body) {
    http::request<http::string_body> request{http::verb::post, target, 11};
    request.set(http::field::host, host);
    request.set(http::field::content_type, "application/json");
    request.keep_alive(false);
    request.body() = std::move(body);
    request.prepare_payload();
    return request;
}

}  // namespace

asio::awaitable<json::value> EtcdDiscovery::request(const char* target, std::string body,
                                                    std::chrono::milliseconds timeout) {
    const auto what = std::string("POST ") + target;
    Tracked tracked(*this);
    auto& stream = *tracked.stream;
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_answer);
    try {
        co_await connect(stream, timeout);
        co_await http::async_write(stream, post(target, options_.url.authority(), std::move(body)), use_awaitable);
        beast::flat_buffer buffer;
        co_await http::async_read(stream, buffer, parser, use_awaitable);
    } catch (const boost::system::system_error& e) {
        throw Failure(what + ": " + e.code().message());
    }
    co_return answer_of(what, parser.get());
}

asio::awaitable<void> EtcdDiscovery::watch(std::int64_t start_revision, std::uint64_t generation) {
    const std::string what = "POST /v3/watch";
    Tracked tracked(*this);
    auto& stream = *tracked.stream;
    // The stream's messages, each a JSON object, split from the chunks as they come.
    json::stream_parser message;
    std::size_t message_bytes = 0;
    std::vector<json::value> messages;
    std::string bad;
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code& ec) -> std::size_t {
        std::size_t used = 0;
        while (used < data.size()) {
            boost::system::error_code json_ec;
            const auto n = message.write_some(data.data() + used, data.size() - used, json_ec);
            used += n;
            message_bytes += n;
            if (json_ec) {
                bad = what + ": the stream holds something that is not JSON (" + json_ec.message() + ")";
            } else if (message.done()) {
                messages.push_back(message.release());
                message.reset();
                message_bytes = 0;
            } else if (message_bytes > max_answer) {
                bad = what + ": a message of the stream is longer than " + std::to_string(max_answer) + " bytes";
            }
            if (!bad.empty()) {
                ec = http::error::body_limit;
                return used;
            }
        }
        return used;
    };
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;  // holds a reference to on_chunk
    parser.body_limit(max_answer);
    parser.on_chunk_body(on_chunk);
    try {
        co_await connect(stream, request_timeout());
        co_await http::async_write(
            stream, post("/v3/watch", options_.url.authority(), etcd::watch_request(options_.url.prefix + "/", start_revision)),
            use_awaitable);
        co_await http::async_read_header(stream, buffer, parser, use_awaitable);
        if (parser.get().result() != http::status::ok || !parser.chunked()) {
            co_await http::async_read(stream, buffer, parser, use_awaitable);
            answer_of(what, parser.get());  // throws for an error answer
            throw Failure(what + ": the answer is not a stream");
        }
    } catch (const boost::system::system_error& e) {
        throw Failure(what + ": " + e.code().message());
    }
    // From here on the stream has no deadline: it is quiet while nothing changes, and the
    // keepalives find out when etcd is gone (their failure closes it).
    parser.body_limit(boost::none);
    stream.expires_never();
    for (;;) {
        try {
            co_await http::async_read_some(stream, buffer, parser, use_awaitable);
        } catch (const boost::system::system_error& e) {
            if (!bad.empty()) throw Failure(bad);
            // Beast's "partial message" (or end of stream): etcd closed the stream midway.
            if (e.code() == http::error::partial_message || e.code() == http::error::end_of_stream)
                throw Failure(what + ": etcd closed the watch stream (stopped or restarted?)");
            throw Failure(what + ": " + e.code().message());
        }
        if (generation != generation_) co_return;
        for (const auto& m : messages) {
            if (auto error = etcd::error_message(m)) throw Failure(what + ": etcd answered: " + clipped(*error));
            const auto w = parsed(what, m, etcd::parse_watch);
            if (w.canceled)
                throw Failure(what + ": etcd canceled the watch: " +
                              (w.compact_revision != 0 ? "revision " + std::to_string(start_revision) +
                                                             " was compacted away"
                                                       : clipped(w.reason)));
            if (w.created) {
                // The outage, if any, ends once the session works (keep_alive), not here.
                watching_ = true;
                if (!outage_)
                    RPCLB_LOG("discovery", info)
                        << (options_.address.empty() ? "watching " + options_.url.prefix + "/"
                                                     : "registered " + key_ + " = " + options_.address)
                        << " in etcd at " << options_.url.authority() << " (lease TTL " << options_.ttl.count()
                        << " s); " << list_.nodes().size() << (list_.nodes().size() == 1 ? " other node listed" : " other nodes listed");
            }
            // This node's own key deleted, or overwritten with another value or without this
            // node's lease, while its lease lives (by hand, a restore, a tool): put it back
            // under the lease, or nobody who finds the cluster through etcd meets this node
            // (or its key outlives it). A lease that is gone makes the put fail, and the next
            // session grants a new one.
            const etcd::Event* own = nullptr;
            for (const auto& e : w.events)
                if (e.kv.key == key_) own = &e;
            if (own && !options_.address.empty() && !stopping_ &&
                (own->deleted || own->kv.value != options_.address || own->kv.lease != lease_)) {
                const auto done = own->deleted ? std::string("deleted from etcd")
                                               : "overwritten in etcd (value \"" + clipped(own->kv.value) +
                                                     "\", lease " + std::to_string(own->kv.lease) + ")";
                co_await request("/v3/kv/put", etcd::put_request(key_, options_.address, lease_), request_timeout());
                if (generation != generation_) co_return;
                RPCLB_LOG("discovery", warning) << key_ << " was " << done << " while its lease " << lease_
                                                << " lived: put back";
            }
            std::vector<std::string> problems;
            if (list_.apply(w.events, problems)) publish();
            log_problems(problems);
        }
        messages.clear();
        if (parser.is_done()) throw Failure(what + ": etcd ended the stream");
    }
}

void EtcdDiscovery::publish() {
    if (on_listed_) on_listed_(list_.nodes());
}

void EtcdDiscovery::log_problems(const std::vector<std::string>& problems) {
    for (const auto& problem : problems) {
        if (warned_.size() >= 1024) warned_.clear();
        if (warned_.insert(problem).second)
            RPCLB_LOG("discovery", warning) << "etcd at " << options_.url.authority() << ": " << problem
                                            << "; that entry is ignored";
    }
}

void EtcdDiscovery::working() {
    backoff_ = first_backoff;
    if (!outage_) return;
    outage_ = false;
    RPCLB_LOG("discovery", info) << "etcd at " << options_.url.authority() << " answers again";
}

void EtcdDiscovery::failed(const std::string& what) {
    if (outage_) {
        RPCLB_LOG("discovery", debug) << "etcd at " << options_.url.authority() << ": " << what;
        return;
    }
    outage_ = true;
    RPCLB_LOG("discovery", warning) << "etcd at " << options_.url.authority() << ": " << what
                                    << "; the node keeps serving and dialling the nodes it knows, and tries again "
                                       "after "
                                    << backoff_.count() << " ms, then up to every " << last_backoff.count()
                                    << " ms (until etcd answers, further failures are logged at debug level)";
}

}  // namespace rpclb::detail
