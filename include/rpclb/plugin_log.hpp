// Logging for plugins: one record on rpclb's log, at a severity.
#pragma once

#include <string_view>

namespace rpclb {

/// The severities of rpclb's log (Boost.Log's trivial levels).
enum class LogSeverity { trace, debug, info, warning, error, fatal };

/// Emits `message` on rpclb's log channel `channel` (e.g. "balancer") at `severity`, if
/// that severity is not filtered out (rpclb::log::init). For plugins' services and
/// set-up: never from a pick or a release. Thread-safe; never throws.
void plugin_log(std::string_view channel, LogSeverity severity, std::string_view message) noexcept;

}  // namespace rpclb
