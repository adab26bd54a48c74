// A plugin with a correct handshake and no factory: the loader must say which symbol
// is missing.
#include <rpclb/selection_algorithm.hpp>

namespace {

const rpclb::PluginInfo* info() {
    static const rpclb::PluginInfo i{RPCLB_PLUGIN_ABI_VERSION, "no_factory", RPCLB_VERSION_STRING,
                                     RPCLB_COMPILER_ID};
    return &i;
}

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
