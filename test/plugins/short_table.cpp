// A plugin of this contract whose table says it is shorter than the contract's (as if its
// last functions were missing): the loader must refuse it, naming both sizes.
#include <rpclb/selection_algorithm.hpp>

#include <cstddef>

namespace {

class Never final : public rpclb::SelectionAlgorithm {
public:
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&, const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

constexpr rpclb_plugin_table table = [] {
    auto t = rpclb::detail::PluginGlue<Never>::table("short_table");
    t.size = offsetof(rpclb_plugin_table, services);
    return t;
}();

}  // namespace

extern "C" BOOST_SYMBOL_EXPORT const rpclb_plugin_table* rpclb_plugin(void) { return &table; }
