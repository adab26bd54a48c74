// An algorithm for the balancer supervision tests (test/cluster/balancer_supervision.cpp):
// it picks the first member and asks for one service, a probe that
//  - counts, in AlgorithmState under its balancer's name, its starts and stops and those
//    that happened while its node was a member of the balancer's group
//    ("probe.<node>.starts", ".stops", ".started_as_member", ".stopped_as_member"), so the
//    order of the probe and the LoadBalancer is observable;
//  - reports a failure when the function `<balancer>.probe_fail` is called on its node
//    (from a worker thread, like a failing service's own work);
//  - refuses to start when the algorithm option "refuse_start" is true.
#include <rpclb/algorithm_state.hpp>
#include <rpclb/algorithm_host.hpp>
#include <rpclb/plugin_pin.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace {

// The probe serves a function through its host, and the node keeps it (and the code of
// its std::function) after every algorithm is gone: this library stays mapped for good
// (rpclb::pin_this_plugin), as the least_cpu poller's does.

class Probe final : public rpclb::Service, public std::enable_shared_from_this<Probe> {
public:
    Probe(rpclb::AlgorithmContext context, bool refuse_start)
        : balancer_(std::move(context.balancer)),
          node_(std::move(context.local_node)),
          host_(context.host),
          refuse_start_(refuse_start) {}

    std::string name() const override { return balancer_ + "_probe"; }

    void start() override {
        count("starts", "started_as_member");
        if (refuse_start_) throw std::runtime_error("probe of " + balancer_ + " refuses to start");
        rpclb::pin_this_plugin();
        host_->serve(balancer_, "probe_fail", [weak = weak_from_this()](const boost::json::array&) -> rpclb::CallResult {
            auto self = weak.lock();
            if (!self) return false;
            self->report_failure("told to fail");
            return true;
        });
    }

    void stop() noexcept override { count("stops", "stopped_as_member"); }

private:
    bool member() const {
        const auto members = host_->members();
        return std::find(members->nodes.begin(), members->nodes.end(), node_) != members->nodes.end();
    }

    // Counts `total`, and `as_member` first when this node is a member, so a reader who
    // sees the total sees the other count of the same moment. Keyed by node too: a
    // routing-only balancer of another in-process node runs a probe of its own.
    void count(const std::string& total, const std::string& as_member) {
        auto& state = rpclb::AlgorithmState::instance();
        const auto prefix = "probe." + node_ + ".";
        if (member()) state.counter(balancer_, prefix + as_member).fetch_add(1);
        state.counter(balancer_, prefix + total).fetch_add(1);
    }

    std::string balancer_;
    std::string node_;
    rpclb::AlgorithmHost* host_;
    bool refuse_start_;
};

class SupervisedProbe final : public rpclb::SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = rpclb::capability::host | rpclb::capability::services;

    void init(const rpclb::AlgorithmContext& context, const boost::json::object& options) override {
        context_ = context;
        if (const auto* refuse = options.if_contains("refuse_start")) refuse_start_ = refuse->as_bool();
        if (!context_.host) throw std::invalid_argument("supervised_probe needs a host");
    }

    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                 const rpclb::PickOptions&) override {
        if (members.nodes.empty()) return rpclb::empty_members_error(context_.balancer);
        return std::size_t{0};
    }

    std::vector<std::shared_ptr<rpclb::Service>> services() override {
        return {std::make_shared<Probe>(context_, refuse_start_)};
    }

private:
    rpclb::AlgorithmContext context_;
    bool refuse_start_ = false;
};

}  // namespace

RPCLB_PLUGIN(supervised_probe, SupervisedProbe)
