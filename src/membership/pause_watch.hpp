// Whether this node itself was not running (internal, header-only, sans-I/O).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>

namespace rpclb::detail {

/// Tells a node that was not scheduled for a while (stopped by SIGSTOP, frozen by a
/// debugger or a VM pause, starved of CPU) from links that fail on their own: the node's
/// own timer is late. The mesh's one timer reports when it is due (armed) and when it ran
/// (woke); a link that times out asks paused(): the length of the pause when the timer is
/// overdue by at least `threshold` now, or ran that late within `window` before now. The
/// first such answer of each pause is reported (first_report), so the node says once that
/// it was not running instead of blaming every peer.
///
/// Thread safety: every member may be called from any thread at once (atomics only).
class PauseWatch {
public:
    using Clock = std::chrono::steady_clock;

    PauseWatch(Clock::duration threshold, Clock::duration window) : threshold_(threshold), window_(window) {}

    /// The timer is due at `due`; Clock::time_point{} or earlier (time_point::min(): at
    /// once) is no instant to be late for.
    void armed(Clock::time_point due) noexcept {
        due_.store(std::max(due, Clock::time_point{}).time_since_epoch().count(), std::memory_order_relaxed);
    }

    /// The timer ran at `now`: a pause ends if it was late by `threshold` or more.
    void woke(Clock::time_point now) noexcept {
        const auto due = this->due();
        if (due == Clock::time_point{} || now - due < threshold_) return;
        pause_length_.store((now - due).count(), std::memory_order_relaxed);
        pause_end_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    }

    /// How long this node was not running, when it is overdue now or its pause ended less
    /// than `window` ago; nullopt otherwise.
    std::optional<Clock::duration> paused(Clock::time_point now) const noexcept {
        if (const auto due = this->due(); due != Clock::time_point{} && now - due >= threshold_) return now - due;
        const Clock::time_point end{Clock::duration(pause_end_.load(std::memory_order_relaxed))};
        if (end != Clock::time_point{} && now >= end && now - end < window_)
            return Clock::duration(pause_length_.load(std::memory_order_relaxed));
        return std::nullopt;
    }

    /// True for the first caller after each pause: say it once. A pause is the same one
    /// while its reports come less than `window` apart.
    bool first_report(Clock::time_point now) noexcept {
        const auto last = Clock::time_point{Clock::duration(reported_.exchange(now.time_since_epoch().count()))};
        return last == Clock::time_point{} || now - last >= window_;
    }

private:
    Clock::time_point due() const noexcept {
        return Clock::time_point{Clock::duration(due_.load(std::memory_order_relaxed))};
    }

    const Clock::duration threshold_;
    const Clock::duration window_;
    std::atomic<Clock::rep> due_{0};
    std::atomic<Clock::rep> pause_end_{0};
    std::atomic<Clock::rep> pause_length_{0};
    std::atomic<Clock::rep> reported_{0};
};

}  // namespace rpclb::detail
