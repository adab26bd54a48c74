// Conversions behind <rpclb/typed.hpp>: C++ values to and from a call's JSON, with errors
// that say, in words, what was expected and what came.
#pragma once

#include <rpclb/error.hpp>

#include <boost/asio/associator.hpp>
#include <boost/callable_traits/args.hpp>
#include <boost/callable_traits/return_type.hpp>
#include <boost/core/demangle.hpp>
#include <boost/json/array.hpp>
#include <boost/json/conversion.hpp>
#include <boost/json/object.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_from.hpp>
#include <boost/json/value_to.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace rpclb {
template <class T>
struct Reply;
}  // namespace rpclb

namespace rpclb::detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
struct is_result : std::false_type {};
template <class T>
struct is_result<boost::system::result<T, ErrorMessage>> : std::true_type {};

template <class T>
struct is_reply : std::false_type {};
template <class T>
struct is_reply<Reply<T>> : std::true_type {};

/// "an integer", "a string", "an array", ... for the C++ type `T` a value must convert to;
/// a user type by its demangled name ("a inventory::Item" reads oddly, so "inventory::Item").
template <class T>
std::string expected_words() {
    using U = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<U, bool>) return "a boolean";
    else if constexpr (std::is_integral_v<U>) return std::is_signed_v<U> ? "an integer" : "a non-negative integer";
    else if constexpr (std::is_floating_point_v<U>) return "a number";
    else if constexpr (std::is_same_v<U, boost::json::value>) return "any JSON value";
    else if constexpr (std::is_same_v<U, boost::json::object>) return "an object";
    else if constexpr (std::is_same_v<U, boost::json::array>) return "an array";
    else if constexpr (std::is_convertible_v<U, std::string_view> || std::is_same_v<U, boost::json::string>)
        return "a string";
    else if constexpr (is_optional<U>::value) return expected_words<typename U::value_type>() + " or null";
    else if constexpr (boost::json::is_map_like<U>::value) return "an object";
    else if constexpr (boost::json::is_sequence_like<U>::value || boost::json::is_tuple_like<U>::value)
        return "an array";
    else return boost::core::demangle(typeid(U).name());
}

/// "string", "integer", "number", "boolean", "null", "array", "object": the kind of `v`.
inline std::string_view kind_words(const boost::json::value& v) noexcept {
    switch (v.kind()) {
        case boost::json::kind::null: return "null";
        case boost::json::kind::bool_: return "boolean";
        case boost::json::kind::int64:
        case boost::json::kind::uint64: return "integer";
        case boost::json::kind::double_: return "number";
        case boost::json::kind::string: return "string";
        case boost::json::kind::array: return "array";
        case boost::json::kind::object: return "object";
    }
    return "unknown";
}

/// `v` as a `T` (Boost.JSON's value_to, so a user type converts through its tag_invoke),
/// or the text "expected <words>, got <kind>[: why]". Never throws.
template <class T>
boost::system::result<T, std::string> convert(const boost::json::value& v) {
    const auto expected = expected_words<T>();
    const auto got = kind_words(v);
    std::string why;
    try {
        auto r = boost::json::try_value_to<T>(v);
        if (r) return boost::system::result<T, std::string>(boost::system::in_place_value, std::move(*r));
        namespace je = boost::json;
        const auto& ec = r.error();
        const bool kind_mismatch = ec == je::error::not_string || ec == je::error::not_number ||
                                   ec == je::error::not_bool || ec == je::error::not_array ||
                                   ec == je::error::not_object || ec == je::error::not_null;
        // Say why when the kinds alone don't: a number with a fraction where an integer is
        // expected, the right kind with a value out of range, or an element or member that
        // didn't convert.
        if (!kind_mismatch || expected.find(got) != std::string::npos) {
            if (ec != je::error::not_exact)
                why = ec.message();
            else if (v.is_double() && std::trunc(v.get_double()) != v.get_double())
                why = "not a whole number";
            else
                why = "out of range";
        }
    } catch (const std::exception& e) {
        why = e.what();  // a user's tag_invoke(value_to_tag<T>) that throws
    }
    std::string text = "expected " + expected + ", got " + std::string(got);
    if (!why.empty()) text += " (" + why + ")";
    return boost::system::result<T, std::string>(boost::system::in_place_error, std::move(text));
}

/// The JSON array of a typed call's arguments, each through value_from.
template <class... Args>
boost::json::array to_arguments(const Args&... args) {
    boost::json::array a;
    a.reserve(sizeof...(Args));
    (a.push_back(boost::json::value_from(args)), ...);
    return a;
}

/// A handler's answer from what a typed function returned: void → null, Result<U> → its
/// error as is or its value, anything else through value_from.
template <class R, class F, class Tuple>
CallResult answer_of(F& f, Tuple&& arguments) {
    if constexpr (std::is_void_v<R>) {
        std::apply(f, std::forward<Tuple>(arguments));
        return boost::json::value(nullptr);
    } else if constexpr (is_result<R>::value) {
        auto r = std::apply(f, std::forward<Tuple>(arguments));
        if (!r) return std::move(r).error();
        if constexpr (std::is_void_v<typename R::value_type>) return boost::json::value(nullptr);
        else return boost::json::value_from(std::move(*r));
    } else {
        return boost::json::value_from(std::apply(f, std::forward<Tuple>(arguments)));
    }
}

