// A plugin whose table names another compiler and standard library. Only C data crosses
// the boundary, so the loader must load it and its picks must serve; that it picks the
// last member shows its own code runs.
#include <rpclb/selection_algorithm.hpp>

namespace {

class LastMember final : public rpclb::SelectionAlgorithm {
public:
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                 const rpclb::PickOptions&) override {
        if (members.nodes.empty()) return rpclb::empty_members_error("wrong_compiler");
        return members.nodes.size() - 1;
    }
};

constexpr rpclb_plugin_table table = [] {
    auto t = rpclb::detail::PluginGlue<LastMember>::table("wrong_compiler");
    t.compiler = "Borland C++ 5.5 / Rogue Wave";
    return t;
}();

}  // namespace

extern "C" BOOST_SYMBOL_EXPORT const rpclb_plugin_table* rpclb_plugin(void) { return &table; }
