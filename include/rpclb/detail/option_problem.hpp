// One option outside its valid range, and what the options of every part share: the
// longest duration an option accepts and the UTF-8 rule for names.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// Longest duration an option accepts: 2^32 − 1 ms (about 49.7 days), the largest timeout
/// Erlang accepts, so that a deadline `now + duration` can never overflow a steady_clock
/// time point. The predecessor's `:infinity` drain timeout maps to this.
inline constexpr std::chrono::milliseconds max_option_duration{4'294'967'295};

/// One option outside its valid range.
struct OptionProblem {
    /// The option's JSON config key (`worker_threads`, `idle_timeout_ms`, `name`...).
    std::string field;
    /// Why, as a predicate that reads after the field: "must be in 1..64, got 0".
    std::string reason;

    /// `field + " " + reason`, the text Cluster's constructor throws.
    std::string message() const { return field + " " + reason; }
    /// The command-line flag of `field` as rpclb-node and rpclb-call spell it: "--" and
    /// the field with '.' and '_' as '-' (`tls.min_version` -> `--tls-min-version`).
    std::string flag() const {
        std::string f = "--" + field;
        for (auto& c : f)
            if (c == '.' || c == '_') c = '-';
        return f;
    }
};

/// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
/// nothing above U+10FFFF), as the JSON decoder of a frame requires of every string.
/// Thread safety: pure function.
bool valid_utf8(std::string_view text) noexcept;

/// The problem of a duration option `field`, or nullopt when it is in 1 ms (0 with
/// `zero_allowed`) .. max_option_duration. Thread safety: pure function.
std::optional<OptionProblem> check_duration(const char* field, std::chrono::milliseconds value, bool zero_allowed);

/// The problem of a name option `field`, or nullopt when it is valid UTF-8 without control
/// characters (names travel in JSON frames and in the handshake's newline-separated
/// input). Thread safety: pure function.
std::optional<OptionProblem> check_printable(const char* field, std::string_view text);

}  // namespace rpclb::detail
