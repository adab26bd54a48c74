#include <rpclb/detail/view_clock.hpp>

#include <atomic>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace rpclb::detail {
namespace {

std::atomic<ViewClock> installed{&time_stamp_ticks};

}  // namespace

std::uint64_t time_stamp_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
#endif
}

std::uint64_t view_clock_now() noexcept { return installed.load(std::memory_order_relaxed)(); }

void set_view_clock(ViewClock clock) noexcept {
    installed.store(clock ? clock : &time_stamp_ticks, std::memory_order_relaxed);
}

}  // namespace rpclb::detail
