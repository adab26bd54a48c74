// Logging set-up: Boost.Log, one channel per component ("mesh", "rpc", "groups",
// "balancer", "plugins").
#pragma once

#include <string_view>

namespace rpclb::log {

/// Installs a console sink on stderr with the format
/// `2026-11-29 19:00:00.123456 <severity> [channel] message` and filters out records below
/// `level`. Valid levels: trace, debug, info, warning, error, fatal. Calling it again
/// replaces the level. Throws std::invalid_argument naming an unknown level.
///
/// Until init() or set_level() is called, rpclb emits only warnings and errors, and to
/// wherever Boost.Log sends records (its default sink, or the application's own sinks).
///
/// Thread safety: call it before starting clusters; records may be emitted from any thread.
void init(std::string_view level = "info");

/// Changes the minimum severity; same levels and errors as init().
void set_level(std::string_view level);

}  // namespace rpclb::log
