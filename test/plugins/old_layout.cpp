// A plugin built against the previous plugin contract: its handshake reports the contract
// version it was built with, one less than this rpclb's oldest, and the loader must refuse
// it, naming the versions, before calling its factory. The handshake is written by hand
// because RPCLB_PLUGIN always exports the version of the headers it is compiled with.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

static_assert(RPCLB_PLUGIN_ABI_VERSION > 1, "the previous ABI version is this one less one");

const rpclb::PluginInfo* info() {
    static const rpclb::PluginInfo i{RPCLB_PLUGIN_ABI_MIN_VERSION - 1, "old_layout", "0.1.0", RPCLB_COMPILER_ID, 0};
    return &i;
}

// Reaching the factory would mean the loader skipped the check.
std::unique_ptr<rpclb::SelectionAlgorithm> create() {
    throw std::logic_error("old_layout factory called despite the ABI mismatch");
}

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
BOOST_DLL_ALIAS(create, rpclb_create_algorithm)
