// What the latency- and load-aware plugins count as a member's failure, and what it costs
// them: doc/reference/algorithms.md, "Failures".
#pragma once

#include "member_table.hpp"

#include <rpclb/selection_algorithm.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rpclb::plugins {

/// True when the member could not serve the call: it answered `internal_server_error` or
/// `service_unavailable` (origin remote), or the call failed on the way to it with
/// `service_unavailable` (no connection) or `request_timeout` (the deadline passed; origin
/// local). Not a draining refusal (origin none), nor a caller's mistake (`bad_request`,
/// `not_found`), nor a success.
inline bool counted_failure(const CallOutcome& outcome) noexcept {
    if (!outcome.error) return false;
    const ErrorCode code = *outcome.error;
    switch (outcome.origin) {
    case ErrorOrigin::remote:
        return code == ErrorCode::internal_server_error || code == ErrorCode::service_unavailable;
    case ErrorOrigin::local:
        return code == ErrorCode::service_unavailable || code == ErrorCode::request_timeout;
    case ErrorOrigin::none:
        break;
    }
    return false;
}

/// An integer option of milliseconds in [min, 86,400,000]; `fallback` when absent. Throws
/// std::invalid_argument "<algorithm>: option <key> must be an integer of milliseconds in
/// <min> .. 86400000, got <value>".
inline std::int64_t ms_option(const boost::json::object& options, std::string_view algorithm, std::string_view key,
                              std::int64_t fallback, std::int64_t min) {
    constexpr std::int64_t max_ms = 86'400'000;  // one day
    const auto* v = options.if_contains(key);
    if (!v) return fallback;
    const bool ok = (v->is_int64() && v->get_int64() >= min && v->get_int64() <= max_ms) ||
                    (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(max_ms) &&
                     static_cast<std::int64_t>(v->get_uint64()) >= min);
    if (!ok)
        throw std::invalid_argument(std::string(algorithm) + ": option " + std::string(key) +
                                    " must be an integer of milliseconds in " + std::to_string(min) + " .. " +
                                    std::to_string(max_ms) + ", got " + boost::json::serialize(*v));
    return v->to_number<std::int64_t>();
}

/// The clock of picks and releases, in nanoseconds: steady_clock's clock (CLOCK_MONOTONIC)
/// at tick resolution (CLOCK_MONOTONIC_COARSE: a few ms behind at most, against decays of
/// a second and more, and several times cheaper to read on the pick path), or, with the
/// testing option `test_now_ms` (integer ≥ 1), frozen at that time.
class PluginClock {
public:
    /// Reads `test_now_ms`; throws std::invalid_argument naming it when it is not an
    /// integer in [1, 2^53).
    void init(const boost::json::object& options, std::string_view algorithm) {
        frozen_ns_ = 0;
        const auto* v = options.if_contains("test_now_ms");
        if (!v) return;
        constexpr std::int64_t max = std::int64_t{1} << 53;
        const bool ok = (v->is_int64() && v->get_int64() >= 1 && v->get_int64() < max) ||
                        (v->is_uint64() && v->get_uint64() >= 1 && v->get_uint64() < static_cast<std::uint64_t>(max));
        if (!ok)
            throw std::invalid_argument(std::string(algorithm) + ": option test_now_ms must be an integer in 1 .. " +
                                        std::to_string(max - 1) + ", got " + boost::json::serialize(*v));
        frozen_ns_ = v->to_number<std::int64_t>() * 1'000'000;
    }

    std::int64_t now_ns() const noexcept {
        if (frozen_ns_ != 0) return frozen_ns_;
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    }

private:
    std::int64_t frozen_ns_ = 0;
};

/// One member's failure load: the number of its recent counted failures, each decaying as
/// e^(−elapsed / penalty), so a failure weighs like a call that stays in flight for about
/// `penalty`. Updated with atomics: no lock. A concurrent read may see a failure's count
/// before its time (it then looks decayed by the time since the previous one), which moves
/// the load by less than that one failure.
struct alignas(64) FailureLoad {
    std::atomic<double> load{0};
    std::atomic<std::int64_t> at_ns{0};  ///< the clock at the last failure

