// The token budget of a balancer's extra attempts (internal, header-only, sans-I/O).
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>

namespace rpclb::detail {

/// A token bucket that bounds a balancer's hedges: each call that may be hedged deposits
/// `ratio` of a token, time deposits `floor_per_second` tokens a second, the bucket holds
/// at most `capacity`, and each extra attempt takes a whole token. Over any long run the
/// extra attempts stay within `ratio` of the calls plus the floor (Envoy's retry budget,
/// gRPC's retry throttling). It starts full, so the first calls may hedge. Time is passed
/// in, never read.
///
/// Thread safety: shared objects safe (a short lock per call).
class HedgeBudget {
public:
    using time_point = std::chrono::steady_clock::time_point;

    static constexpr double ratio = 0.05;
    static constexpr double floor_per_second = 1.0;
    static constexpr double capacity = 10.0;

    /// A call that may be hedged started at `now`.
    void deposit(time_point now) noexcept {
        std::lock_guard lock(mutex_);
        refill(now);
        tokens_ = std::min(capacity, tokens_ + ratio);
    }

    /// Takes a token for an extra attempt at `now`: false when there is no whole token.
    bool take(time_point now) noexcept {
        std::lock_guard lock(mutex_);
        refill(now);
        if (tokens_ < 1.0) return false;
        tokens_ -= 1.0;
        return true;
    }

private:
    void refill(time_point now) noexcept {
        if (last_ == time_point{}) last_ = now;
        if (now <= last_) return;
        const std::chrono::duration<double> elapsed = now - last_;
        last_ = now;
        tokens_ = std::min(capacity, tokens_ + floor_per_second * elapsed.count());
    }

    std::mutex mutex_;
    double tokens_ = capacity;
    time_point last_{};
};

}  // namespace rpclb::detail
