// The token budget of a balancer's extra attempts (internal, header-only, sans-I/O).
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>

namespace rpclb::detail {

/// A token bucket that bounds a balancer's extra attempts (hedges and retries): each call
/// that may send one deposits `percent` / 100 of a token, and between two events time
/// tops the deposits up to `min_per_second` tokens a second where the calls deposited
/// less; the bucket holds at most `capacity`, and each extra attempt takes a whole token.
/// Over a stretch of calls the extra attempts stay within the larger of `percent` of the
/// calls and `min_per_second` times its length (Envoy's retry budget: a percentage with a
/// floor, not their sum), plus what the bucket held. It starts full, so the first calls
/// may hedge; a budget of 0 % with no floor grants nothing, full or not. Time is passed
/// in, never read.
///
/// Thread safety: shared objects safe (a short lock per call).
class HedgeBudget {
public:
    using time_point = std::chrono::steady_clock::time_point;

    static constexpr double capacity = 10.0;

    /// Sets the rates (HedgingPolicy's budget_percent and budget_min_per_second, checked).
    void configure(double percent, double min_per_second) noexcept {
        std::lock_guard lock(mutex_);
        ratio_ = percent / 100.0;
        floor_per_second_ = min_per_second;
    }

    /// A call that may be hedged or retried started at `now`.
    void deposit(time_point now) noexcept {
        std::lock_guard lock(mutex_);
        refill(now);
        tokens_ = std::min(capacity, tokens_ + ratio_);
        deposited_ += ratio_;
    }

    /// Takes a token for an extra attempt at `now`: false when there is no whole token.
    bool take(time_point now) noexcept {
        std::lock_guard lock(mutex_);
        refill(now);
        if (tokens_ < 1.0 || (ratio_ <= 0 && floor_per_second_ <= 0)) return false;
        tokens_ -= 1.0;
        return true;
    }

private:
    // Adds the floor's tokens since the last event, less what calls deposited meanwhile.
    void refill(time_point now) noexcept {
        if (last_ == time_point{}) last_ = now;
        if (now <= last_) return;
        const std::chrono::duration<double> elapsed = now - last_;
        last_ = now;
        const double topped = floor_per_second_ * elapsed.count() - deposited_;
        deposited_ = 0;
        if (topped > 0) tokens_ = std::min(capacity, tokens_ + topped);
    }

    std::mutex mutex_;
    double ratio_ = 0.05;
    double floor_per_second_ = 1.0;
    double tokens_ = capacity;
    double deposited_ = 0;  // by calls since the last refill
    time_point last_{};
};

}  // namespace rpclb::detail
