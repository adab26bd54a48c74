// Calls: the function registry, serving requests on the worker pool, direct calls and
// casts over the mesh.
#include "cluster_impl.hpp"

#include <rpclb/detail/log.hpp>

#include <boost/asio/post.hpp>

namespace rpclb {
namespace asio = boost::asio;
namespace wire = detail::wire;

namespace {

std::string function_key(std::string_view module, std::string_view function) {
    std::string key;
    key.reserve(module.size() + function.size() + 1);
    key.append(module).push_back('.');
    key.append(function);
    return key;
}

// Makes sure an error names node, module and function without overwriting what the
// handler said.
void name_call(ErrorMessage& error, std::string_view node, std::string_view module,
               std::string_view function) {
    if (!error.details.contains("node")) error.details["node"] = node;
    if (!error.details.contains("module")) error.details["module"] = module;
    if (!error.details.contains("function")) error.details["function"] = function;
}

}  // namespace

std::shared_ptr<const Handler> Cluster::Impl::find_handler(std::string_view module,
                                                           std::string_view function) const {
    // The "module.function" key is built on the stack when it fits (no allocation per
    // served call); `functions` takes a string_view (heterogeneous lookup).
    char buffer[128];
    std::string heap;
    std::string_view key;
    if (const auto size = module.size() + function.size() + 1; size <= sizeof buffer) {
        auto* end = std::copy(module.begin(), module.end(), buffer);
        *end++ = '.';
        end = std::copy(function.begin(), function.end(), end);
        key = std::string_view(buffer, size);
    } else {
        heap = function_key(module, function);
        key = heap;
    }
    std::shared_lock lock(functions_mutex);
    auto it = functions.find(key);
    return it == functions.end() ? nullptr : it->second;
}

CallResult Cluster::Impl::run_handler(std::string_view module, std::string_view function,
                                      const boost::json::array& args, bool* threw) const {
    auto handler = find_handler(module, function);
    if (!handler)
        return call_error(ErrorCode::not_found,
                          "function " + std::string(module) + "." + std::string(function) +
                              " is not registered",
                          options.name, module, function);
    try {
        auto result = (*handler)(args);
        if (!result) {
            auto error = std::move(result.error());
            error.details.erase(draining_detail);  // reserved: would make the caller run it again
            name_call(error, options.name, module, function);
            return error;
        }
        return result;
    } catch (const std::exception& e) {
        if (threw) *threw = true;
        return call_error(ErrorCode::internal_server_error, e.what(), options.name, module, function);
    } catch (...) {
        if (threw) *threw = true;
        return call_error(ErrorCode::internal_server_error, "unknown exception", options.name, module,
                          function);
    }
}

void Cluster::Impl::serve_request(const std::shared_ptr<detail::Connection>& c, wire::Request&& request) {
    std::shared_ptr<LoadBalancer> balancer;
    if (!request.load_balancer.empty()) {
        balancer = accepting(request.load_balancer);
        if (!balancer) {
            // Routed here by a balancer this node has left or is draining: refuse it unrun,
            // so that the caller picks another member.
            c->send(wire::encode(wire::Response{
                request.id, draining_error(options.name, request.module, request.function, request.load_balancer)}));
            return;
        }
        balancer->track_served();  // its drain waits for this call too
    }
    ++serving;
    asio::post(workers, [self = shared_from_this(), c, balancer, request = std::move(request)]() mutable {
        wire::Response response{request.id, self->run_handler(request.module, request.function, request.args)};
        auto frame = wire::encode(response);
        if (frame.size() > self->options.max_message_size) {
            frame = wire::encode(wire::Response{
                request.id,
                call_error(ErrorCode::internal_server_error,
                           "response of " + std::to_string(frame.size()) +
                               " bytes exceeds the maximum message size of " +
                               std::to_string(self->options.max_message_size),
                           self->options.name, request.module, request.function)});
        }
        c->send(std::move(frame));
        if (balancer) balancer->release_served();
        --self->serving;
    });
}

void Cluster::Impl::serve_cast(wire::Cast&& cast) {
    ++serving;
    asio::post(workers, [self = shared_from_this(), cast = std::move(cast)] {
        auto result = self->run_handler(cast.module, cast.function, cast.args);
        if (!result)
            RPCLB_LOG("rpc", debug) << "cast " << cast.module << "." << cast.function
                                    << " failed: " << result.error().message;
        --self->serving;
    });
}

bool Cluster::Impl::on_network_thread() const {
    return const_cast<boost::asio::io_context&>(ioc).get_executor().running_in_this_thread();
}

void Cluster::Impl::direct_call(std::string node, std::string module, std::string function,
                                boost::json::array args, std::chrono::milliseconds timeout,
                                std::string load_balancer, std::function<void(CallResult)> done) {
    if (node == options.name) {
        asio::post(workers, [self = shared_from_this(), module = std::move(module),
                             function = std::move(function), args = std::move(args),
                             done = std::move(done)] { done(self->run_handler(module, function, args)); });
        return;
    }
    auto c = connection_to(node);
    if (!c) return done(call_error(ErrorCode::service_unavailable, "noconnection", node, module, function));
    wire::Request request{0, std::move(module), std::move(function), std::move(args), std::move(load_balancer)};
    c->request(std::move(request), timeout, std::move(done));
}

Result<void> Cluster::Impl::direct_cast(std::string_view node, std::string_view module,
                                        std::string_view function, boost::json::array args,
                                        std::string_view load_balancer) {
    if (node == options.name) {
        serve_cast(wire::Cast{std::string(module), std::string(function), std::move(args), {}});
        return {};
    }
    auto c = connection_to(node);
    if (!c) return call_error(ErrorCode::service_unavailable, "noconnection", node, module, function);
    // A cast has no reply to refuse with: a draining target still runs it.
    auto frame = wire::encode(wire::Cast{std::string(module), std::string(function), std::move(args),
                                         std::string(load_balancer)});
    if (frame.size() > options.max_message_size)
        return call_error(ErrorCode::bad_request,
                          "cast of " + std::to_string(frame.size()) +
                              " bytes exceeds the maximum message size of " +
                              std::to_string(options.max_message_size),
                          node, module, function);
    c->send(std::move(frame));
    return {};
}

}  // namespace rpclb
