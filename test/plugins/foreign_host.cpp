// A plugin that declares capability::host (it would be handed a C++ AlgorithmHost) and
// names another standard library: the loader must refuse it, naming both, before
// creating anything.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

class UsesHost final : public rpclb::SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = rpclb::capability::host;
    UsesHost() { throw std::logic_error("foreign_host created despite its standard library"); }
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&, const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

constexpr rpclb_plugin_table table = [] {
    auto t = rpclb::detail::PluginGlue<UsesHost>::table("foreign_host");
    t.compiler = "Clang version 14.0.6 / libc++ version 14000";
    return t;
}();

}  // namespace

extern "C" BOOST_SYMBOL_EXPORT const rpclb_plugin_table* rpclb_plugin(void) { return &table; }
