// rpclb's data-path error type, the C++ form of the predecessor's ErrorMessage.
#pragma once

#include <rpclb/error_fwd.hpp>

#include <boost/assert/source_location.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/system/error_category.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rpclb {

/// Error codes named after HTTP statuses (doc/architecture.md "Errors"; the predecessor's
/// ErrorMessage codes plus `not_found` and `internal_server_error`, predecessor-compatibility
/// §10.1).
/// The numeric value is the HTTP status.
enum class ErrorCode : int {
    bad_request = 400,            ///< malformed arguments or frame
    not_found = 404,              ///< no such function registered on the target node
    request_timeout = 408,        ///< the call's deadline passed before a reply arrived
    internal_server_error = 500,  ///< the handler threw; message is the exception text
    service_unavailable = 503,    ///< node unknown / not connected / connection lost / no members
};

/// The snake_case name of `code` ("service_unavailable"), as used on the wire and in JSON.
std::string_view to_string(ErrorCode code) noexcept;

/// Parses a code name; nullopt for an unknown name.
std::optional<ErrorCode> error_code_from_string(std::string_view name) noexcept;

/// Why rpclb itself failed an operation: the machine-readable reason behind one of the
/// five public codes, for control flow and for callers that need to tell cases apart
/// (Boost.MySQL's model: an enum with its own `error_category`, `rpclb.failure`). The
/// message of an ErrorMessage is a diagnostic; test `reason`, never the message text.
/// Values are stable; 0 means "no reason recorded" (a handler's own error, or an error
/// decoded from the wire other than `draining`).
enum class Failure : int {
    none = 0,
    no_members = 1,        ///< the balancer's group is empty (or unknown): "no members registered"
    draining = 2,          ///< the target is draining that balancer; the call was never run
    no_connection = 3,     ///< node unknown, not connected, saying bye, or connection lost
    timeout = 4,           ///< the call's deadline passed
    node_stopping = 5,     ///< this node stopped while the call waited
    no_matching_node = 6,  ///< a node filter matched no node
    cancelled = 7,         ///< the caller cancelled the operation (Asio cancellation slot)
    too_large = 8,         ///< request over max_message_size
    would_deadlock = 9,    ///< a blocking call from a network thread
    overloaded = 10,       ///< the connection's send queue is full (ClusterOptions::max_send_queue_bytes)
    /// A node refused this node's cookie (the cookies differ): this node stops dialling
    /// it, and a call that could only reach the cluster through it fails at once.
    /// Code `service_unavailable`; the message names the refusing node.
    cookie_refused = 11,
    /// The arguments of a call or cast to another node, or a handler's answer (its value
    /// or its error's details), hold a number JSON cannot carry (NaN or infinity, RFC 8259
    /// section 6). Arguments: `bad_request`, refused before anything is sent. An answer:
    /// `internal_server_error` from the serving node; the reason stays there (the wire
    /// carries code, message and details), so the caller sees only the code and message.
    /// A call to the local node serializes nothing and checks nothing.
    not_json = 12,
    /// This node gave up its name: an older live incarnation of the same name held it at
    /// its peers for twice the idle timeout (Cluster::name_taken). Calls from it fail at
    /// once. Code `service_unavailable`.
    name_taken = 13,
    /// A typed call's answer does not convert to the type its caller asked for
    /// (<rpclb/typed.hpp>): `internal_server_error`, the message says what was expected and
    /// what came; the handler did run.
    bad_reply = 14,
    /// Every node this node could reach failed the TLS handshake of its last dial there (a
    /// certificate refused by either side, or TLS on one side only), and none is connected:
    /// Cluster::wait_for_members fails at once with it. Code `service_unavailable`; the
    /// message names the address and the handshake's reason. Dials go on: one that gets
    /// through ends it.
    tls_refused = 15,
};

/// The category of Failure values; name() is "rpclb.failure".
const boost::system::error_category& failure_category() noexcept;
/// Makes `failure` an error_code of failure_category().
boost::system::error_code make_error_code(Failure failure) noexcept;

/// A data-path error: `{code, message, details}` as the predecessor's ErrorMessage.
///
/// `details` is a JSON object. For calls it always holds `node`, `module` and `function`;
/// for balancer errors it holds `load_balancer`.
///
/// Thread safety: a value type; distinct objects safe, shared objects safe for reads.
struct ErrorMessage {
    ErrorCode code = ErrorCode::internal_server_error;
    std::string message;
    boost::json::object details;
    /// Why rpclb failed the operation (a Failure in failure_category()), or empty. Not
    /// sent on the wire: a `draining` reply carries it as details {"draining": true},
    /// which from_json() reads back.
    boost::system::error_code reason{};

    /// True when `reason` is `failure`.
    bool is(Failure failure) const noexcept { return reason == make_error_code(failure); }

    /// `{"code": "...", "message": "...", "details": {...}}`.
    boost::json::value to_json() const;

    /// Inverse of to_json(); nullopt when `v` is not such an object or names an unknown code.
    static std::optional<ErrorMessage> from_json(const boost::json::value& v);

    friend bool operator==(const ErrorMessage&, const ErrorMessage&) = default;
};

/// Builds an ErrorMessage whose details name `node`, `module` and `function`.
ErrorMessage call_error(ErrorCode code, std::string message, std::string_view node,
                        std::string_view module, std::string_view function);

/// The ErrorMessage of a Failure raised by rpclb for a call, with its standard code and
/// message: no_connection → service_unavailable "noconnection"; timeout →
/// request_timeout "timeout"; node_stopping → service_unavailable "node stopping";
/// cancelled → request_timeout "cancelled"; cookie_refused → service_unavailable "cookie
/// refused" (cookie_refused_error() adds who refused); other reasons → their code and name. Details
/// name `node`, `module` and `function`.
ErrorMessage call_failure(Failure failure, std::string_view node, std::string_view module,
                          std::string_view function);

/// The error of a call that failed because `refused_by` (a node name) refused this node's
/// cookie: `service_unavailable`, Failure::cookie_refused, message "cookie refused by
/// <refused_by> (the cookies differ)", details `node`, `module`, `function` and
/// `refused_by`.
ErrorMessage cookie_refused_error(std::string_view refused_by, std::string_view node, std::string_view module,
                                  std::string_view function);

/// The `details` key that marks a `draining` reply; reserved (removed from a handler's
/// own errors).
inline constexpr std::string_view draining_detail = "draining";

/// The reply of a node that is draining `balancer` (or has left it) to a call that
/// balancer routed to it (doc/explanation/draining-and-retries.md,
/// predecessor-compatibility §10.7): the call was never run, and the caller picks another
/// member. `service_unavailable` "draining" with details {"draining": true,
/// "load_balancer", "node", "module", "function"}; a caller sees it only when every member
/// it tried was draining.
ErrorMessage draining_error(std::string_view node, std::string_view module, std::string_view function,
                            std::string_view balancer);

/// True for a draining_error() reply.
bool is_draining(const ErrorMessage& error) noexcept;

/// Thrown by `CallResult::value()` on an error, carrying the ErrorMessage.
class CallError : public std::runtime_error {
public:
    explicit CallError(ErrorMessage error);
    const ErrorMessage& error() const noexcept { return error_; }

private:
    ErrorMessage error_;
};

/// Lets `boost::system::result<T, ErrorMessage>::value()` throw CallError.
[[noreturn]] void throw_exception_from_error(const ErrorMessage& e,
                                             const boost::source_location& loc);

}  // namespace rpclb

template <>
struct boost::system::is_error_code_enum<rpclb::Failure> : std::true_type {};
