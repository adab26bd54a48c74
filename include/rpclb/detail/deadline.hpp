// A call's deadline from its timeout, saturating (internal).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

namespace rpclb::detail {

/// `now + timeout`, or `time_point::max()` (no deadline) when that is past what the clock
/// can hold: a huge timeout means none. A negative timeout gives a deadline already past.
/// Used by the caller (CallMachine) and by the serving node for the timeout a
/// request carries (RpcServer::admit), so both read a timeout the same way.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                           std::chrono::milliseconds timeout) noexcept {
    using Clock = std::chrono::steady_clock;
    if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now))
        return Clock::time_point::max();
    return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

/// The same for a timeout in milliseconds as the wire carries it (any uint64).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                           std::uint64_t timeout_ms) noexcept {
    constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max());
    return deadline_after(now, std::chrono::milliseconds(timeout_ms > most ? most : timeout_ms));
}

/// What a request carries on the wire for `deadline`: the milliseconds left after `now`,
/// rounded up (a call never gets less time than it has), 0 when it has passed. The
/// serving node reads it back with deadline_after(); no deadline (`time_point::max()`)
/// gives a timeout that deadline_after() reads as none.
inline std::uint64_t wire_timeout_ms(std::chrono::steady_clock::time_point deadline,
                                     std::chrono::steady_clock::time_point now) noexcept {
    if (deadline <= now) return 0;
    return static_cast<std::uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count());
}

}  // namespace rpclb::detail
