// CPU time counters from Linux /proc/stat, and the utilisation between two samples.
// Sans-I/O: parsing and arithmetic only, so tests feed it text without touching /proc.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rpclb::plugins {

/// Cumulative CPU time of the whole machine, in clock ticks since boot (Linux `USER_HZ`).
struct CpuTimes {
    /// user + nice + system + irq + softirq + steal (guest time is already inside user
    /// and nice, so it is not added again).
    std::uint64_t busy = 0;
    /// busy + idle + iowait.
    std::uint64_t total = 0;
};

/// Parses the aggregate `cpu` line of /proc/stat (proc(5)): "cpu  user nice system idle
/// iowait irq softirq steal guest guest_nice". `text` may be the whole file or its first
/// line; the `cpu` line must come first, as the kernel writes it. Fields the kernel does
/// not report (those after idle appeared in later versions) count as 0.
///
/// Returns nullopt when the text does not start with a `cpu` line of at least four
/// numbers.
inline std::optional<CpuTimes> parse_proc_stat(std::string_view text) {
    constexpr std::string_view tag = "cpu ";
    if (!text.starts_with(tag)) return std::nullopt;
    text.remove_prefix(tag.size());
    text = text.substr(0, text.find('\n'));
    // user nice system idle iowait irq softirq steal
    std::uint64_t field[8] = {};
    std::size_t count = 0;
    const char* p = text.data();
    const char* const end = text.data() + text.size();
    while (count < 8) {
        while (p != end && *p == ' ') ++p;
        if (p == end) break;
        auto [next, ec] = std::from_chars(p, end, field[count]);
        if (ec != std::errc{}) return std::nullopt;
        p = next;
        ++count;
    }
    if (count < 4) return std::nullopt;
    enum { user, nice, system, idle, iowait, irq, softirq, steal };
    CpuTimes times;
    times.busy = field[user] + field[nice] + field[system] + field[irq] + field[softirq] + field[steal];
    times.total = times.busy + field[idle] + field[iowait];
    return times;
}

/// Busy share of the CPU time between `before` and `after`, in percent [0, 100].
///
/// Returns nullopt when no time passed between the samples (the same tick, or counters
/// that went backwards, which Linux allows for iowait).
inline std::optional<double> cpu_percent(const CpuTimes& before, const CpuTimes& after) {
    if (after.total <= before.total) return std::nullopt;
    const std::uint64_t total = after.total - before.total;
    const std::uint64_t busy = after.busy > before.busy ? after.busy - before.busy : 0;
    return std::clamp(100.0 * static_cast<double>(busy) / static_cast<double>(total), 0.0, 100.0);
}

}  // namespace rpclb::plugins
