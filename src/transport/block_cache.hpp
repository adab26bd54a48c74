// Storage of the values decoded from large frames (internal).
#pragma once

#include <boost/json/memory_resource.hpp>
#include <boost/json/storage_ptr.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace rpclb::detail {

/// A Boost.JSON memory resource that keeps freed blocks of 16 KiB to 1 MiB for the next
/// ones of the same size class; every other block is new'd and deleted as usual.
///
/// Why: the strings of a 64 KiB call are heap blocks that live from decoding to the end
/// of the call. glibc gives the top of a heap back to the kernel when more than 128 KiB
/// of it is free (M_TRIM_THRESHOLD), and maps blocks of 128 KiB or more one by one, so at
/// those sizes nearly every decoded string was copied into freshly faulted pages: about a
/// seventh of a client's CPU time at 64 KiB (bench/README.md, "Large payloads"). The
/// same reason, and the same remedy, as FramePool's for frame buffers; brpc and gRPC keep
/// their payload blocks in caches of their own for it too.
///
/// Size classes: quarter steps between powers of two (16, 20, 24, 28, 32, 40, ... KiB), so
/// a block wastes at most a fifth of its size. At most `max_bytes` are kept in all.
/// trim() frees them when no block was kept or reused since the previous trim(): the
/// mesh calls it at its trim tick (2 s), so memory kept after a burst of large calls goes
/// back within two ticks once the traffic stops;
/// a node's stop frees them all (Mesh::stop). A process whose nodes have no connection
/// left keeps them (4 MiB at most) until its next connection ticks or a node stops.
///
/// Lifetime: one per process (instance()), never destroyed, so a value decoded from a
/// frame may outlive every Cluster. Thread safety: every member may be called from any
/// thread; a value allocated on one thread is often freed on another.
class BlockCache final : public boost::json::memory_resource {
public:
    static constexpr std::size_t min_block = 16 * 1024;
    static constexpr std::size_t max_block = 1024 * 1024;
    static constexpr std::size_t max_bytes = 4 * 1024 * 1024;

    /// The process's cache.
    static BlockCache& instance();

    /// A non-owning storage pointer to the process's cache (the cache outlives it).
    static boost::json::storage_ptr storage() { return boost::json::storage_ptr(&instance()); }

    /// The size of the class that serves `n` bytes (n in [min_block, max_block]).
    static std::size_t class_size(std::size_t n) noexcept;

    /// Frees the kept blocks if none was kept or reused since the last call (or if `all`).
    void trim(bool all = false);

    /// Bytes kept now; blocks served from the kept ones so far (for tests and stats).
    std::size_t kept_bytes() const noexcept { return kept_bytes_.load(std::memory_order_relaxed); }
    std::size_t reuses() const noexcept { return reuses_.load(std::memory_order_relaxed); }

    BlockCache() = default;

private:
    static constexpr std::size_t class_count = 4 * 6 + 1;  // 16 KiB .. 1 MiB

    void* do_allocate(std::size_t n, std::size_t align) override;
    void do_deallocate(void* p, std::size_t n, std::size_t align) noexcept override;
    bool do_is_equal(const boost::json::memory_resource& other) const noexcept override { return this == &other; }

    static std::size_t class_index(std::size_t n) noexcept;
    static std::size_t size_of_class(std::size_t i) noexcept;
    static bool cached(std::size_t n, std::size_t align) noexcept;

    std::mutex mutex_;
    std::array<std::vector<void*>, class_count> free_;
    std::atomic<std::size_t> kept_bytes_{0};
    std::atomic<std::size_t> reuses_{0};
    std::atomic<bool> used_{false};  // a block was kept or reused since the last trim()
};

}  // namespace rpclb::detail
