#include "transport/link_core.hpp"

#include "json_fields.hpp"

namespace rpclb::detail {

std::optional<LinkCore::Clock::time_point> LinkCore::start_call(std::uint64_t id, Call call) {
    const auto deadline = call.deadline;
    calls_.emplace(id, std::move(call));
    deadlines_.emplace(deadline, id);
    if (armed_ && *armed_ <= deadline) return std::nullopt;
    armed_ = deadline;
    return deadline;
}

std::optional<LinkCore::Call> LinkCore::take(std::uint64_t id) {
    auto it = calls_.find(id);
    if (it == calls_.end()) return std::nullopt;
    std::optional<Call> call(std::move(it->second));
    calls_.erase(it);
    deadlines_.erase(Deadline{call->deadline, id});
    // The timer stays armed: cancelling it would cost a completion per call. When it
    // fires with nothing due it is re-armed for the earliest call left, if any.
    return call;
}

std::optional<LinkCore::Completion> LinkCore::on_response(wire::Response&& response) {
    auto call = take(response.id);
    if (!call) return std::nullopt;
    return Completion{std::move(call->done), std::move(response.result)};
}

std::optional<LinkCore::Completion> LinkCore::on_malformed_response(std::uint64_t id, std::string_view why,
                                                                    std::string_view peer) {
    auto call = take(id);
    if (!call) return std::nullopt;
    return Completion{std::move(call->done), call_error(ErrorCode::internal_server_error,
                                                        "malformed response: " + std::string(why), peer,
                                                        call->module, call->function)};
}

std::vector<LinkCore::Completion> LinkCore::on_timer(Clock::time_point now, std::string_view peer) {
    armed_.reset();
    std::vector<Completion> due;
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
        auto call = take(deadlines_.begin()->second);
        if (!call) {  // cannot happen (take erases both), but never loop on it
            deadlines_.erase(deadlines_.begin());
            continue;
        }
        due.push_back({std::move(call->done), call_failure(Failure::timeout, peer, call->module, call->function)});
    }
    return due;
}

std::optional<LinkCore::Clock::time_point> LinkCore::next_deadline() {
    if (deadlines_.empty()) return std::nullopt;
    const auto earliest = deadlines_.begin()->first;
    if (armed_ && *armed_ <= earliest) return std::nullopt;
    armed_ = earliest;
    return earliest;
}

std::vector<LinkCore::Completion> LinkCore::on_closed(const LinkClose& why, std::string_view peer) {
    auto calls = std::move(calls_);
    calls_.clear();
    deadlines_.clear();
    armed_.reset();
    std::vector<Completion> failed;
    failed.reserve(calls.size());
    for (auto& [id, call] : calls)
        failed.push_back({std::move(call.done),
                          RequestOutcome{link_failure(why.kind, peer, call.module, call.function), why.kind}});
    return failed;
}

bool LinkCore::reserve(std::size_t bytes, bool refusable) noexcept {
    const auto before = queued_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (!refusable || before == 0 || before + bytes <= max_queued_bytes_) return true;
    release(bytes);
    return false;
}

bool LinkCore::push(std::string frame) {
    const auto bytes = frame.size();
    if (queue_.push(std::move(frame))) return true;
    release(bytes);
    return false;
}

bool LinkCore::push_control(std::string frame) {
    const auto bytes = frame.size();
    if (queue_.push_control(std::move(frame))) return true;
    release(bytes);
    return false;
}

std::optional<ErrorMessage> not_json(std::string_view what, const boost::json::array& args, std::string_view peer,
                                     std::string_view module, std::string_view function) {
    for (const auto& arg : args)
        if (!json_fields::all_finite(arg)) {
            auto error = call_failure(Failure::not_json, peer, module, function);
            error.message = "the " + std::string(what) +
                            "'s arguments hold a number JSON cannot carry (NaN or infinity); nothing was sent";
            return error;
        }
    return std::nullopt;
}

std::optional<ErrorMessage> too_large(std::string_view what, std::size_t size, std::size_t max_size,
                                      std::string_view peer, std::string_view module, std::string_view function) {
    if (size <= max_size) return std::nullopt;
    auto error = call_error(ErrorCode::bad_request,
                            std::string(what) + " of " + std::to_string(size) +
                                " bytes exceeds the maximum message size of " + std::to_string(max_size),
                            peer, module, function);
    error.reason = Failure::too_large;
    return error;
}

ErrorMessage overloaded(std::size_t max_send_queue_bytes, std::string_view peer, std::string_view module,
                        std::string_view function) {
    auto error = call_failure(Failure::overloaded, peer, module, function);
    error.details["max_send_queue_bytes"] = max_send_queue_bytes;
    return error;
}

}  // namespace rpclb::detail
