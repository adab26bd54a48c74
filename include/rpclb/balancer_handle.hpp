// A balancer addressed by name: the C++ analogue of the predecessor's `use RpcLoadBalancer`.
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/json/array.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace rpclb {

/// A value that carries a balancer's name (and the options to start it with), so that
/// `workers.call("demo", "echo", args)` needs no `load_balancer` option
/// (predecessor-compatibility §1.8: a module that `use`s RpcLoadBalancer). It adds no state
/// of its own: every call goes through the Cluster's plain API with `options.load_balancer`
/// forced to this name (replacing any the caller gave, as the predecessor does), so the two
/// are interchangeable.
///
/// Thread safety: distinct objects safe; shared objects safe (the members are const
/// except start(), which the Cluster serialises). The Cluster must outlive the handle's use.
class BalancerHandle {
public:
    /// A handle that can also start the balancer with `options` (`options.name` required).
    BalancerHandle(Cluster& cluster, LoadBalancerOptions options)
        : cluster_(&cluster), options_(std::move(options)) {}

    /// A handle to a balancer started elsewhere (another node, or Cluster::start_balancer).
    BalancerHandle(Cluster& cluster, std::string name) : cluster_(&cluster) { options_.name = std::move(name); }

    const std::string& name() const noexcept { return options_.name; }
    const LoadBalancerOptions& options() const noexcept { return options_; }

    /// Starts the balancer on this node with the handle's options (the predecessor's `start_link`);
    /// same errors as Cluster::start_balancer.
    std::shared_ptr<LoadBalancer> start() const { return cluster_->start_balancer(options_); }

    /// Stops it here (Cluster::stop_balancer); false when it was not started here.
    bool stop() const { return cluster_->stop_balancer(options_.name); }

    /// Cluster::get_members for this balancer.
    Result<std::vector<std::string>> get_members() const { return cluster_->get_members(options_.name); }

    /// Cluster::select_node for this balancer.
    Result<std::string> select_node(const PickOptions& options = {}) const {
        return cluster_->select_node(options_.name, options);
    }

    /// A load-balanced Cluster::call.
    CallResult call(std::string_view module, std::string_view function, boost::json::array args = {},
                    CallOptions options = {}) const {
        return cluster_->call(module, function, std::move(args), named(std::move(options)));
    }

    /// A load-balanced Cluster::cast.
    Result<void> cast(std::string_view module, std::string_view function, boost::json::array args = {},
                      CallOptions options = {}) const {
        return cluster_->cast(cluster_->name(), module, function, std::move(args), named(std::move(options)));
    }

    /// Cluster::call_on_random_node, counted by this balancer's drainer.
    CallResult call_on_random_node(const NodeFilter& filter, std::string_view module, std::string_view function,
                                   boost::json::array args = {}, CallOptions options = {}) const {
        return cluster_->call_on_random_node(filter, module, function, std::move(args), named(std::move(options)));
    }

    /// Cluster::cast_on_random_node, counted by this balancer's drainer.
    Result<void> cast_on_random_node(const NodeFilter& filter, std::string_view module, std::string_view function,
                                     boost::json::array args = {}, CallOptions options = {}) const {
        return cluster_->cast_on_random_node(filter, module, function, std::move(args), named(std::move(options)));
    }

    /// A load-balanced Cluster::async_call.
    template <class CompletionToken>
    auto async_call(std::string module, std::string function, boost::json::array args, CallOptions options,
                    CompletionToken&& token) const {
        return cluster_->async_call(cluster_->name(), std::move(module), std::move(function), std::move(args),
                                    named(std::move(options)), std::forward<CompletionToken>(token));
    }

    /// A load-balanced Cluster::async_cast.
    template <class CompletionToken>
    auto async_cast(std::string module, std::string function, boost::json::array args, CallOptions options,
                    CompletionToken&& token) const {
        return cluster_->async_cast(cluster_->name(), std::move(module), std::move(function), std::move(args),
                                    named(std::move(options)), std::forward<CompletionToken>(token));
    }

private:
    CallOptions named(CallOptions options) const {
        options.load_balancer = options_.name;
        return options;
    }

    Cluster* cluster_;
    LoadBalancerOptions options_;
};

}  // namespace rpclb
