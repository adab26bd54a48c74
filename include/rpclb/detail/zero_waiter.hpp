// Waiting, with a deadline, for counters that other threads bring down to zero.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace rpclb::detail {

/// Lets a thread wait until counters that other threads decrement reach zero (a stop
/// waiting for served calls, a balancer waiting for its drain), while a thread that
/// decrements pays one atomic load when nobody waits: no lock and no wake-up per call.
///
/// Contract: the counters are atomics changed with sequentially consistent operations;
/// a thread whose decrement brings one to zero calls `wake()` after it. Then either
/// `wake()` sees the waiter, or the waiter, which counts itself before it reads the
/// counters, sees the zero.
///
/// Thread safety: shared objects safe.
class ZeroWaiter {
public:
    /// Wakes the waiters, if any (after a decrement to zero). Never throws.
    void wake() noexcept {
        if (waiters_.load() == 0) return;
        { std::lock_guard lock(mutex_); }  // a waiter is checking or waiting, not between
        zero_.notify_all();
    }

    /// Waits until `is_zero()` is true or `deadline` has passed; false on timeout.
    /// `is_zero` reads the counters (sequentially consistent loads).
    template <class IsZero>
    bool wait_until(std::chrono::steady_clock::time_point deadline, IsZero is_zero) {
        std::unique_lock lock(mutex_);
        waiters_.fetch_add(1);
        const bool zero = zero_.wait_until(lock, deadline, is_zero);
        waiters_.fetch_sub(1);
        return zero;
    }

private:
    std::atomic<int> waiters_{0};
    std::mutex mutex_;
    std::condition_variable zero_;
};

}  // namespace rpclb::detail
