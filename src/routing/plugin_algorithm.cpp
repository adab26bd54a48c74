#include "plugin_algorithm.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <new>
#include <stdexcept>
#include <utility>

namespace rpclb::detail {
namespace {

rpclb_plugin_text text(std::string_view s) noexcept { return {s.data(), s.size()}; }

rpclb_plugin_pick c_pick(const PickOptions& options) noexcept {
    rpclb_plugin_pick pick{0, {nullptr, 0}};
    if (options.key) pick = {1, text(*options.key)};
    return pick;
}

// A Failure value this library knows (error.hpp), not 0.
bool known_failure(std::int32_t value) noexcept {
    return value > 0 && value <= static_cast<std::int32_t>(Failure::tls_refused);
}

// What a hook that failed without a message (an exception not derived from
// std::exception in the plugin) throws here: the balancer reports it as such.
struct ForeignException {};

}  // namespace

PluginAlgorithm::PluginAlgorithm(std::shared_ptr<void> library, const rpclb_plugin_table* table,
                                 void* instance) noexcept
    : library_(std::move(library)), table_(table), instance_(instance) {}

PluginAlgorithm::~PluginAlgorithm() { table_->destroy(instance_); }

void PluginAlgorithm::fail(char* message) const {
    if (!message) throw ForeignException{};
    std::string what(message);
    table_->free_string(message);
    throw std::runtime_error(what);
}

const PluginAlgorithm::View& PluginAlgorithm::view_of(const MemberSnapshot& members) const {
    return members.state<View>(snapshot_owner(), [&] {
        std::vector<rpclb_plugin_text> nodes;
        nodes.reserve(members.nodes.size());
        for (const auto& n : members.nodes) nodes.push_back(text(n));
        std::vector<std::int64_t*> counts;
        if (!members.calls.empty()) {
            counts.reserve(members.calls.size());
            // An InFlightCount is its atomic 64-bit count, on a cache line of its own.
            for (const auto& c : members.calls) counts.push_back(reinterpret_cast<std::int64_t*>(&c->calls));
        }
        const rpclb_plugin_members m{nodes.data(), nodes.size(), members.version,
                                     counts.empty() ? nullptr : counts.data()};
        char* error = nullptr;
        void* opened = table_->open_members(instance_, &m, &error);
        if (!opened) fail(error);
        return View(table_, opened, library_, std::move(counts));
    });
}

ErrorMessage PluginAlgorithm::refused(rpclb_plugin_error& error) const {
    ErrorMessage e{static_cast<ErrorCode>(error.code), error.message ? error.message : "", {}};
    if (known_failure(error.failure)) e.reason = make_error_code(static_cast<Failure>(error.failure));
    if (error.details) {
        boost::system::error_code ec;
        auto details = boost::json::parse(error.details, ec);
        if (!ec && details.is_object()) e.details = std::move(details.get_object());
    }
    if (e.details.empty()) e.details = boost::json::object{{"load_balancer", balancer_}};
    if (error.message) table_->free_string(error.message);
    if (error.details) table_->free_string(error.details);
    return e;
}

void PluginAlgorithm::init(const AlgorithmContext& context, const boost::json::object& options) {
    balancer_ = context.balancer;
    const std::string json = boost::json::serialize(options);
    const rpclb_plugin_context c{text(context.balancer), text(context.local_node),
                                 (table_->capabilities & capability::host) ? context.host : nullptr};
    char* error = nullptr;
    if (table_->init(instance_, &c, text(json), &error) != RPCLB_PLUGIN_OK) {
        if (!error) throw ForeignException{};
        std::string what(error);
        table_->free_string(error);
        throw std::invalid_argument(what);
    }
}

Result<const PluginAlgorithm::View*> PluginAlgorithm::checked_view(const MemberSnapshot& members) const {
    try {
        return &view_of(members);
    } catch (const std::bad_alloc&) {
        return state_build_error(balancer_);
    }
}

Result<std::size_t> PluginAlgorithm::choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) {
    const auto view = checked_view(members);
    if (!view) return view.error();
    const rpclb_plugin_pick pick = c_pick(options);
    std::size_t index = 0;
    rpclb_plugin_error error{0, 0, nullptr, nullptr};
    const int r = table_->choose(instance_, (*view)->view, &pick, &index, &error);
    if (r == RPCLB_PLUGIN_OK) [[likely]]
        return index;
    if (r != RPCLB_PLUGIN_REFUSED) fail(error.message);
    return refused(error);
}

Result<std::vector<std::size_t>> PluginAlgorithm::choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                               const PickOptions& options) {
    const auto view = checked_view(members);
    if (!view) return view.error();
    const rpclb_plugin_pick pick = c_pick(options);
    // One more than a contract-abiding answer holds, so that a longer one shows as such.
    const std::size_t capacity = std::min(count, members.nodes.size()) + 1;
    std::vector<std::size_t> indices(capacity);
    std::size_t answered = 0;
    rpclb_plugin_error error{0, 0, nullptr, nullptr};
    const int r = table_->choose_many(instance_, (*view)->view, count, &pick, indices.data(), capacity, &answered,
                                      &error);
    if (r == RPCLB_PLUGIN_OK) {
        indices.resize(std::min(answered, capacity));
        return indices;
    }
    if (r != RPCLB_PLUGIN_REFUSED) fail(error.message);
    return refused(error);
}

void PluginAlgorithm::on_node_change(NodeChange change, std::span<const std::string> nodes) {
    std::vector<rpclb_plugin_text> names;
    names.reserve(nodes.size());
    for (const auto& n : nodes) names.push_back(text(n));
    char* error = nullptr;
    if (table_->node_change(instance_, change == NodeChange::joined ? 0 : 1, names.data(), names.size(), &error) !=
        RPCLB_PLUGIN_OK)
        fail(error);
}

void PluginAlgorithm::release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
    const rpclb_plugin_outcome o{outcome.error ? static_cast<std::int32_t>(*outcome.error) : 0,
                                 static_cast<std::int32_t>(outcome.origin), outcome.latency ? 1 : 0,
                                 outcome.latency ? static_cast<std::int64_t>(outcome.latency->count()) : 0};
    char* error = nullptr;
    if (table_->release(instance_, view_of(members).view, index, &o, &error) != RPCLB_PLUGIN_OK) fail(error);
}

bool PluginAlgorithm::local() const {
    int answer = 0;
    char* error = nullptr;
    if (table_->local(instance_, &answer, &error) != RPCLB_PLUGIN_OK) fail(error);
    return answer != 0;
}

std::vector<std::shared_ptr<Service>> PluginAlgorithm::services() {
    std::vector<std::shared_ptr<Service>> out;
    if (!(table_->capabilities & capability::services)) return out;
    char* error = nullptr;
    if (table_->services(instance_, &out, &error) != RPCLB_PLUGIN_OK) fail(error);
    return out;
}

}  // namespace rpclb::detail
