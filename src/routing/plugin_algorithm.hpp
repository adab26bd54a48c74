// The host side of the plugin boundary: a SelectionAlgorithm that calls a plugin's C table.
#pragma once

#include <rpclb/plugin_abi.h>
#include <rpclb/selection_algorithm.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// One algorithm instance of a loaded plugin, seen as a SelectionAlgorithm: each hook
/// turns its arguments into the C data of rpclb/plugin_abi.h, calls the table, and turns
/// the answer back (a refused pick into an ErrorMessage, a failed hook into an exception
/// of this library). The plugin's view of a snapshot is kept as this instance's state of
/// the snapshot, built at the first pick from it and closed with it.
///
/// Holds a reference to the plugin's library (`library`, any object whose life keeps
/// it loaded), as does each view; the table must have passed the loader's checks.
///
/// Thread safety: as the plugin's algorithm (SelectionAlgorithm's rules).
class PluginAlgorithm final : public SelectionAlgorithm {
public:
    PluginAlgorithm(std::shared_ptr<void> library, const rpclb_plugin_table* table, void* instance) noexcept;
    ~PluginAlgorithm() override;
    PluginAlgorithm(const PluginAlgorithm&) = delete;
    PluginAlgorithm& operator=(const PluginAlgorithm&) = delete;

    void init(const AlgorithmContext& context, const boost::json::object& options) override;
    Result<std::size_t> choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) override;
    Result<std::vector<std::size_t>> choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                  const PickOptions& options) override;
    void on_node_change(NodeChange change, std::span<const std::string> nodes) override;
    void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) override;
    bool local() const override;
    std::vector<std::shared_ptr<Service>> services() override;

    /// The plugin's algorithm object, as its `create` returned it (a `T*` of RPCLB_PLUGIN's
    /// `T`): for tests compiled with the plugin's sources, which may look inside it.
    void* instance() const noexcept { return instance_; }

private:
    // The plugin's view of one snapshot, closed when the snapshot drops its state; `counts`
    // is the array of in-flight counts the view was opened with.
    struct View {
        const rpclb_plugin_table* table = nullptr;
        void* view = nullptr;
        std::shared_ptr<void> library;
        std::vector<std::int64_t*> counts;
        View(const rpclb_plugin_table* t, void* v, std::shared_ptr<void> l, std::vector<std::int64_t*> c) noexcept
            : table(t), view(v), library(std::move(l)), counts(std::move(c)) {}
        View(View&& other) noexcept
            : table(other.table),
              view(std::exchange(other.view, nullptr)),
              library(std::move(other.library)),
              counts(std::move(other.counts)) {}
        View& operator=(View&&) = delete;
        ~View() {
            if (view) table->close_members(view);
        }
    };

    const View& view_of(const MemberSnapshot& members) const;
    // view_of() for a pick: a failed allocation is the pick's error, not an exception.
    Result<const View*> checked_view(const MemberSnapshot& members) const;
    [[noreturn]] void fail(char* text) const;
    // The ErrorMessage of a refused pick; gives the plugin's strings back.
    ErrorMessage refused(rpclb_plugin_error& error) const;

    std::shared_ptr<void> library_;
    const rpclb_plugin_table* table_;
    void* instance_;
    std::string balancer_;
};

}  // namespace rpclb::detail
