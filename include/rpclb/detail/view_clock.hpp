// The clock that tells a picking thread how fast it picks: InFlightCount::begin_pick reads
// it to decide how long the thread may keep its view of other threads' calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rpclb::detail {

/// A clock in ticks that only grow.
using ViewClock = std::uint64_t (*)() noexcept;

/// The default view clock: the CPU's time-stamp counter on x86 (one `rdtsc`, about 1–4
/// ticks per ns, constant-rate on every x86 CPU of the last decade), else
/// std::chrono::steady_clock in ns.
inline std::uint64_t time_stamp_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
#endif
}

/// The clock a test put in place of the default (set_view_clock); nullptr: none.
extern std::atomic<ViewClock> installed_view_clock;

/// The clock views use now: time_stamp_ticks unless a test put another in. One relaxed
/// load and, by default, one `rdtsc` (no call), so a pick can read it every time.
///
/// Thread safety: safe from any thread.
inline std::uint64_t view_clock_now() noexcept {
    if (const ViewClock clock = installed_view_clock.load(std::memory_order_relaxed)) [[unlikely]]
        return clock();
    return time_stamp_ticks();
}

/// Puts `clock` in place of the views' clock (nullptr: back to time_stamp_ticks), for tests
/// that need to say how fast a thread picks. Process-wide; not for production use.
///
/// Thread safety: safe from any thread; reads racing with it see the old or the new clock.
void set_view_clock(ViewClock clock) noexcept;

}  // namespace rpclb::detail
