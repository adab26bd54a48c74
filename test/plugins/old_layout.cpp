// A plugin built against the previous plugin contract (version 6), which passed C++
// objects: it exports the handshake `rpclb_plugin_info` of that contract and no C table.
// The loader must refuse it, naming both versions, before calling its factory. The
// handshake is written by hand, in the layout of contract 6.
#include <rpclb/version.hpp>

#include <boost/dll/alias.hpp>

#include <cstdint>
#include <stdexcept>

namespace {

struct PluginInfo6 {
    std::uint32_t abi_version;
    const char* name;
    const char* rpclb_version;
    const char* compiler;
    std::uint64_t capabilities;
};

static_assert(RPCLB_PLUGIN_ABI_MIN_VERSION == 7, "the previous contract is version 6");

const PluginInfo6* info() {
    static const PluginInfo6 i{6, "old_layout", "0.1.0", "GNU C++ version 12.2.0 / GNU libstdc++ version 20230528", 0};
    return &i;
}

// Reaching the factory would mean the loader skipped the check.
void* create() { throw std::logic_error("old_layout factory called despite the contract mismatch"); }

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
BOOST_DLL_ALIAS(create, rpclb_create_algorithm)