/// The Handler of a typed function `f`: checks the count of arguments, converts each to
/// its parameter's type, calls `f`, converts what it returns. `names` names the
/// parameters (empty: none).
template <class F>
class TypedHandler {
public:
    using Parameters = boost::callable_traits::args_t<F>;
    using Return = boost::callable_traits::return_type_t<F>;
    static constexpr std::size_t arity = std::tuple_size_v<Parameters>;

    TypedHandler(F f, std::vector<std::string> names) : f_(std::move(f)), names_(std::move(names)) {}

    CallResult operator()(const boost::json::array& args) {
        // Trailing std::optional parameters may be left out (they are then empty).
        if (args.size() > arity || args.size() < required())
            return bad_request("expected " + count_words() + ", got " + std::to_string(args.size()));
        return call(args, std::make_index_sequence<arity>{});
    }

private:
    template <std::size_t I>
    using Parameter = std::remove_cvref_t<std::tuple_element_t<I, Parameters>>;

    template <std::size_t... I>
    static constexpr std::size_t required_of(std::index_sequence<I...>) {
        std::size_t n = 0;
        ((n = is_optional<Parameter<I>>::value ? n : I + 1), ...);
        return n;
    }
    static constexpr std::size_t required() { return required_of(std::make_index_sequence<arity>{}); }

    template <std::size_t... I>
    CallResult call(const boost::json::array& args, std::index_sequence<I...>) {
        std::tuple<std::optional<Parameter<I>>...> converted;
        std::optional<ErrorMessage> error;
        (convert_one<I>(args, std::get<I>(converted), error), ...);
        if (error) return std::move(*error);
        return answer_of<Return>(f_, std::forward_as_tuple(std::move(*std::get<I>(converted))...));
    }

    template <std::size_t I>
    void convert_one(const boost::json::array& args, std::optional<Parameter<I>>& out,
                     std::optional<ErrorMessage>& error) {
        if (error) return;
        if (I >= args.size()) {
            out.emplace();  // an optional left out
            return;
        }
        auto r = convert<Parameter<I>>(args[I]);
        if (r) out.emplace(std::move(*r));
        else error = bad_request(argument_name(I) + ": " + r.error(), I);
    }

    std::string argument_name(std::size_t i) const {
        auto s = "argument " + std::to_string(i + 1);
        if (i < names_.size()) s += " (" + names_[i] + ")";
        return s;
    }

    std::string count_words() const {
        auto s = required() == arity ? std::to_string(arity) : std::to_string(required()) + " to " + std::to_string(arity);
        s += arity == 1 ? " argument" : " arguments";
        if (!names_.empty()) {
            s += " (";
            for (std::size_t i = 0; i < names_.size(); ++i) s += (i ? ", " : "") + names_[i];
            s += ")";
        }
        return s;
    }

    static ErrorMessage bad_request(std::string message, std::optional<std::size_t> index = std::nullopt) {
        ErrorMessage e;
        e.code = ErrorCode::bad_request;
        e.message = std::move(message);
        if (index) e.details["argument"] = static_cast<std::int64_t>(*index + 1);
        return e;
    }

    F f_;
    std::vector<std::string> names_;
};

/// What a typed call completes with, from the call's JSON answer: `T` through value_to
/// (a mismatch is `internal_server_error`, Failure::bad_reply), Reply<U> with the node.
template <class T>
Result<T> reply_of(CallResult r, const std::string& node, std::string_view module, std::string_view function) {
    if (!r) return std::move(r).error();
    if constexpr (std::is_void_v<T>) {
        return {};
    } else if constexpr (is_reply<T>::value) {
        using U = decltype(std::declval<T>().value);
        auto value = reply_of<U>(std::move(r), node, module, function);
        if (!value) return std::move(value).error();
        return T{std::move(*value), node};
    } else if constexpr (std::is_same_v<T, boost::json::value>) {
        return std::move(*r);
    } else {
        auto converted = convert<T>(*r);
        if (converted) return std::move(*converted);
        auto e = call_failure(Failure::bad_reply, node, module, function);
        e.message = "answer: " + converted.error();
        return e;
    }
}

/// Completes a typed async call: converts the CallResult for `handler`, whose associated
/// executor, cancellation slot and allocator it shows as its own (the associator below).
template <class T, class Handler>
struct TypedCompletion {
    Handler handler;
    std::shared_ptr<std::string> node;  // written by the routing (CallOptions::peer)
    std::string* caller_peer;           // the caller's own CallOptions::peer, or null
    std::string fallback;               // the node when nothing was sent: the target, or this node
    std::string module;
    std::string function;

    void operator()(CallResult r) {
        if (node->empty()) *node = std::move(fallback);
        if (caller_peer) *caller_peer = *node;
        std::move(handler)(reply_of<T>(std::move(r), *node, module, function));
    }
};

}  // namespace rpclb::detail

template <template <class, class> class Associator, class T, class Handler, class DefaultCandidate>
struct boost::asio::associator<Associator, rpclb::detail::TypedCompletion<T, Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type get(
        const rpclb::detail::TypedCompletion<T, Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const rpclb::detail::TypedCompletion<T, Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};