    /// The load at `now`; 0 when the member never failed.
    double value(std::int64_t now, double penalty_ns) const noexcept {
        const double held = load.load(std::memory_order_relaxed);
        if (held == 0) return 0;
        const std::int64_t elapsed = now - at_ns.load(std::memory_order_relaxed);
        if (elapsed <= 0) return held;
        return held * std::exp(-static_cast<double>(elapsed) / penalty_ns);
    }

    /// One counted failure at `now`.
    void add(std::int64_t now, double penalty_ns) noexcept {
        const std::int64_t last = at_ns.exchange(now, std::memory_order_relaxed);
        const double keep =
            last == 0 ? 1.0 : std::exp(-static_cast<double>(std::max<std::int64_t>(0, now - last)) / penalty_ns);
        double before = load.load(std::memory_order_relaxed);
        while (!load.compare_exchange_weak(before, before * keep + 1, std::memory_order_relaxed)) {
        }
    }
};

/// The failure loads of a balancer's members (FailureLoad, one per node across snapshots)
/// and option `failure_penalty` (ms, integer 0 … 86,400,000, default 1,000; 0 = failures
/// cost nothing and no table is kept) with the clock they decay on (PluginClock).
///
/// Thread safety: shared objects safe once `init` has returned; only the first lookup on a
/// snapshot takes a mutex.
class FailureLoads {
public:
    using Row = MemberTable<FailureLoad>::Row;

    /// Reads `failure_penalty` and `test_now_ms`; throws std::invalid_argument
    /// "<algorithm>: option <key> ..." when one is bad.
    void init(const boost::json::object& options, std::string_view algorithm) {
        penalty_ns_ = static_cast<double>(ms_option(options, algorithm, "failure_penalty", 1'000, 0)) * 1e6;
        clock_.init(options, algorithm);
    }

    /// False when `failure_penalty` is 0.
    bool on() const noexcept { return penalty_ns_ > 0; }

    /// The loads of `members`, built by the first call on a snapshot (which may throw
    /// std::bad_alloc); call only when on().
    const Row& row(const MemberSnapshot& members, std::uint64_t owner) { return table_.of(members, owner); }

    /// True when some member may still have a load worth reading: a counted failure was
    /// recorded less than 40 penalties ago (after that every load is below e^−40 of what it
    /// was). Reads the clock into `now` only when some failure was ever recorded; a pick
    /// that gets false reads no load at all.
    bool recent(std::int64_t& now) const noexcept {
        const std::int64_t last = last_failure_ns_.load(std::memory_order_relaxed);
        if (last == 0) return false;
        now = clock_.now_ns();
        return static_cast<double>(now - last) < 40 * penalty_ns_;
    }

    /// The load of `member` at `now` (a time from recent()).
    double load(const FailureLoad& member, std::int64_t now) const noexcept { return member.value(now, penalty_ns_); }

    /// Adds a failure to `members.nodes[index]` when `outcome` is a counted failure
    /// (counted_failure) and failures cost something.
    void record(const MemberSnapshot& members, std::uint64_t owner, std::size_t index,
                const CallOutcome& outcome) noexcept {
        if (!on() || !counted_failure(outcome)) return;
        const Row* loads = nullptr;
        try {
            loads = &row(members, owner);
        } catch (const std::exception&) {
            return;
        }
        if (index >= loads->size()) return;
        const std::int64_t now = clock_.now_ns();
        (*loads)[index]->add(now, penalty_ns_);
        if (last_failure_ns_.load(std::memory_order_relaxed) != now)
            last_failure_ns_.store(now, std::memory_order_relaxed);
    }

    /// The load of `node` now (0 when it has none), for tests.
    double load_of(const std::string& node) {
        const auto member = table_.find(node);
        return member ? load(*member, clock_.now_ns()) : 0;
    }

private:
    double penalty_ns_ = 1e9;
    PluginClock clock_;
    // The clock at the latest counted failure of any member; 0 = none yet. Read by every
    // pick, written only by failures (and then only when it moves).
    alignas(64) std::atomic<std::int64_t> last_failure_ns_{0};
    MemberTable<FailureLoad> table_;
};

}  // namespace rpclb::plugins
