// The asynchronous members of Cluster (async_call, async_cast, async_select_node,
// async_call_on_random_node, async_wait_for_members): templates on an Asio completion
// token, declared in <rpclb/cluster.hpp> and defined here, so that only the files that
// start asynchronous operations pay for Asio's completion machinery and Boost.JSON.
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/node_filter.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace rpclb {

template <class CompletionToken>
auto Cluster::async_call(std::string node, std::string module, std::string function,
                         boost::json::array args, CallOptions options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(CallResult)>(
        [this](CallCompletion handler, auto&&... a) { initiate_call(std::move(a)..., std::move(handler)); },
        token, std::move(node), std::optional<NodeFilter>(), std::move(module), std::move(function),
        std::move(args), std::move(options));
}

template <class CompletionToken>
auto Cluster::async_call(std::string module, std::string function, boost::json::array args, CallOptions options,
                         CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(CallResult)>(
        [this](CallCompletion handler, auto&&... a) { initiate_balanced_call(std::move(a)..., std::move(handler)); },
        token, std::move(module), std::move(function), std::move(args), std::move(options));
}

template <class CompletionToken>
auto Cluster::async_cast(std::string node, std::string module, std::string function,
                         boost::json::array args, CallOptions options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(Result<void>)>(
        [this](CastCompletion handler, auto&&... a) { initiate_cast(std::move(a)..., std::move(handler)); },
        token, std::move(node), std::optional<NodeFilter>(), std::move(module), std::move(function),
        std::move(args), std::move(options));
}

template <class CompletionToken>
auto Cluster::async_select_node(std::string balancer, PickOptions options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(Result<std::string>)>(
        [this](auto handler, std::string balancer, PickOptions options) {
            auto ex = boost::asio::get_associated_executor(handler, worker_executor());
            boost::asio::post(ex, [this, h = std::move(handler), balancer = std::move(balancer),
                                   options = std::move(options)]() mutable {
                std::move(h)(select_node(balancer, options));
            });
        },
        token, std::move(balancer), std::move(options));
}

template <class CompletionToken>
auto Cluster::async_call_on_random_node(NodeFilter filter, std::string module, std::string function,
                                        boost::json::array args, CallOptions options,
                                        CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(CallResult)>(
        [this](CallCompletion handler, auto&&... a) { initiate_call(std::move(a)..., std::move(handler)); },
        token, std::string(), std::optional<NodeFilter>(std::move(filter)), std::move(module),
        std::move(function), std::move(args), std::move(options));
}

template <class CompletionToken>
auto Cluster::async_wait_for_members(std::string balancer, std::size_t count, std::chrono::milliseconds timeout,
                                     CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(Result<void>)>(
        [this](WaitCompletion handler, std::string b, std::size_t n, std::chrono::milliseconds t) {
            initiate_wait_for_members(std::move(b), n, t, std::move(handler));
        },
        token, std::move(balancer), count, timeout);
}

}  // namespace rpclb
