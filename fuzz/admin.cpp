// libFuzzer target for the admin protocol's request decoder (src/admin/protocol.cpp): the
// input is one WebSocket text message as a console would send it. It is either refused
// with an error whose code is one of the protocol's and whose message is not empty, or
// accepted as a known command; the answer built either way serializes to JSON that parses
// back to the same value. Subscriptions' filters and the token comparison run too.
#include "json_same.hpp"

#include "admin/protocol.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace admin = rpclb::admin;

[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz_admin: %s\n  %s\n", what, detail.c_str());
    std::abort();
}

bool known_code(std::string_view code) {
    namespace c = admin::code;
    for (const auto known : {c::bad_request, c::unknown_command, c::unauthorized, c::too_large,
                             c::too_many_subscribers, c::not_found, c::unavailable, c::failed, c::unsupported})
        if (code == known) return true;
    return false;
}

// The answer's text reads back as the same JSON value (numbers within a rounding step:
// json_same.hpp).
void check_round_trip(const boost::json::object& answer) {
    const auto text = boost::json::serialize(answer);
    boost::system::error_code ec;
    const auto back = boost::json::parse(text, ec);
    if (ec) fail("an answer is not JSON", text);
    if (!rpclb::fuzz::same(back, boost::json::value(answer))) fail("an answer changed through its text", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    admin::Request request;
    if (const auto error = admin::parse_request(text, request)) {
        if (!known_code(error->code)) fail("an unknown error code", error->code);
        if (error->message.empty()) fail("an error without a message", error->code);
        if (!request.id.is_null() && !request.id.is_number() && !request.id.is_string())
            fail("an id that is neither a number nor a string", boost::json::serialize(request.id));
        check_round_trip(admin::error_answer(request.id, *error));
        return 0;
    }
    const auto& names = admin::command_names();
    if (std::find(names.begin(), names.end(), request.cmd) == names.end()) fail("an unknown command accepted", request.cmd);
    if (request.cmd == "subscribe") {
        admin::EventFilter filter;
        if (const auto error = admin::parse_filter(request.body, filter); error && !known_code(error->code))
            fail("an unknown error code from the filter", error->code);
    }
    if (request.token) {
        if (!admin::token_matches(*request.token, *request.token)) fail("a token does not match itself", *request.token);
        if (admin::token_matches(*request.token, *request.token + "x")) fail("a longer token matches", *request.token);
    }
    check_round_trip(admin::answer(request.id, request.body));
    return 0;
}
