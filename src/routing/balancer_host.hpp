// The AlgorithmHost a LoadBalancer gives its algorithm.
#pragma once

#include <rpclb/algorithm_host.hpp>

namespace rpclb {
class LoadBalancer;
}  // namespace rpclb

namespace rpclb::detail {

class ClusterLink;

/// One balancer's AlgorithmHost: the balancer's own member snapshots, and the node's
/// direct async calls, worker executor, function registry and telemetry (its
/// ClusterLink), nothing more. Owned by its LoadBalancer, which outlives the algorithm's
/// services.
///
/// Thread safety: distinct objects safe; shared objects safe.
class BalancerHost final : public AlgorithmHost {
public:
    BalancerHost(ClusterLink& link, const LoadBalancer& balancer) noexcept : link_(link), balancer_(balancer) {}

    std::shared_ptr<const MemberSnapshot> members() const override;
    boost::asio::any_io_executor executor() const override;
    TelemetryBus& telemetry() noexcept override;
    void serve(std::string module, std::string function, Function function_body) override;

private:
    void initiate_call(std::string node, std::string module, std::string function, boost::json::array args,
                       std::chrono::milliseconds timeout, CallCompletion handler) override;

    ClusterLink& link_;
    const LoadBalancer& balancer_;
};

}  // namespace rpclb::detail
