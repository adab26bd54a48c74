// The no-route retry of the predecessor (predecessor-compatibility §4.1, doc/reference/predecessor-compatibility.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <thread>
#include <type_traits>

namespace rpclb {

/// `retry_count` meaning "retry until a route appears" (the predecessor's `:infinity`).
inline constexpr std::size_t unlimited_retries = static_cast<std::size_t>(-1);

/// How often and how far apart to try again when there is nowhere to send a call
/// (predecessor-compatibility §4.1: `retry?`, `retry_count`, `retry_sleep`). Total attempts
/// = `count` + 1 when `enabled`, exactly 1 otherwise, even with `unlimited_retries`.
///
/// Thread safety: a value type; one object per operation.
struct RetryPolicy {
    bool enabled = true;                     ///< the predecessor's `retry?`, default true
    std::size_t count = 5;                   ///< retries after the first attempt, or unlimited_retries
    std::chrono::milliseconds sleep{5000};   ///< wait between attempts, default 5 s

    /// Takes one retry: true when another attempt may follow (then `count` goes down,
    /// unless unlimited). False when retrying is off or the retries are used up.
    bool consume() noexcept {
        if (!enabled || count == 0) return false;
        if (count != unlimited_retries) --count;
        return true;
    }
};

/// The predecessor's `with_retry(opts, fun)`, blocking: calls `attempt()`, which returns a
/// `std::optional<T>` — nullopt meaning "no route, retry" (the predecessor's `:retry`). While it
/// asks to retry and `policy` allows, sleeps `policy.sleep` and calls it again. Returns
/// the first value, or nullopt when the retries ran out (the predecessor's `:error`).
///
/// Sleeps on the calling thread: use it only where blocking is fine. The Cluster's own
/// calls wait on timers instead (Cluster::async_call).
template <class Attempt>
auto with_retry(RetryPolicy policy, Attempt&& attempt) -> std::invoke_result_t<Attempt&> {
    for (;;) {
        auto result = attempt();
        if (result || !policy.consume()) return result;
        std::this_thread::sleep_for(policy.sleep);
    }
}

}  // namespace rpclb
