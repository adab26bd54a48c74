// An algorithm that breaks the plugin contract on purpose, for the plugin-boundary tests
// (test/cluster/plugin_boundary.cpp). It picks the first member (choose_nodes: the first
// `count` members) and, by its options:
//  - "throw_in": one of "init", "services", "local", "choose_from_nodes", "choose_nodes",
//    "on_node_change", "release": that hook throws, every time it runs;
//  - "throw_what": "std" (default) throws std::runtime_error("<hook> misbehaves"),
//    "other" throws an int (not a std::exception);
//  - "bad_nodes": "duplicate" makes choose_nodes return index 0 `count` times,
//    "out_of_range" makes the last index members.nodes.size(), "too_many" returns every
//    member even when `count` is smaller.
// Unknown option values are refused by init with std::invalid_argument.
#include <rpclb/selection_algorithm.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>

namespace {

constexpr std::array<std::string_view, 7> hooks{"init",         "services",       "local",       "choose_from_nodes",
                                                "choose_nodes", "on_node_change", "release"};
constexpr std::array<std::string_view, 2> throw_whats{"std", "other"};
constexpr std::array<std::string_view, 3> bad_nodes{"duplicate", "out_of_range", "too_many"};

// The string option `name`, which must be one of `valid`; `fallback` when absent.
std::string option(const boost::json::object& options, std::string_view name, std::string fallback,
                   std::span<const std::string_view> valid) {
    const auto* v = options.if_contains(name);
    if (!v) return fallback;
    if (!v->is_string()) throw std::invalid_argument("misbehaving_hooks: " + std::string(name) + " must be a string");
    std::string value(v->as_string());
    if (std::find(valid.begin(), valid.end(), value) == valid.end())
        throw std::invalid_argument("misbehaving_hooks: unknown " + std::string(name) + " \"" + value + "\"");
    return value;
}

class MisbehavingHooks final : public rpclb::SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = rpclb::capability::services | rpclb::capability::choose_many;

    void init(const rpclb::AlgorithmContext& context, const boost::json::object& options) override {
        context_ = context;
        throw_in_ = option(options, "throw_in", "", hooks);
        other_ = option(options, "throw_what", "std", throw_whats) == "other";
        bad_nodes_ = option(options, "bad_nodes", "", bad_nodes);
        maybe_throw("init");
    }

    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                 const rpclb::PickOptions&) override {
        maybe_throw("choose_from_nodes");
        if (members.nodes.empty()) return rpclb::empty_members_error(context_.balancer);
        return std::size_t{0};
    }

    rpclb::Result<std::vector<std::size_t>> choose_nodes(const rpclb::MemberSnapshot& members,
                                                         std::size_t count,
                                                         const rpclb::PickOptions&) override {
        maybe_throw("choose_nodes");
        const auto size = members.nodes.size();
        if (size == 0) return rpclb::empty_members_error(context_.balancer);
        if (bad_nodes_ == "duplicate") return std::vector<std::size_t>(count, 0);
        std::vector<std::size_t> picked(bad_nodes_ == "too_many" ? size : std::min(count, size));
        std::iota(picked.begin(), picked.end(), std::size_t{0});
        if (bad_nodes_ == "out_of_range") picked.back() = size;
        return picked;
    }

    void on_node_change(rpclb::NodeChange, std::span<const std::string>) override { maybe_throw("on_node_change"); }

    void release(const rpclb::MemberSnapshot&, std::size_t, const rpclb::CallOutcome&) override {
        maybe_throw("release");
    }

    bool local() const override {
        maybe_throw("local");
        return false;
    }

    std::vector<std::shared_ptr<rpclb::Service>> services() override {
        maybe_throw("services");
        return {};
    }

private:
    void maybe_throw(std::string_view hook) const {
        if (hook != throw_in_) return;
        if (other_) throw 42;
        throw std::runtime_error(std::string(hook) + " misbehaves");
    }

    rpclb::AlgorithmContext context_;
    std::string throw_in_;
    bool other_ = false;
    std::string bad_nodes_;
};

}  // namespace

RPCLB_PLUGIN(misbehaving_hooks, MisbehavingHooks)
