#include <rpclb/detail/options_check.hpp>

#include <rpclb/detail/host_port.hpp>

#include <stdexcept>

namespace rpclb::detail {

namespace {

OptionProblem problem(std::string field, std::string reason) {
    return OptionProblem{std::move(field), std::move(reason)};
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

template <class T>
std::optional<OptionProblem> in_range(const char* field, T value, T min, T max) {
    if (value >= min && value <= max) return std::nullopt;
    return problem(field, "must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                              std::to_string(value));
}

std::optional<OptionProblem> duration(const char* field, std::chrono::milliseconds value, bool zero_allowed) {
    const auto min = zero_allowed ? 0 : 1;
    if (value.count() >= min && value <= max_option_duration) return std::nullopt;
    return problem(field, std::string(zero_allowed ? "must be in 0.." : "must be in 1..") +
                              std::to_string(max_option_duration.count()) + " (milliseconds), got " +
                              std::to_string(value.count()));
}

// Names travel in JSON frames, which the peer's decoder refuses unless they are UTF-8, and
// in the handshake's newline-separated HMAC input.
std::optional<OptionProblem> printable_text(const char* field, std::string_view text) {
    for (const unsigned char ch : text)
        if (ch < 0x20 || ch == 0x7f) return problem(field, "must not contain control characters");
    if (!valid_utf8(text)) return problem(field, "must be valid UTF-8");
    return std::nullopt;
}

}  // namespace

boost::asio::ip::tcp::endpoint parse_listen_address(const std::string& address) {
    const auto refuse = [&](const std::string& why) {
        throw std::invalid_argument("must be HOST:PORT with HOST an IP address or localhost" + why + ", got " +
                                    quoted(address));
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

bool valid_utf8(std::string_view text) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* const end = p + text.size();
    while (p < end) {
        const unsigned char c = *p;
        std::size_t extra = 0;
        unsigned char lo = 0x80, hi = 0xbf;  // the range of the byte after the lead
        if (c < 0x80) {
            ++p;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            extra = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            extra = 2;
            if (c == 0xe0) lo = 0xa0;  // no overlong forms
            if (c == 0xed) hi = 0x9f;  // no surrogates
        } else if (c >= 0xf0 && c <= 0xf4) {
            extra = 3;
            if (c == 0xf0) lo = 0x90;  // no overlong forms
            if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
        } else {
            return false;
        }
        if (static_cast<std::size_t>(end - p) <= extra) return false;
        if (p[1] < lo || p[1] > hi) return false;
        for (std::size_t i = 2; i <= extra; ++i)
            if (p[i] < 0x80 || p[i] > 0xbf) return false;
        p += extra + 1;
    }
    return true;
}

std::optional<OptionProblem> check(const ClusterOptions& o, Identity identity) {
    const bool required = identity == Identity::required;
    if (required || !o.name.empty()) {
        const auto at = o.name.find('@');
        if (at == std::string::npos || at == 0 || at + 1 == o.name.size() ||
            o.name.find('@', at + 1) != std::string::npos)
            return problem("name", "must be short@host (one '@', both parts non-empty), got " + quoted(o.name));
        if (auto p = printable_text("name", o.name)) return p;
    }
    if (required && o.cookie.empty()) return problem("cookie", "must not be empty");
    if (auto p = in_range<std::size_t>("network_threads", o.network_threads, 1, 64)) return p;
    if (auto p = in_range<std::size_t>("worker_threads", o.worker_threads, 1, 1024)) return p;
    if (auto p = duration("idle_timeout_ms", o.idle_timeout, false)) return p;
    if (auto p = duration("handshake_timeout_ms", o.handshake_timeout, false)) return p;
    if (auto p = duration("reconnect_interval_ms", o.reconnect_interval, false)) return p;
    if (auto p = duration("stop_timeout_ms", o.stop_timeout, true)) return p;
    if (auto p = in_range<std::size_t>("max_batch_frames", o.max_batch_frames, 1, 1024)) return p;
    if (o.max_send_queue_bytes < o.max_message_size)
        return problem("max_send_queue_bytes", "must be at least max_message_size (" +
                                                   std::to_string(o.max_message_size) + " bytes), got " +
                                                   std::to_string(o.max_send_queue_bytes));
    if (!o.client) {
        try {
            parse_listen_address(o.listen);
        } catch (const std::invalid_argument& e) {
            return problem("listen", e.what());
        }
    }
    if (o.max_message_size < 1024)
        return problem("max_message_size", "must be at least 1024 (bytes), got " + std::to_string(o.max_message_size));
    return std::nullopt;
}

std::optional<OptionProblem> check(const HandlerOptions& o) {
    if (o.slow_threshold.count() >= 1) return std::nullopt;
    return problem("slow_threshold", "must be at least 1 us; got " + std::to_string(o.slow_threshold.count()) + " us");
}

std::optional<OptionProblem> check(const LoadBalancerOptions& o) {
    if (o.name.empty()) return problem("name", "must not be empty");
    if (auto p = printable_text("name", o.name)) return p;
    if (o.algorithm.empty()) return problem("algorithm", "must not be empty");
    return duration("drain_timeout_ms", o.drain_timeout, true);
}

}  // namespace rpclb::detail
