// rpclb version and the plugin ABI version that the loader checks.
#pragma once

#include <cstdint>

#define RPCLB_VERSION_MAJOR 0
#define RPCLB_VERSION_MINOR 1
#define RPCLB_VERSION_PATCH 0
#define RPCLB_VERSION_STRING "0.1.0"

/// Version of the plugin ABI: the layout of rpclb::SelectionAlgorithm, rpclb::Service,
/// rpclb::PluginInfo and the factory signature. Bump it whenever any of them changes
/// incompatibly; the loader refuses a plugin whose exported value differs. 2: Service
/// gained its exit reporting (set_exit_receiver, report_failure, report_exit). 3:
/// rpclb::ErrorMessage (returned by picks) gained its typed `reason`.
#define RPCLB_PLUGIN_ABI_VERSION 3u

namespace rpclb {

/// The rpclb version this library was built as, e.g. "0.1.0".
inline constexpr const char* version_string = RPCLB_VERSION_STRING;

/// The plugin ABI version this library accepts (see RPCLB_PLUGIN_ABI_VERSION).
inline constexpr std::uint32_t plugin_abi_version = RPCLB_PLUGIN_ABI_VERSION;

}  // namespace rpclb
