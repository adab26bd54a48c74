#include "routing/balancer_host.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/load_balancer.hpp>

namespace rpclb::detail {

std::shared_ptr<const MemberSnapshot> BalancerHost::members() const {
    // The group's snapshot, the one the balancer stores for its picks when the change
    // reaches it: current even while that notification is still on its way.
    return cluster_.groups().members(balancer_.name());
}

boost::asio::any_io_executor BalancerHost::executor() const { return cluster_.worker_executor(); }

TelemetryBus& BalancerHost::telemetry() noexcept { return cluster_.telemetry(); }

void BalancerHost::serve(std::string module, std::string function, Function function_body) {
    cluster_.register_function(std::move(module), std::move(function), std::move(function_body));
}

void BalancerHost::initiate_call(std::string node, std::string module, std::string function,
                                 boost::json::array args, std::chrono::milliseconds timeout,
                                 CallCompletion handler) {
    // A direct call: no balancer in the options, so nothing is picked, counted or retried.
    CallOptions options;
    options.timeout = timeout;
    cluster_.async_call(std::move(node), std::move(module), std::move(function), std::move(args),
                        std::move(options), std::move(handler));
}

}  // namespace rpclb::detail
