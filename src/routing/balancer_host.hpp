// The AlgorithmHost a LoadBalancer gives its algorithm.
#pragma once

#include <rpclb/algorithm_host.hpp>

namespace rpclb {
class Cluster;
class LoadBalancer;
}  // namespace rpclb

namespace rpclb::detail {

/// One balancer's AlgorithmHost: the balancer's own member snapshots, and the Cluster's
/// direct async calls, worker executor, function registry and telemetry, nothing more.
/// Owned by its LoadBalancer, which outlives the algorithm's services.
///
/// Thread safety: distinct objects safe; shared objects safe.
class BalancerHost final : public AlgorithmHost {
public:
    BalancerHost(Cluster& cluster, const LoadBalancer& balancer) noexcept
        : cluster_(cluster), balancer_(balancer) {}

    std::shared_ptr<const MemberSnapshot> members() const override;
    boost::asio::any_io_executor executor() const override;
    TelemetryBus& telemetry() noexcept override;
    void serve(std::string module, std::string function, Function function_body) override;

private:
    void initiate_call(std::string node, std::string module, std::string function, boost::json::array args,
                       std::chrono::milliseconds timeout, CallCompletion handler) override;

    Cluster& cluster_;
    const LoadBalancer& balancer_;
};

}  // namespace rpclb::detail
