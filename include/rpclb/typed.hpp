// Typed functions and calls: C++ signatures in place of a call's JSON array.
//
// It includes the whole API of <rpclb/cluster.hpp> with what it only names there: the
// asynchronous members, errors, balancers, groups, telemetry, plugins and the Asio types.
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>
#include <rpclb/detail/typed.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace rpclb {

/// A typed call's value with the name of the node that served it: ask for `Reply<T>` in
/// place of `T` (`call<Reply<int>>(...)`). The node is the one the call was sent to
/// (after the balancer's pick, after any re-selection); nothing need outlive the call,
/// unlike CallOptions::peer.
template <class T>
struct Reply {
    T value;
    std::string node;
};

/// Reply of a call whose value is not wanted: only the serving node.
template <>
struct Reply<void> {
    std::string node;
};

/// Where a typed call goes, and its options: a node (to_node()) or a balancer (through()).
/// A view: it refers to the names and options it was made from, which must live until
/// the call is made (async_call() copies them before it returns). Trivially destructible
/// on purpose: g++ 12 destroys some class temporaries inside a `co_await` expression
/// wrongly (GCC bug 100611), and a Route made in place there is not such a temporary.
struct Route {
    /// The node to call; empty when `balancer` routes.
    std::string_view node;
    /// The balancer that picks the node; empty for a call to `node`.
    std::string_view balancer;
    /// The call's options (timeout, key, retries, ...); null for the defaults. Its
    /// `load_balancer` is ignored: `balancer` is the one.
    const CallOptions* options = nullptr;

    /// The CallOptions of the call: `*options` (or the defaults) with `balancer`.
    CallOptions call_options() const {
        CallOptions o = options ? *options : CallOptions{};
        o.load_balancer = std::string(balancer);
        return o;
    }
};

/// A Route to node `node` (`short@host`; this node's own name runs the handler here).
/// `options`, when given, must outlive the call's start.
inline Route to_node(std::string_view node, const CallOptions* options = nullptr) { return Route{node, {}, options}; }

/// A Route through balancer `balancer`: its algorithm picks the member (`options->key` is
/// its routing key). `options`, when given, must outlive the call's start.
inline Route through(std::string_view balancer, const CallOptions* options = nullptr) {
    return Route{{}, balancer, options};
}

/// The JSON array of `args`, each converted with `value_from`: the arguments of a JSON
/// call built without a braced list, which g++ 12 refuses inside a `co_await` ("array used
/// as initializer"):
///
///     auto r = co_await cluster.async_call("inventory", "count", rpclb::arguments("apples"), through,
///                                          boost::asio::use_awaitable);
template <class... Args>
boost::json::array arguments(const Args&... args) {
    return detail::to_arguments(args...);
}

/// A Handler that runs `f`, a function with a C++ signature, for Cluster::register_function:
///
///     cluster.register_function("inventory", "reserve",
///         rpclb::typed([](std::string sku, int qty) { return qty; }, {"sku", "qty"}));
///
/// Each argument converts to its parameter's type with Boost.JSON's `value_to` (so a user
/// type converts through its `tag_invoke(value_to_tag<T>, ...)`); trailing `std::optional`
/// parameters may be left out by the caller. `f` may return `void` (the answer is null), a
/// `Result<U>` (its ErrorMessage is returned as is, its value converted) or any type
/// `value_from` converts. An exception from `f` (or from a user's `value_from`) is
/// `internal_server_error` with its text, as for a JSON Handler.
///
/// `names` names the parameters, in order, for error messages; it may be empty.
///
/// Errors (`bad_request`, never running `f`): a wrong count, "expected 2 arguments (sku,
/// qty), got 3"; an argument that doesn't convert, "argument 2 (qty): expected an integer,
/// got string", details {"argument": 2} (1-based; without names, "argument 2: ...").
///
/// `f` must be callable with one signature (not a generic lambda, whose parameters have
/// no types to convert to). Throws std::invalid_argument when `names` is neither empty nor
/// one name per parameter. Thread safety: the Handler calls `f` from any worker thread,
/// concurrently when calls overlap.
template <class F>
Handler typed(F f, std::initializer_list<std::string_view> names = {}) {
    using Typed = detail::TypedHandler<F>;
    if (names.size() != 0 && names.size() != Typed::arity)
        throw std::invalid_argument("typed(): " + std::to_string(names.size()) + " names for " +
                                    std::to_string(Typed::arity) + " parameters");
    return Typed(std::move(f), std::vector<std::string>(names.begin(), names.end()));
}

