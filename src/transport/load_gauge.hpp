// This node's own load, as its answers and probe answers report it (internal).
#pragma once

#include <rpclb/detail/wire.hpp>
#include <rpclb/node_load.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rpclb::detail {

/// Counts the handler runs of the node's worker pool (queued, running) and holds the
/// number the application set (Cluster::report_load), so that each answer and probe
/// answer can carry a wire::Load read at that instant: utilization is instantaneous, not
/// smoothed, so a caller sees a step change with the next answer. Runs inline on network
/// threads are not counted (they do not occupy the pool).
///
/// Thread safety: shared objects safe (relaxed atomics: each field is a gauge).
class LoadGauge {
public:
    /// `pool_size`: the worker pool's threads (at least 1).
    explicit LoadGauge(std::size_t pool_size = 1) noexcept : pool_size_(std::max<std::size_t>(pool_size, 1)) {}

    /// A run was posted to the pool.
    void queued() noexcept { queued_.fetch_add(1, std::memory_order_relaxed); }
    /// A posted run started on a worker.
    void started() noexcept {
        queued_.fetch_sub(1, std::memory_order_relaxed);
        running_.fetch_add(1, std::memory_order_relaxed);
    }
    /// A started run ended (before its answer is encoded, so that the answer does not count
    /// its own run).
    void finished() noexcept { running_.fetch_sub(1, std::memory_order_relaxed); }

    /// Sets the application's number; the caller has checked it (finite, in [0, 1e9]).
    void set_application(double value) noexcept { application_.store(value, std::memory_order_relaxed); }
    double application() const noexcept { return application_.load(std::memory_order_relaxed); }

    /// The load now.
    wire::Load sample() const noexcept {
        const auto running = std::max<std::int64_t>(running_.load(std::memory_order_relaxed), 0);
        const auto queued = std::max<std::int64_t>(queued_.load(std::memory_order_relaxed), 0);
        const auto busy = std::min<std::int64_t>(running, static_cast<std::int64_t>(pool_size_));
        wire::Load load;
        load.busy_permille = static_cast<std::uint32_t>((busy * 1000 + static_cast<std::int64_t>(pool_size_) / 2) /
                                                        static_cast<std::int64_t>(pool_size_));
        load.queue = static_cast<std::uint32_t>(std::min<std::int64_t>(queued, 0xffffffffLL));
        load.application = application();
        return load;
    }

private:
    const std::size_t pool_size_;
    std::atomic<std::int64_t> queued_{0};
    std::atomic<std::int64_t> running_{0};
    std::atomic<double> application_{0.0};
};

/// Records in `record` what a frame from `node` said of its load: `load` when it carried
/// a good report; when it carried a malformed one (`problem` not empty), the node's load
/// becomes unknown and the problem is logged, once per record. Nothing when it carried
/// none (a peer of an earlier version). Any thread.
void note_load(NodeLoad& record, const std::optional<wire::Load>& load, std::string_view problem,
               std::string_view node);

}  // namespace rpclb::detail
