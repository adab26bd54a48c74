// A plugin of this contract whose table has a null `create`: the loader must refuse it,
// naming the function, before calling anything of it.
#include <rpclb/selection_algorithm.hpp>

namespace {

class Never final : public rpclb::SelectionAlgorithm {
public:
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&, const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

constexpr rpclb_plugin_table table = [] {
    auto t = rpclb::detail::PluginGlue<Never>::table("no_factory");
    t.create = nullptr;
    return t;
}();

}  // namespace

extern "C" BOOST_SYMBOL_EXPORT const rpclb_plugin_table* rpclb_plugin(void) { return &table; }
