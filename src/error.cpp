#include <rpclb/error.hpp>

#include <array>
#include <utility>

namespace rpclb {
namespace {

constexpr std::array<std::pair<ErrorCode, std::string_view>, 5> code_names{{
    {ErrorCode::bad_request, "bad_request"},
    {ErrorCode::not_found, "not_found"},
    {ErrorCode::request_timeout, "request_timeout"},
    {ErrorCode::internal_server_error, "internal_server_error"},
    {ErrorCode::service_unavailable, "service_unavailable"},
}};

class FailureCategory final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "rpclb.failure"; }
    std::string message(int value) const override {
        switch (static_cast<Failure>(value)) {
            case Failure::none: return "no failure";
            case Failure::no_members: return "no members registered";
            case Failure::draining: return "draining";
            case Failure::no_connection: return "noconnection";
            case Failure::timeout: return "timeout";
            case Failure::node_stopping: return "node stopping";
            case Failure::no_matching_node: return "no nodes in cluster found with that filter";
            case Failure::cancelled: return "cancelled";
            case Failure::too_large: return "too large";
            case Failure::would_deadlock: return "blocking call from a network thread would deadlock; use async_call";
            case Failure::overloaded: return "overloaded";
            case Failure::cookie_refused: return "cookie refused";
            case Failure::not_json: return "a number JSON cannot carry (NaN or infinity)";
            case Failure::name_taken: return "name taken";
            case Failure::bad_reply: return "the answer does not convert to the type asked for";
            case Failure::tls_refused: return "TLS refused";
        }
        return "unknown rpclb failure " + std::to_string(value);
    }
};

ErrorCode code_of(Failure failure) noexcept {
    switch (failure) {
        case Failure::timeout:
        case Failure::cancelled: return ErrorCode::request_timeout;
        case Failure::too_large:
        case Failure::not_json: return ErrorCode::bad_request;
        case Failure::would_deadlock:
        case Failure::bad_reply: return ErrorCode::internal_server_error;
        default: return ErrorCode::service_unavailable;
    }
}

}  // namespace

const boost::system::error_category& failure_category() noexcept {
    static const FailureCategory category;
    return category;
}

boost::system::error_code make_error_code(Failure failure) noexcept {
    return {static_cast<int>(failure), failure_category()};
}

ErrorMessage call_failure(Failure failure, std::string_view node, std::string_view module,
                          std::string_view function) {
    auto e = call_error(code_of(failure), failure_category().message(static_cast<int>(failure)), node, module,
                        function);
    e.reason = failure;
    return e;
}

ErrorMessage cookie_refused_error(std::string_view refused_by, std::string_view node, std::string_view module,
                                  std::string_view function) {
    auto e = call_failure(Failure::cookie_refused, node, module, function);
    e.message = "cookie refused by " + std::string(refused_by) + " (the cookies differ)";
    e.details["refused_by"] = refused_by;
    return e;
}

std::string_view to_string(ErrorCode code) noexcept {
    for (const auto& [c, name] : code_names)
        if (c == code) return name;
    return "unknown";
}

std::optional<ErrorCode> error_code_from_string(std::string_view name) noexcept {
    for (const auto& [c, n] : code_names)
        if (n == name) return c;
    return std::nullopt;
}

boost::json::value ErrorMessage::to_json() const {
    return boost::json::object{{"code", to_string(code)}, {"message", message}, {"details", details}};
}

std::optional<ErrorMessage> ErrorMessage::from_json(const boost::json::value& v) {
    const auto* obj = v.if_object();
    if (!obj) return std::nullopt;
    const auto* code = obj->if_contains("code");
    const auto* message = obj->if_contains("message");
    if (!code || !code->is_string() || !message || !message->is_string()) return std::nullopt;
    auto parsed = error_code_from_string(code->get_string());
    if (!parsed) return std::nullopt;
    ErrorMessage e{*parsed, std::string(message->get_string()), {}};
    if (const auto* details = obj->if_contains("details"); details && details->is_object())
        e.details = details->get_object();
    if (is_draining(e)) e.reason = Failure::draining;
    return e;
}

ErrorMessage call_error(ErrorCode code, std::string message, std::string_view node,
                        std::string_view module, std::string_view function) {
    return ErrorMessage{code, std::move(message),
                        boost::json::object{{"node", node}, {"module", module}, {"function", function}}};
}

CallError::CallError(ErrorMessage error)
    : std::runtime_error(std::string(to_string(error.code)) + ": " + error.message),
      error_(std::move(error)) {}

void throw_exception_from_error(const ErrorMessage& e, const boost::source_location&) {
    throw CallError(e);
}

ErrorMessage draining_error(std::string_view node, std::string_view module, std::string_view function,
                            std::string_view balancer) {
    auto e = call_error(ErrorCode::service_unavailable, "draining", node, module, function);
    e.details["load_balancer"] = balancer;
    e.details[draining_detail] = true;
    e.reason = Failure::draining;
    return e;
}

bool is_draining(const ErrorMessage& error) noexcept {
    if (error.is(Failure::draining)) return true;
    if (error.code != ErrorCode::service_unavailable) return false;
    const auto* flag = error.details.if_contains(draining_detail);
    return flag && flag->is_bool() && flag->get_bool();
}

}  // namespace rpclb
