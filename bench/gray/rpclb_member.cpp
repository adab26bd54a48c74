// The rpclb member process and the rpclb client (members.hpp).
#include "members.hpp"

#include "../support/harness.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_to.hpp>

#include <cstdlib>

namespace json = boost::json;

namespace gray {

namespace {
constexpr const char* cookie = "gray-bench";

/// The member index in a node name `gm<I>...@host`; -1 for another name.
int index_of(const std::string& node) {
    if (node.rfind("gm", 0) != 0) return -1;
    return std::atoi(node.c_str() + 2);
}
}  // namespace

int run_rpclb_member(const std::string& text) {
    const auto spec = json::parse(text).as_object();
    const int index = static_cast<int>(spec.at("index").to_number<int>());
    auto member = std::make_shared<Member>(Behaviour::from_text(spec.at("behaviour").as_string()),
                                           static_cast<std::uint64_t>(index) + 1);
    rpclb::ClusterOptions options;
    options.name = json::value_to<std::string>(spec.at("name"));
    options.cookie = cookie;
    options.worker_threads = member_threads;
    for (const auto& s : spec.at("seeds").as_array()) options.seeds.push_back(json::value_to<std::string>(s));
    options.plugin_path = {json::value_to<std::string>(spec.at("plugin_dir"))};
    rpclb::Cluster cluster(std::move(options));
    // args: [the caller's deadline as steady_clock nanoseconds] (one clock for every process).
    rpclb::Cluster* reporter = &cluster;
    cluster.register_function("gray", "work", [member, index, reporter](const json::array& args) -> rpclb::CallResult {
        const auto deadline = args.size() == 1 && args[0].is_int64()
                                  ? Clock::time_point(Clock::duration(args[0].as_int64()))
                                  : Clock::now() + std::chrono::seconds(10);
        const auto served = member->serve(deadline, [] { return rpclb::call_cancelled(); });
        // The member's slots in use go back with the answer (Cluster::report_load), as an
        // application that knows its own capacity reports it.
        reporter->report_load(member->utilization());
        if (served.expired)
            return rpclb::ErrorMessage{rpclb::ErrorCode::request_timeout, "expired in the queue", {{"member", index}}};
        if (!served.ok)
            return rpclb::ErrorMessage{rpclb::ErrorCode::internal_server_error, "injected failure", {{"member", index}}};
        return json::value(json::array{index, served.service_us});
    });
    cluster.start();
    const bool ejection = spec.at("ejection").as_bool();
    for (const auto& b : spec.at("balancers").as_array()) {
        const auto& o = b.as_object();
        rpclb::LoadBalancerOptions lb;
        lb.name = json::value_to<std::string>(o.at("name"));
        if (const auto* a = o.if_contains("algorithm")) lb.algorithm = json::value_to<std::string>(*a);
        if (const auto* opts = o.if_contains("opts")) lb.algorithm_opts = opts->as_object();
        if (const auto* w = spec.if_contains("slow_start_ms"); w && w->to_number<std::int64_t>() > 0)
            lb.slow_start.window = std::chrono::milliseconds(w->to_number<std::int64_t>());
        if (!ejection) {
            lb.outlier_detection.consecutive_remote_failures = 0;
            lb.outlier_detection.consecutive_local_failures = 0;
            lb.outlier_detection.failure_percentage = 0;
        }
        cluster.start_balancer(std::move(lb));
    }
    bench::announce_port(cluster.listen_endpoint()->port());
    bench::wait_for_stdin_eof();
    cluster.stop();
    return 0;
}

struct RpclbClient::Impl {
    rpclb::Cluster cluster;
    explicit Impl(rpclb::ClusterOptions o) : cluster(std::move(o)) {}
};

namespace {
class RpclbTarget final : public Target {
public:
    RpclbTarget(rpclb::Cluster& cluster, std::string balancer, std::optional<rpclb::Hedging> hedging)
        : cluster_(cluster), balancer_(std::move(balancer)), hedging_(hedging) {}

    void call(std::chrono::milliseconds timeout, std::function<void(Reply)> done) override {
        auto peer = std::make_shared<std::string>();
        rpclb::CallOptions o;
        o.load_balancer = balancer_;
        o.timeout = timeout;
        o.retry = false;
        o.run_completion_inline = true;
        o.peer = peer.get();
        o.idempotent = hedging_.has_value();
        o.hedging = hedging_;
        const auto deadline = Clock::now() + timeout;
        json::array args{static_cast<std::int64_t>(deadline.time_since_epoch().count())};
        cluster_.async_call("gray", "work", std::move(args), std::move(o),
                            [peer, done = std::move(done)](rpclb::CallResult r) {
                                Reply reply;
                                reply.member = index_of(*peer);
                                if (r && r->is_array() && r->as_array().size() == 2) {
                                    reply.ok = true;
                                    reply.member = static_cast<int>(r->as_array()[0].to_number<int>());
                                    reply.service_us = r->as_array()[1].to_number<std::int64_t>();
                                }
                                done(reply);
                            });
    }

private:
    rpclb::Cluster& cluster_;
    std::string balancer_;
    std::optional<rpclb::Hedging> hedging_;
};
}  // namespace

RpclbClient::RpclbClient(std::vector<std::string> seeds, std::string plugin_dir) {
    rpclb::ClusterOptions o;
    o.name = "gray_client@127.0.0.1";
    o.cookie = cookie;
    o.client = true;
    o.seeds = std::move(seeds);
    o.plugin_path = {std::move(plugin_dir)};
    impl_ = std::make_unique<Impl>(std::move(o));
    impl_->cluster.start();
}

RpclbClient::~RpclbClient() { impl_->cluster.stop(); }

void RpclbClient::wait_members(const std::string& balancer, std::size_t count) {
    auto r = impl_->cluster.wait_for_members(balancer, count, std::chrono::seconds(20));
    if (!r) bench::die("rpclb: " + json::serialize(r.error().to_json()));
}

std::unique_ptr<Target> RpclbClient::target(const std::string& balancer, std::optional<rpclb::Hedging> hedging) {
    return std::make_unique<RpclbTarget>(impl_->cluster, balancer, hedging);
}

std::uint64_t RpclbClient::hedges(const std::string& balancer) {
    auto b = impl_->cluster.balancer(balancer);
    return b ? (*b)->hedge_stats().hedges : 0;
}

}  // namespace gray
