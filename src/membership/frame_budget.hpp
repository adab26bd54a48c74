// How many membership frames one link may bring (internal, header-only, sans-I/O).
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

namespace rpclb::detail {

/// A token bucket for the membership frames (probes, member states, node lists, group
/// frames) one peer sends: `per_second` on average, up to `burst` at once. A frame past it
/// is dropped unread, so a peer that floods them costs this node bounded work and makes it
/// send a bounded number of probes on its behalf. A healthy peer of a 1,000-node mesh
/// sends a few per second, and a few thousand while a thousand nodes join.
///
/// Thread safety: none; one link's, used on that link's strand (or under a lock).
class FrameBudget {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr double per_second = 1000;
    static constexpr double burst = 10000;

    /// Takes one frame's token at `now`; false when the budget is spent (drop the frame).
    bool take(Clock::time_point now) noexcept {
        if (now > last_) {
            if (last_ != Clock::time_point{})
                tokens_ = std::min(burst, tokens_ + std::chrono::duration<double>(now - last_).count() * per_second);
            last_ = now;
        }
        if (tokens_ < 1) return false;
        tokens_ -= 1;
        return true;
    }

    /// True the first time it is asked: say so once per link.
    bool first_refusal() noexcept { return !std::exchange(refused_, true); }

private:
    double tokens_ = burst;
    bool refused_ = false;
    Clock::time_point last_{};
};

}  // namespace rpclb::detail
