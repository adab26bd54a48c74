// The admin protocol without I/O: request parsing and checking, answers, the token check,
// event filters (doc/reference/admin-protocol.md). Private to librpclb; unit-tested.
#pragma once

#include <rpclb/telemetry.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <bitset>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::admin {

/// Largest admin request (one WebSocket message, or an HTTP request body), in bytes.
inline constexpr std::size_t max_request_size = 64 * 1024;

/// Error codes of the protocol (the `error.code` member of an answer).
namespace code {
inline constexpr std::string_view bad_request = "bad_request";            // not JSON, wrong shape, bad field
inline constexpr std::string_view unknown_command = "unknown_command";    // `cmd` names no command
inline constexpr std::string_view unauthorized = "unauthorized";          // token missing or wrong
inline constexpr std::string_view too_large = "too_large";                // message over max_request_size
inline constexpr std::string_view too_many_subscribers = "too_many_subscribers";
inline constexpr std::string_view not_found = "not_found";                // no such balancer / subscription
inline constexpr std::string_view unavailable = "unavailable";            // node unreachable, no admin part there
inline constexpr std::string_view failed = "failed";                      // the command ran and failed
inline constexpr std::string_view unsupported = "unsupported";            // not possible here (e.g. stop without a hook)
}  // namespace code

/// An error answer's content.
struct Error {
    std::string code;
    std::string message;
};

/// One decoded request. `body` is the whole request object (commands read their fields
/// from it); `id` is echoed in the answer as given (any JSON number or string).
struct Request {
    boost::json::value id;
    std::optional<std::string> token;
    std::string cmd;
    std::string node;  ///< empty: the node that received the request
    boost::json::object body;
};

/// Every command name, in the order the reference lists them.
const std::vector<std::string_view>& command_names();

/// Parses one request message: a JSON object with `id` (number or string, required),
/// `cmd` (string, required), optional `token` and `node` (strings), then the command's
/// own fields, which are checked too (check_fields). On failure returns the error and, when
/// the id could be read, leaves it in `out.id` (null otherwise).
std::optional<Error> parse_request(std::string_view text, Request& out);

/// Checks the fields of a known command (types and required members); unknown_command for
/// an unknown `cmd`.
std::optional<Error> check_fields(const std::string& cmd, const boost::json::object& body);

/// `{"id":id,"result":result}`.
boost::json::object answer(const boost::json::value& id, boost::json::value result);
/// `{"id":id,"error":{"code":..,"message":..}}`.
boost::json::object error_answer(const boost::json::value& id, const Error& error);

/// Whether `given` equals `expected`, in time independent of where they differ and of
/// their lengths (both are hashed with SHA-256 and the digests compared with
/// CRYPTO_memcmp).
bool token_matches(std::string_view expected, std::string_view given) noexcept;

/// Shell-style match over the whole text: `*` any run of characters (dots included), `?`
/// one character; anything else literally.
bool glob_match(std::string_view pattern, std::string_view text) noexcept;

/// The events whose dotted name (to_string(EventName)) matches one of `patterns`; every
/// event when `patterns` is empty.
std::bitset<event_name_count> event_set(const std::vector<std::string>& patterns);

/// What a subscription lets through: the events of `events`, and when set, only those
/// whose `load_balancer` / `node` field equals the given value.
struct EventFilter {
    std::bitset<event_name_count> events;
    std::optional<std::string> load_balancer;
    std::optional<std::string> node;
    bool accepts(const Event& e) const noexcept;
};

/// Reads a subscribe request's `filter` member (absent: every event). Errors: bad_request.
std::optional<Error> parse_filter(const boost::json::object& body, EventFilter& out);

/// An event as JSON: `{"event": dotted name, ...}` with its non-empty metadata and its
/// measurements (`duration_ms` for the duration).
boost::json::object event_to_json(const Event& e);

}  // namespace rpclb::admin
