// What each node says of its own load, as its replies and probe answers carry it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// One member's load as it reported it (gRPC's ORCA per-call report is the model): the
/// share of its handler pool busy, its handler queue's depth, and the number its
/// application set with Cluster::report_load (0: none set).
struct LoadReport {
    /// Busy worker threads ÷ worker pool size when the report was made, in [0, 1].
    double busy = 0.0;
    /// Calls queued for a worker, not yet started, when the report was made.
    std::uint32_t queue = 0;
    /// Cluster::report_load's value, in [0, 1e9]; 0 when the application set none.
    double application = 0.0;
    /// steady_clock time the report arrived here, in milliseconds since the clock's epoch.
    std::int64_t at_ms = 0;

    /// The utilization a balancer weighs: `application` when the member set one, else the
    /// busy share plus one for each queued call (a queue means every worker is busy and
    /// calls wait: the member is past its capacity).
    double utilization() const noexcept { return application > 0.0 ? application : busy + queue; }
};

/// The last load a node reported to this process, written by the connection that
/// received the report and read on the pick path. Every field is an atomic, so picks read
/// it without a lock; `at_ms` is stored last and loaded first, so a reader that sees a
/// time sees that report's fields or a later one's.
///
/// Thread safety: shared objects safe.
struct alignas(64) NodeLoad {
    std::atomic<std::uint32_t> busy_permille{0};  ///< busy share × 1000
    std::atomic<std::uint32_t> queue{0};
    std::atomic<double> application{0.0};
    /// steady_clock milliseconds when the last report arrived; 0: none, or the last was
    /// malformed (the member's load is unknown).
    std::atomic<std::int64_t> at_ms{0};
    /// A malformed report from this node was logged (each node's is logged once).
    std::atomic<bool> warned{false};

    /// Records a report (busy share in thousandths) received at `now_ms`. Any thread.
    void store(std::uint32_t busy_thousandths, std::uint32_t queued, double application_load,
               std::int64_t now_ms) noexcept {
        busy_permille.store(busy_thousandths, std::memory_order_relaxed);
        queue.store(queued, std::memory_order_relaxed);
        application.store(application_load, std::memory_order_relaxed);
        at_ms.store(now_ms, std::memory_order_release);
    }
    /// The node's load is unknown from now on (it sent a malformed report).
    void forget() noexcept { at_ms.store(0, std::memory_order_release); }

    /// The last report, if one arrived at most `max_age_ms` before `now_ms`; nullopt when
    /// none did, or the last was malformed. No lock, no allocation.
    std::optional<LoadReport> read(std::int64_t now_ms, std::int64_t max_age_ms) const noexcept {
        const auto at = at_ms.load(std::memory_order_acquire);
        if (at == 0 || now_ms - at > max_age_ms) return std::nullopt;
        return LoadReport{busy_permille.load(std::memory_order_relaxed) / 1000.0,
                          queue.load(std::memory_order_relaxed), application.load(std::memory_order_relaxed), at};
    }
};

/// steady_clock's now in milliseconds since its epoch: the time NodeLoad::at_ms counts in.
inline std::int64_t load_clock_ms() noexcept {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// The NodeLoad records of one member list, index-aligned with it.
using NodeLoadTable = std::vector<std::shared_ptr<NodeLoad>>;

/// The process's NodeLoad records by node name: the connections that receive reports and
/// the algorithms that read them get the same object for a name while any of them holds
/// it; it is freed with its last holder (a later look-up starts with no report). Look-ups
/// take a mutex: do them when a link opens or once per member snapshot, never per pick.
///
/// Thread safety: shared objects safe.
class NodeLoads {
public:
    /// The process-wide instance; never destroyed.
    static NodeLoads& instance();

    /// The record of `node`. Throws std::bad_alloc.
    std::shared_ptr<NodeLoad> of(std::string_view node);
    /// of() each of `nodes`, index-aligned, under one lock. Throws std::bad_alloc.
    NodeLoadTable of(const std::vector<std::string>& nodes);
    /// How many records are alive now.
    std::size_t entries();

private:
    std::shared_ptr<NodeLoad> of_locked(std::string_view node);

    std::mutex mutex_;
    std::map<std::string, std::weak_ptr<NodeLoad>, std::less<>> loads_;
    std::size_t swept_size_ = 0;
};

}  // namespace rpclb
