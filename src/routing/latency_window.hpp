// A streaming quantile of recent latencies (internal, header-only, sans-I/O).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

namespace rpclb::detail {

/// Counts latencies in logarithmic buckets (four to each doubling, so a bucket spans
/// about 19 %) from 1 us to about 2 hours, and answers a quantile of them: the upper
/// bound of the bucket where it falls (at most one bucket, 19 %, above it). Every
/// `halving_period` latencies halve every count, so recent latencies weigh most and the
/// counts stay bounded. Lock-free: add() is two relaxed increments, and the halving done by the
/// adder that reaches the period; a quantile read concurrently with a halving may read some
/// buckets before and some after it.
///
/// Thread safety: shared objects safe.
class LatencyWindow {
public:
    static constexpr std::size_t buckets = 128;
    static constexpr std::uint64_t halving_period = 1000;

    void add(std::chrono::microseconds latency) noexcept {
        counts_[bucket_of(latency)].fetch_add(1, std::memory_order_relaxed);
        if (added_.fetch_add(1, std::memory_order_relaxed) % halving_period != halving_period - 1) return;
        for (auto& c : counts_) {
            auto v = c.load(std::memory_order_relaxed);
            while (!c.compare_exchange_weak(v, v / 2, std::memory_order_relaxed)) {
            }
        }
    }

    /// The `q` quantile (0 < q < 1) of the counted latencies; nullopt while fewer than
    /// `min_count` are counted.
    std::optional<std::chrono::microseconds> quantile(double q, std::uint64_t min_count = 20) const noexcept {
        std::array<std::uint64_t, buckets> snapshot{};
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < buckets; ++i) total += snapshot[i] = counts_[i].load(std::memory_order_relaxed);
        if (total < min_count || total == 0) return std::nullopt;
        const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < buckets; ++i) {
            seen += snapshot[i];
            if (seen >= rank) return upper_bound(i);
        }
        return upper_bound(buckets - 1);
    }

    /// The bucket of `latency`: 4 × log2(latency in us), 0 below 1 us, the last above.
    static std::size_t bucket_of(std::chrono::microseconds latency) noexcept {
        const auto us = latency.count();
        if (us <= 1) return 0;
        const double b = 4.0 * std::log2(static_cast<double>(us));
        return b >= static_cast<double>(buckets - 1) ? buckets - 1 : static_cast<std::size_t>(b);
    }
    /// The largest latency of bucket `i`.
    static std::chrono::microseconds upper_bound(std::size_t i) noexcept {
        return std::chrono::microseconds(static_cast<std::int64_t>(std::ceil(std::exp2(static_cast<double>(i + 1) / 4.0))));
    }

private:
    std::array<std::atomic<std::uint64_t>, buckets> counts_{};
    std::atomic<std::uint64_t> added_{0};
};

}  // namespace rpclb::detail
