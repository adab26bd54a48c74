#include "routing/balancer_host.hpp"

#include "routing/cluster_link.hpp"

#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/array.hpp>

namespace rpclb::detail {

std::shared_ptr<const MemberSnapshot> BalancerHost::members() const {
    // The group's snapshot: the members as the balancer learns them. Not the route's own
    // copy, which only picks read.
    return link_.groups().members(balancer_.name());
}

boost::asio::any_io_executor BalancerHost::executor() const { return link_.workers(); }

TelemetryBus& BalancerHost::telemetry() noexcept { return link_.telemetry(); }

void BalancerHost::serve(std::string module, std::string function, Function function_body) {
    link_.serve(std::move(module), std::move(function), std::move(function_body));
}

void BalancerHost::initiate_call(std::string node, std::string module, std::string function,
                                 boost::json::array args, std::chrono::milliseconds timeout,
                                 CallCompletion handler) {
    link_.call(std::move(node), std::move(module), std::move(function), std::move(args), timeout, std::move(handler));
}

}  // namespace rpclb::detail
