// A plugin whose factory throws: the loader must turn the exception into an error that
// carries its text, and nothing may escape to the caller.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

const rpclb::PluginInfo* info() {
    static const rpclb::PluginInfo i{RPCLB_PLUGIN_ABI_VERSION, "throwing_factory",
                                     RPCLB_VERSION_STRING, RPCLB_COMPILER_ID};
    return &i;
}

std::unique_ptr<rpclb::SelectionAlgorithm> create() {
    throw std::runtime_error("throwing_factory refuses to build an algorithm");
}

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
BOOST_DLL_ALIAS(create, rpclb_create_algorithm)
