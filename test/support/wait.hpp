// Bounded waits for tests: poll a condition until it holds or a deadline passes.
#pragma once

#include <chrono>
#include <thread>

namespace rpclb::test {

/// Polls `predicate` every `poll` until it returns true or `timeout` has passed.
///
/// Returns true as soon as the predicate holds; false when it still doesn't after
/// `timeout` (it is checked once more at the deadline, so a slow predicate still gets its
/// last chance). Never waits longer than `timeout` plus one poll and one evaluation.
template <class Predicate>
bool eventually(Predicate&& predicate, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (predicate()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return false;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(poll, deadline - now));
    }
}

/// Checks that `predicate` holds at every poll for the whole of `duration`: the dual of
/// eventually(), for "this must never happen" properties. Returns false at the first poll
/// where it doesn't hold (at once, without waiting out `duration`).
template <class Predicate>
bool consistently(Predicate&& predicate, std::chrono::milliseconds duration,
                  std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + duration;
    for (;;) {
        if (!predicate()) return false;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return true;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(poll, deadline - now));
    }
}

}  // namespace rpclb::test
