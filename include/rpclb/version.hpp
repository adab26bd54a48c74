// rpclb version and the plugin ABI version that the loader checks.
#pragma once

#include <cstdint>

#define RPCLB_VERSION_MAJOR 0
#define RPCLB_VERSION_MINOR 1
#define RPCLB_VERSION_PATCH 0
#define RPCLB_VERSION_STRING "0.1.0"

/// Version of the plugin ABI: everything a plugin compiles in from rpclb's public headers.
/// That is the layout of rpclb::SelectionAlgorithm, rpclb::AlgorithmHost (with
/// rpclb::TelemetryBus, which it hands out), rpclb::Service, rpclb::PluginInfo,
/// rpclb::ErrorMessage (returned by picks; gained its typed `reason` in 3) and
/// the factory signature, and also of every type whose inline code reads memory the
/// library owns: rpclb::MemberSnapshot (with its detail::SnapshotCache), the state
/// rpclb::AlgorithmState hands out (NodeReading, detail::InFlight, detail::CountTable,
/// detail::ReadingTable, detail::BlockCursor) and detail::thread_slot. Bump it whenever any of them changes
/// incompatibly (algorithm_state.hpp checks the sizes of the state it hands out against
/// this number at compile time); the loader refuses a plugin whose exported value differs,
/// naming both. 2: Service gained its exit reporting (set_exit_receiver, report_failure,
/// report_exit). 3: per-thread in-flight tables gave way to one detail::InFlight per node,
/// and MemberSnapshot carries a detail::SnapshotCache. 4: plugins reach the node through
/// rpclb::AlgorithmHost (AlgorithmContext::host replaced AlgorithmContext::cluster, so no
/// plugin compiles in Cluster's API), AlgorithmState::reading hands out shared readings,
/// and SnapshotCache gained `readings` (detail::ReadingTable). 5: detail::InFlight counts on
/// stripes and detail::CountTable carries the picking threads' views (detail::StripeViews).
#define RPCLB_PLUGIN_ABI_VERSION 5u

namespace rpclb {

/// The rpclb version this library was built as, e.g. "0.1.0".
inline constexpr const char* version_string = RPCLB_VERSION_STRING;

/// The plugin ABI version this library accepts (see RPCLB_PLUGIN_ABI_VERSION).
inline constexpr std::uint32_t plugin_abi_version = RPCLB_PLUGIN_ABI_VERSION;

}  // namespace rpclb
