#include <rpclb/detail/options_check.hpp>

#include <rpclb/detail/discovery_url.hpp>
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

}  // namespace

std::optional<OptionProblem> check(const ClusterOptions& o, Identity identity) {
    const bool required = identity == Identity::required;
    if (required || !o.name.empty()) {
        const auto at = o.name.find('@');
        if (at == std::string::npos || at == 0 || at + 1 == o.name.size() ||
            o.name.find('@', at + 1) != std::string::npos)
            return problem("name", "must be short@host (one '@', both parts non-empty), got " + quoted(o.name));
        if (auto p = check_printable("name", o.name)) return p;
        // The name travels in the handshake, which is read before authentication with a
        // small limit (max_handshake_message).
        if (o.name.size() > max_node_name)
            return problem("name", "must be at most " + std::to_string(max_node_name) + " bytes, got " +
                                       std::to_string(o.name.size()));
    }
    if (required && o.cookie.empty()) return problem("cookie", "must not be empty");
    if (auto p = in_range<std::size_t>("network_threads", o.network_threads, 1, 64)) return p;
    if (auto p = in_range<std::size_t>("worker_threads", o.worker_threads, 1, 1024)) return p;
    if (auto p = check_duration("idle_timeout_ms", o.idle_timeout, false)) return p;
    if (auto p = check_duration("handshake_timeout_ms", o.handshake_timeout, false)) return p;
    if (auto p = check_duration("reconnect_interval_ms", o.reconnect_interval, false)) return p;
    if (auto p = check_duration("stop_timeout_ms", o.stop_timeout, true)) return p;
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
    if (!o.discovery.empty()) {
        try {
            parse_discovery_url(o.discovery);
        } catch (const std::invalid_argument& e) {
            return problem("discovery", e.what());
        }
    }
    if (o.max_message_size < 1024)
        return problem("max_message_size", "must be at least 1024 (bytes), got " + std::to_string(o.max_message_size));
    return std::nullopt;
}

}  // namespace rpclb::detail
