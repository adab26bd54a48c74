// A balancer's algorithm changes: set_algorithm() / set_options(), and a routing-only
// balancer following the algorithm its members announce.
#include <rpclb/detail/log.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>

#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include "routing/balancer_impl.hpp"
#include "routing/balancer_registry.hpp"
#include "routing/hedging_options.hpp"
#include "routing/outlier_detector.hpp"
#include "routing/outlier_options.hpp"
#include "routing/slow_start.hpp"

#include <boost/asio/post.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <utility>

namespace rpclb {

void LoadBalancer::Impl::post_follow() {
    // Loading a plugin and running `init` would hold up the thread delivering group
    // changes: the worker pool does it.
    boost::asio::post(node.workers(), [weak = self.weak_from_this()] {
        auto owner = weak.lock();
        if (!owner) return;
        try {
            owner->impl_->follow_announcement();
        } catch (const std::exception& e) {  // std::bad_alloc: the next change tries again
            RPCLB_LOG("balancer", error) << "balancer " << owner->impl_->options.name << ": cannot follow: " << e.what();
        }
    });
}

void LoadBalancer::Impl::follow_announcement() {
    // Read and applied under one lock: of two follows on two workers, the one that reads
    // the newer announcement also applies last.
    std::lock_guard change(change_mutex);
    auto announced = detail::announced_algorithm(node.groups(), options.name);
    if (!announced) return;
    if (outliers && !detail::same_outlier_detection(outliers->options(), announced->outlier_detection)) {
        // The detector starts afresh under the new options: members ejected now return at
        // once, and the failures counted so far are dropped.
        const auto reset = outliers->reconfigure(announced->outlier_detection, std::chrono::steady_clock::now());
        RPCLB_LOG("balancer", info) << "balancer " << options.name << ": outlier options now "
                                    << boost::json::serialize(detail::to_json(announced->outlier_detection));
        apply_ejections(reset);
    }
    if (!detail::same_slow_start(route.load()->slow_start, announced->slow_start)) {
        std::lock_guard lock(publish_mutex);
        slow_start = announced->slow_start;
        republish();
    }
    {
        std::lock_guard lock(publish_mutex);
        if (!detail::same_hedging(hedging, announced->hedging)) {
            adopt_hedging(announced->hedging);
            republish();
        }
    }
    {
        const auto engine = route.load()->engine;
        if (engine->name == announced->algorithm && engine->options == announced->options) return;
    }
    if (auto changed = replace_algorithm(announced->algorithm, announced->options); !changed)
        RPCLB_LOG("balancer", warning) << "balancer " << options.name << ": cannot follow the announced algorithm "
                                       << announced->algorithm << ": " << changed.error().message;
}

ErrorMessage LoadBalancer::Impl::change_error(ErrorCode code, const std::string& algorithm,
                                              std::string message) const {
    return ErrorMessage{code, std::move(message),
                        boost::json::object{{"load_balancer", options.name},
                                            {"algorithm", algorithm},
                                            {"node", node.node_name()}}};
}

Result<std::shared_ptr<const LoadBalancer::Impl::Engine>> LoadBalancer::Impl::build_engine(
    const std::string& algorithm, const boost::json::object& algorithm_options, bool& is_local) {
    auto& plugins = node.plugins();
    auto made = detail::load_algorithm(plugins, node.telemetry(), algorithm);
    if (!made) {
        if (!plugins.find(algorithm))
            return change_error(ErrorCode::not_found, algorithm,
                                "no plugin for algorithm " + algorithm + " (librpclb_" + algorithm +
                                    ".so) on the plugin path: " + made.error().message);
        return change_error(ErrorCode::bad_request, algorithm, made.error().message);
    }
    auto engine = std::make_shared<Engine>(Engine{std::move(*made), algorithm, algorithm_options});
    const AlgorithmContext context{options.name, node.node_name(), host.get()};
    const char* hook = "init";
    auto failure = [&](const std::string& what) {
        return change_error(ErrorCode::bad_request, algorithm,
                            "balancer " + options.name + ": algorithm " + algorithm + " " + hook + " failed" + what);
    };
    try {
        engine->algorithm->init(context, engine->options);
        hook = "services()";
        // Services belong to the balancer's supervision tree, built at start: an algorithm
        // that needs them can't be swapped in (nor one that runs them swapped out).
        if (!engine->algorithm->services().empty())
            return change_error(ErrorCode::bad_request, algorithm,
                                "balancer " + options.name + ": algorithm " + algorithm +
                                    " runs services, which only start with the balancer: stop the balancer and "
                                    "start it with this algorithm");
        hook = "local()";
        is_local = engine->algorithm->local();
    } catch (const std::exception& e) {
        return failure(std::string(": ") + e.what());
    } catch (...) {
        return failure(" with an unknown exception");
    }
    return std::shared_ptr<const Engine>(std::move(engine));
}

Result<void> LoadBalancer::set_algorithm(const std::string& algorithm, const boost::json::object& options) {
    std::lock_guard change(impl_->change_mutex);
    return impl_->replace_algorithm(algorithm, options);
}

Result<void> LoadBalancer::set_options(const boost::json::object& options) {
    std::lock_guard change(impl_->change_mutex);
    return impl_->replace_algorithm(algorithm_name(), options);
}

Result<void> LoadBalancer::Impl::replace_algorithm(const std::string& algorithm,
                                                   const boost::json::object& algorithm_options) {
    const auto old_name = self.algorithm_name();
    if (!services.empty())
        return change_error(ErrorCode::bad_request, algorithm,
                            "balancer " + options.name + ": algorithm " + old_name +
                                " runs services, which only stop with the balancer: stop the balancer and start it "
                                "with the new algorithm");
    bool is_local = false;
    auto engine = build_engine(algorithm, algorithm_options, is_local);
    if (!engine) return engine.error();
    std::shared_ptr<const Route> old;
    {
        std::lock_guard lock(publish_mutex);
        old = route.load();
        // make_route copies the snapshot: what the old instance kept in it goes with the old one.
        route.store(make_route(*group, std::move(*engine), old.get()));
    }
    local.store(is_local, std::memory_order_release);
    old.reset();  // the old instance goes with the last pick that still holds it
    RPCLB_LOG("balancer", info) << "balancer " << options.name << ": algorithm " << old_name << " replaced by "
                                << algorithm << " " << boost::json::serialize(algorithm_options);
    if (hosted) {
        std::lock_guard lock(announce_mutex);
        if (joined) node.groups().join(options.name, self.announcement());
    }
    return {};
}

}  // namespace rpclb
