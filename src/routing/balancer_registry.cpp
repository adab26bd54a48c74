#include "routing/balancer_registry.hpp"
#include "routing/outlier_options.hpp"
#include "routing/hedging_options.hpp"
#include "routing/slow_start.hpp"

#include <rpclb/detail/log.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace rpclb::detail {

BalancerRegistry::BalancerRegistry(ClusterLink& node, bool client, BalancerSupervisor& supervisor)
    : node_(node), client_(client), supervisor_(supervisor), table_(std::make_shared<const Table>()) {}

void BalancerRegistry::edit(const std::function<void(Table&)>& change) {
    auto table = std::make_shared<Table>(*table_.load());
    change(*table);
    table_.store(std::move(table));
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> load_algorithm(PluginRegistry& plugins,
                                                                                        TelemetryBus& bus,
                                                                                        const std::string& name) {
    auto algorithm = plugins.create(name);
    if (bus.active()) {
        const auto file = plugins.find(name);
        // Event fields are views: what they show must outlive emit(), and neither a
        // temporary path nor the copy result::error() returns does.
        const auto path = file ? file->string() : std::string();
        const auto reason = algorithm ? std::string() : algorithm.error().message;
        Event e{.name = algorithm ? EventName::plugin_loaded : EventName::plugin_rejected};
        e.algorithm = name;
        e.path = path;
        if (!algorithm) e.reason = reason;
        bus.emit(e);
    }
    return algorithm;
}

bool AnnouncedAlgorithm::operator==(const AnnouncedAlgorithm& other) const {
    return algorithm == other.algorithm && options == other.options &&
           same_outlier_detection(outlier_detection, other.outlier_detection) &&
           same_slow_start(slow_start, other.slow_start) && same_hedging(hedging, other.hedging);
}

namespace {

// What one member announces; `problem` is set when its "outlier_detection" is malformed,
// and the defaults stand in for it.
AnnouncedAlgorithm read_announcement(const boost::json::object& meta, std::optional<OptionProblem>& problem) {
    AnnouncedAlgorithm announced{LoadBalancerOptions{}.algorithm, {}, {}, {}, {}};
    if (const auto* a = meta.if_contains("algorithm"); a && a->is_string())
        announced.algorithm = std::string(a->get_string());
    if (const auto* o = meta.if_contains("algorithm_opts"); o && o->is_object())
        announced.options = o->get_object();
    if (const auto* d = meta.if_contains("outlier_detection"))
        problem = read_outlier_detection(*d, announced.outlier_detection);
    if (const auto* s = meta.if_contains("slow_start")) {
        SlowStart read;
        if (!read_slow_start(*s, read)) announced.slow_start = read;
    }
    if (const auto* h = meta.if_contains("hedging")) {
        HedgingPolicy read;
        if (!read_hedging(*h, read)) announced.hedging = read;
    }
    return announced;
}

}  // namespace

std::optional<AnnouncedAlgorithm> announced_algorithm(const Groups& groups, std::string_view group) {
    // Compared as read, not as sent: a member that announces no outlier options and one
    // that announces the defaults agree.
    std::optional<AnnouncedAlgorithm> chosen;
    std::optional<boost::json::object> chosen_meta;
    std::string chosen_node;
    std::optional<OptionProblem> problem;
    // Held here: a range-for over members(group)->nodes would walk a snapshot that the
    // temporary shared_ptr frees as soon as the group changes.
    const auto members = groups.members(group);
    for (const auto& node : members->nodes) {
        auto meta = groups.announcement(group, node);
        if (!meta) continue;
        if (!chosen) {
            chosen = read_announcement(*meta, problem);
            chosen_meta = std::move(meta);
            chosen_node = node;
            continue;
        }
        std::optional<OptionProblem> ignored;
        if (read_announcement(*meta, ignored) != *chosen) {
            RPCLB_LOG("balancer", warning) << "members of " << group
                                           << " announce different algorithms, options, outlier detection or hedging; using "
                                           << boost::json::serialize(*chosen_meta);
            break;
        }
    }
    if (problem)
        RPCLB_LOG("balancer", warning) << "member " << chosen_node << " of " << group
                                       << " announces an invalid outlier_detection"
                                       << (problem->field.empty() ? "" : "." + problem->field) << " ("
                                       << problem->reason << "); using the default outlier options";
    return chosen;
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> BalancerRegistry::create_algorithm(
    const std::string& name) {
    return load_algorithm(node_.plugins(), node_.telemetry(), name);
}

std::shared_ptr<LoadBalancer> BalancerRegistry::start(LoadBalancerOptions options) {
    if (auto problem = check(options))
        throw std::invalid_argument("balancer " + options.name + ": " + problem->message());
    {
        std::lock_guard lock(edit_mutex_);
        if (table_.load()->hosted.contains(options.name) || !starting_.insert(options.name).second)
            throw std::invalid_argument("balancer " + options.name + " is already started");
    }
    struct Unreserve {
        BalancerRegistry& r;
        std::string name;
        ~Unreserve() {
            std::lock_guard lock(r.edit_mutex_);
            r.starting_.erase(name);
        }
    } unreserve{*this, options.name};
    auto algorithm = create_algorithm(options.algorithm);
    if (!algorithm) throw std::runtime_error("balancer " + options.name + ": " + algorithm.error().message);
    if (client_) options.node_match_list = NodeMatchList::none();
    auto b = std::make_shared<LoadBalancer>(node_, std::move(options), std::move(*algorithm), true);
    supervisor_.supervise(b);
    std::shared_ptr<LoadBalancer> previous_routing;
    {
        std::lock_guard lock(edit_mutex_);
        edit([&](Table& t) {
            t.hosted[b->name()] = b;
            if (auto it = t.routing.find(b->name()); it != t.routing.end()) {
                previous_routing = it->second;
                t.routing.erase(it);
            }
        });
    }
    if (previous_routing) previous_routing->stop();
    RPCLB_LOG("balancer", info) << "started balancer " << b->name() << " (" << b->options().algorithm
                                << (b->joined() ? ", member" : ", not a member") << ")";
    return b;
}

bool BalancerRegistry::stop(std::string_view name) {
    {
        std::lock_guard lock(edit_mutex_);
        if (!table_.load()->hosted.contains(name)) return false;
        edit([&](Table& t) { t.hosted.erase(t.hosted.find(name)); });
    }
    // The balancer leaves and drains, then its services stop.
    supervisor_.unsupervise(name);
    RPCLB_LOG("balancer", info) << "stopped balancer " << name;
    return true;
}

std::vector<std::string> BalancerRegistry::hosted_names() const {
    std::vector<std::string> names;
    const auto table = table_.load();  // held: the temporary would die before the loop
    for (const auto& [name, b] : table->hosted) names.push_back(name);
    return names;
}

std::shared_ptr<LoadBalancer> BalancerRegistry::Table::find(std::string_view name) const {
    if (auto it = hosted.find(name); it != hosted.end()) return it->second;
    if (auto it = routing.find(name); it != routing.end()) return it->second;
    return nullptr;
}

Result<std::shared_ptr<LoadBalancer>> BalancerRegistry::route(std::string_view name) {
    if (auto b = table_.load()->find(name)) return b;
    return build_routing(name);
}

Result<std::shared_ptr<LoadBalancer>> BalancerRegistry::build_routing(std::string_view name) {
    // Built with no lock held (plugin loading, init, the group monitor); two calls that
    // race here both build, and the one that publishes second uses the first's.
    const auto members = node_.groups().members(name);
    if (members->nodes.empty()) return empty_members_error(name);
    LoadBalancerOptions options;
    options.name = std::string(name);
    options.node_match_list = NodeMatchList::none();
    if (auto announced = announced_algorithm(node_.groups(), name)) {
        options.algorithm = std::move(announced->algorithm);
        options.algorithm_opts = std::move(announced->options);
        options.outlier_detection = announced->outlier_detection;
        options.slow_start = announced->slow_start;
        options.hedging = announced->hedging;
    }
    auto algorithm = create_algorithm(options.algorithm);
    if (!algorithm)
        return ErrorMessage{ErrorCode::service_unavailable,
                            "cannot load algorithm " + options.algorithm + ": " + algorithm.error().message,
                            boost::json::object{{"load_balancer", name}, {"algorithm", options.algorithm}}};
    auto b = std::make_shared<LoadBalancer>(node_, std::move(options), std::move(*algorithm), false);
    try {
        b->start();
    } catch (const std::exception& e) {
        return ErrorMessage{ErrorCode::service_unavailable, e.what(), boost::json::object{{"load_balancer", name}}};
    }
    std::shared_ptr<LoadBalancer> winner;
    {
        std::lock_guard lock(edit_mutex_);
        winner = table_.load()->find(name);
        if (!winner) {
            edit([&](Table& t) { t.routing.emplace(std::string(name), b); });
            return b;
        }
    }
    b->stop();
    return winner;
}

Result<std::shared_ptr<LoadBalancer>> BalancerRegistry::hosted(std::string_view name) const {
    const auto table = table_.load();
    if (auto it = table->hosted.find(name); it != table->hosted.end()) return it->second;
    return ErrorMessage{ErrorCode::service_unavailable,
                        "no balancer " + std::string(name) +
                            " is started on this node to count the call; start it or drop the load_balancer option",
                        boost::json::object{{"load_balancer", name}, {"node", node_.node_name()}}};
}

std::shared_ptr<LoadBalancer> BalancerRegistry::accepting(std::string_view name) const {
    const auto table = table_.load();
    auto it = table->hosted.find(name);
    return it != table->hosted.end() && it->second->joined() ? it->second : nullptr;
}

ServedBalancers::Handle BalancerRegistry::admit(std::string_view name) noexcept {
    auto b = accepting(name);
    if (b) b->track_served();
    return b;
}

void BalancerRegistry::release(const Handle& handle) noexcept {
    static_cast<LoadBalancer*>(handle.get())->release_served();  // admit() hands out LoadBalancers only
}

void BalancerRegistry::clear() {
    std::shared_ptr<const Table> old;
    {
        std::lock_guard lock(edit_mutex_);
        old = table_.exchange(std::make_shared<const Table>());
    }
    for (const auto& [name, b] : old->routing) b->stop();
}

}  // namespace rpclb::detail
