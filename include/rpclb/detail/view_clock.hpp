// The clock that tells a picking thread how fast it picks: InFlightCount::estimate reads
// it to decide how long it may keep its view of other threads' calls.
#pragma once

#include <cstdint>

namespace rpclb::detail {

/// A clock in ticks that only grow: one read per refresh of a view, never per pick.
using ViewClock = std::uint64_t (*)() noexcept;

/// The default ViewClock: the CPU's time-stamp counter on x86 (one `rdtsc`, about 1–4 ticks
/// per ns, constant-rate on every CPU of the last decade), else std::chrono::steady_clock
/// in ns.
std::uint64_t time_stamp_ticks() noexcept;

/// The clock views use now: time_stamp_ticks unless a test put another in. Reading it is
/// one relaxed atomic load and an indirect call.
///
/// Thread safety: safe from any thread.
std::uint64_t view_clock_now() noexcept;

/// Puts `clock` in place of the views' clock (nullptr: back to time_stamp_ticks), for tests
/// that need to say how fast a thread picks. Process-wide; not for production use.
///
/// Thread safety: safe from any thread; reads racing with it see the old or the new clock.
void set_view_clock(ViewClock clock) noexcept;

}  // namespace rpclb::detail