/// Calls `module.function(args...)` along `route` and waits: Cluster::call() with C++
/// arguments in (each through `value_from`) and a `T` out (through `value_to`; `T` =
/// `boost::json::value` keeps the JSON, `void` drops it, `Reply<U>` adds the serving node).
///
///     rpclb::Result<int> left = rpclb::call<int>(cluster, rpclb::through("workers"), "inventory", "reserve", sku, 1);
///
/// Errors: every error of Cluster::call(); an answer that doesn't convert to `T` is
/// `internal_server_error` (Failure::bad_reply) "answer: expected an integer, got string",
/// never an exception. The same blocking rules (not from a network thread).
template <class T = boost::json::value, class... Args>
Result<T> call(Cluster& cluster, const Route& route, std::string_view module, std::string_view function,
               const Args&... args) {
    auto options = route.call_options();
    std::string node;
    options.peer = &node;
    auto r = route.node.empty() ? cluster.call(module, function, detail::to_arguments(args...), options)
                                : cluster.call(route.node, module, function, detail::to_arguments(args...), options);
    if (node.empty()) node = route.node.empty() ? cluster.name() : std::string(route.node);  // run here, or failed
    if (route.options && route.options->peer) *route.options->peer = node;
    return detail::reply_of<T>(std::move(r), node, module, function);
}

namespace detail {

template <class T, class Token, class... Args>
auto async_typed_call(Cluster& cluster, const Route& route, std::string_view module, std::string_view function,
                      Token&& token, const Args&... args) {
    // Everything copied now, so that a deferred operation refers to nothing of the caller's.
    return boost::asio::async_initiate<Token, void(Result<T>)>(
        [&cluster](auto handler, std::string node, CallOptions options, std::string module, std::string function,
                   boost::json::array args) {
            // CallOptions::peer writes the pick into `picked`, which the completion keeps alive.
            auto picked = std::make_shared<std::string>();
            TypedCompletion<T, decltype(handler)> completion{std::move(handler), picked, options.peer,
                                                             node.empty() ? cluster.name() : node, module, function};
            options.peer = picked.get();
            if (node.empty())
                cluster.async_call(std::move(module), std::move(function), std::move(args), std::move(options),
                                   std::move(completion));
            else
                cluster.async_call(std::move(node), std::move(module), std::move(function), std::move(args),
                                   std::move(options), std::move(completion));
        },
        token, std::string(route.node), route.call_options(), std::string(module), std::string(function),
        to_arguments(args...));
}

}  // namespace detail

/// Asynchronous call(): the last argument is the completion token, the ones before it
/// the function's arguments. Completion signature `void(Result<T>)`, with
/// Cluster::async_call()'s executor, cancellation and "never inline" rules.
///
///     // In a coroutine, all inside the co_await, also with g++ 12: no braced list to
///     // refuse, and the Route is trivially destructible (route-calls.md has both faults).
///     auto r = co_await rpclb::async_call<rpclb::Reply<int>>(cluster, rpclb::through("workers"),
///                                                           "inventory", "reserve", sku, 1,
///                                                           boost::asio::use_awaitable);
///
///     rpclb::async_call<int>(cluster, rpclb::to_node("b@10.0.0.2"), "inventory", "count", "apples",
///                            [](rpclb::Result<int> r) { /* ... */ });
///
/// The arguments are converted to JSON before this returns (also for `deferred`).
template <class T = boost::json::value, class... ArgsThenToken>
auto async_call(Cluster& cluster, Route route, std::string_view module, std::string_view function,
                ArgsThenToken&&... args_then_token) {
    static_assert(sizeof...(ArgsThenToken) >= 1, "the last argument of async_call is the completion token");
    constexpr std::size_t argc = sizeof...(ArgsThenToken) - 1;
    auto all = std::forward_as_tuple(std::forward<ArgsThenToken>(args_then_token)...);
    using Token = std::tuple_element_t<argc, std::tuple<ArgsThenToken&&...>>;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return detail::async_typed_call<T>(cluster, route, module, function,
                                           std::forward<Token>(std::get<argc>(all)), std::get<I>(all)...);
    }(std::make_index_sequence<argc>{});
}

}  // namespace rpclb
