// rpclb version and the plugin ABI version that the loader checks.
#pragma once

#include <cstdint>

#define RPCLB_VERSION_MAJOR 0
#define RPCLB_VERSION_MINOR 1
#define RPCLB_VERSION_PATCH 0
#define RPCLB_VERSION_STRING "0.1.0"

/// Version of the plugin contract: the C boundary of rpclb/plugin_abi.h (the table a
/// plugin exports, its functions and structs) and the meaning of what a plugin compiles in
/// from rpclb's public plugin headers and uses through a capability (MemberSnapshot,
/// InFlightCount, CallOutcome, AlgorithmHost, Service, ErrorMessage). It changes only when
/// one of those changes incompatibly; what a plugin uses within it is told by capability
/// flags (rpclb::capability). The loader accepts a plugin whose version is from
/// RPCLB_PLUGIN_ABI_MIN_VERSION to this one.
#define RPCLB_PLUGIN_ABI_VERSION 7u
/// The oldest contract version this library still loads.
#define RPCLB_PLUGIN_ABI_MIN_VERSION 7u

namespace rpclb {

/// The rpclb version this library was built as, e.g. "0.1.0".
inline constexpr const char* version_string = RPCLB_VERSION_STRING;

/// The plugin ABI version this library accepts (see RPCLB_PLUGIN_ABI_VERSION).
inline constexpr std::uint32_t plugin_abi_version = RPCLB_PLUGIN_ABI_VERSION;

}  // namespace rpclb
