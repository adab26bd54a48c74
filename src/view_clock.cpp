#include <rpclb/detail/view_clock.hpp>

namespace rpclb::detail {

std::atomic<ViewClock> installed_view_clock{nullptr};

void set_view_clock(ViewClock clock) noexcept { installed_view_clock.store(clock, std::memory_order_relaxed); }

}  // namespace rpclb::detail
