// A plugin whose handshake claims another compiler: its C++ ABI can't be trusted, so the
// loader must refuse it before calling its factory.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

const rpclb::PluginInfo* info() {
    static const rpclb::PluginInfo i{RPCLB_PLUGIN_ABI_VERSION, "wrong_compiler",
                                     RPCLB_VERSION_STRING, "Borland C++ 5.5 / Rogue Wave"};
    return &i;
}

std::unique_ptr<rpclb::SelectionAlgorithm> create() {
    throw std::logic_error("wrong_compiler factory called despite the compiler mismatch");
}

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
BOOST_DLL_ALIAS(create, rpclb_create_algorithm)
