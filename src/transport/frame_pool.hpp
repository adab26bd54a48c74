// Spare buffers of large frames already written on one connection (internal).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// Keeps the buffers of a few large frames after they are written, so that the next
/// frames on the same connection are encoded into memory that is already mapped.
///
/// Why: a frame of a 64 KiB call is a 64 KiB heap block that lives from encoding to the
/// end of its write. glibc gives the top of a heap back to the kernel when more than 128
/// KiB of it is free (M_TRIM_THRESHOLD), so at that size nearly every frame was written
/// into freshly faulted pages: most of the page faults of a 64 KiB call, on both sides
/// (bench/README.md, "Large payloads").
///
/// Only buffers of `min_capacity` to `max_capacity` bytes are kept, at most `max_spares`
/// of them (`limit`, which a call channel sets to none) and `max_bytes` in all. trim()
/// frees them when no large frame (`min_capacity` bytes or more) was written since the
/// last trim(): the mesh calls it every trim tick (2 s) and the connection when it closes,
/// so after a burst of large calls a link that goes back to small ones gives the memory
/// back within two ticks. While buffers are kept, a small frame is encoded into one too
/// (its size is not known before); when none is kept, take() costs one atomic load.
///
/// Thread safety: every member may be called from any thread (a caller encodes its
/// request on its own thread; the connection's strand gives the buffer back).
class FramePool {
public:
    static constexpr std::size_t min_capacity = 16 * 1024;
    static constexpr std::size_t max_capacity = 256 * 1024;
    static constexpr std::size_t max_spares = 64;
    static constexpr std::size_t max_bytes = 4 * 1024 * 1024;

    /// A kept buffer, emptied (its capacity stays), or an empty string when none is kept.
    std::string take() {
        if (count_.load(std::memory_order_relaxed) == 0) return {};
        std::lock_guard lock(mutex_);
        if (spares_.empty()) return {};
        std::string buffer = std::move(spares_.back());
        spares_.pop_back();
        count_.store(spares_.size(), std::memory_order_relaxed);
        bytes_ -= buffer.capacity();
        buffer.clear();
        return buffer;
    }

    /// Keeps `frame`'s buffer if it is of a size worth keeping and fewer than `limit`
    /// (at most max_spares) are kept; otherwise it is freed here.
    void give(std::string&& frame, std::size_t limit = max_spares) {
        limit = std::min(limit, max_spares);
        const bool large = frame.size() >= min_capacity;
        if (large) used_.store(true, std::memory_order_relaxed);
        if (frame.capacity() < min_capacity || frame.capacity() > max_capacity) return;
        if (count_.load(std::memory_order_relaxed) >= limit) return;
        std::lock_guard lock(mutex_);
        if (spares_.size() >= limit || bytes_ + frame.capacity() > max_bytes) return;
        bytes_ += frame.capacity();
        spares_.push_back(std::move(frame));
        count_.store(spares_.size(), std::memory_order_relaxed);
    }

    /// Frees the kept buffers if no large frame was given back since the last call (or
    /// if `all`).
    void trim(bool all = false) {
        if (used_.exchange(false, std::memory_order_relaxed) && !all) return;
        std::vector<std::string> gone;
        {
            std::lock_guard lock(mutex_);
            gone.swap(spares_);
            bytes_ = 0;
            count_.store(0, std::memory_order_relaxed);
        }
    }

    /// Buffers kept now.
    std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }

private:
    std::mutex mutex_;
    std::vector<std::string> spares_;
    std::size_t bytes_ = 0;  // capacity of spares_
    std::atomic<std::size_t> count_{0};
    std::atomic<bool> used_{false};  // a large frame was given back since the last trim()
};

}  // namespace rpclb::detail
