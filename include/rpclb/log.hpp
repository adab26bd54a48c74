// Logging set-up: Boost.Log, one channel per component ("mesh", "rpc", "groups",
// "balancer", "plugins").
#pragma once

#include <string_view>

namespace rpclb::log {

/// Installs rpclb's console sink on stderr with the format
/// `2026-11-29 19:00:00.123456 <severity> [channel] message` and filters out records below
/// `level`. A record logged on a thread with a trace context (a call's handler, a
/// TraceScope: <rpclb/trace.hpp>) ends with ` trace_id=<32 hex> span_id=<16 hex>`, from the
/// global attribute "Trace" (a std::string, empty elsewhere), which this function and
/// use_application_sinks() add for the application's sinks too. Valid levels: trace, debug, info, warning, error, fatal. Calling it again
/// replaces the level. Throws std::invalid_argument naming an unknown level.
///
/// Nothing rpclb logs goes to stdout, whether or not this is called: until init(),
/// use_application_sinks() or set_level() is called, rpclb emits only warnings and errors,
/// and its first record installs the same console sink on stderr. That sink takes the
/// place of Boost.Log's default sink (which prints on stdout), so records of the
/// application's own that would have gone there go to stderr too.
///
/// Thread safety: call it before starting clusters; records may be emitted from any thread.
void init(std::string_view level = "info");

/// For an application that sends Boost.Log records to sinks of its own: rpclb installs no
/// console sink (and removes the one it installed), so its records reach only the
/// application's sinks, and it emits records from `level` up. Unlike init(), it leaves
/// the Boost.Log core's filter, which applies to the application's records too, alone.
/// Same levels and errors as init(); init() afterwards installs the console sink again.
///
/// Thread safety: as init().
void use_application_sinks(std::string_view level = "warning");

/// Changes the minimum severity; same levels and errors as init().
void set_level(std::string_view level);

}  // namespace rpclb::log
