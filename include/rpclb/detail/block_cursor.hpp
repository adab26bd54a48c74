// A rotation cursor handed to threads in blocks of consecutive values.
#pragma once

#include <rpclb/detail/thread_slot.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

namespace rpclb::detail {

/// The cursor of the round-robin algorithms (seed §2.2, §2.3), without a shared write
/// per pick.
///
/// Values 1, 2, 3, ... are handed out in blocks of `block` consecutive values: a thread
/// takes a block with one `fetch_add` on the shared counter and then uses its values in
/// order, one per `next`, writing only its own thread slot's cache line, before it takes
/// another. Every value goes to at most one pick. So:
///
/// - from one thread alone (no other thread taking values) `next` returns 1, 2, 3, ...
///   exactly, as a single counter would;
/// - with several threads, each thread's values run in order within its block, the blocks
///   of different threads interleave, and the values used so far are 1 … `handed_out()`
///   except the unused rest of each thread's current block (fewer than `block` values per
///   thread, plus the rests dropped by `restart`).
///
/// Blocks start at 1 + a multiple of `block` as long as every thread has a slot; a thread
/// without one (more live threads than slots) takes single values with one shared
/// `fetch_add` per call. A thread slot passes to the next thread with the rest of its block.
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation
/// (construction allocates the per-slot state).
class BlockCursor {
public:
    /// Values per block. 10,000,000 (the seed's reset point) is a multiple of it.
    static constexpr std::uint64_t block = 64;

    BlockCursor() : slot_count_(thread_slot_count()), slots_(new Slot[slot_count_]) {}
    BlockCursor(const BlockCursor&) = delete;
    BlockCursor& operator=(const BlockCursor&) = delete;

    /// The calling thread's next value, ≥ 1.
    std::uint64_t next() noexcept {
        const std::size_t slot = thread_slot();
        if (slot >= slot_count_) return shared_.fetch_add(1, std::memory_order_relaxed) + 1;
        Slot& mine = slots_[slot];
        // Only this thread writes its slot: plain loads and stores, no read-modify-write.
        std::uint64_t value = mine.next.load(std::memory_order_relaxed);
        if (value == mine.end.load(std::memory_order_relaxed)) {
            value = shared_.fetch_add(block, std::memory_order_relaxed) + 1;
            mine.end.store(value + block, std::memory_order_relaxed);
        }
        mine.next.store(value + 1, std::memory_order_relaxed);
        return value;
    }

    /// Starts over after the calling thread's last `next` returned `value`: the thread
    /// drops the rest of its block, and the shared counter goes back to 0 unless another
    /// thread took values after this thread's last block (then it stays; that thread's own
    /// values are as high and it will restart).
    void restart(std::uint64_t value) noexcept {
        const std::size_t slot = thread_slot();
        std::uint64_t taken_to = value;
        if (slot < slot_count_) {
            Slot& mine = slots_[slot];
            taken_to = mine.end.load(std::memory_order_relaxed) - 1;
            mine.next.store(taken_to + 1, std::memory_order_relaxed);
        }
        shared_.compare_exchange_strong(taken_to, 0, std::memory_order_relaxed);
    }

    /// Values handed out so far, in blocks or singly, since the last successful restart.
    std::uint64_t handed_out() const noexcept { return shared_.load(std::memory_order_relaxed); }

private:
    // The calling thread's block is [next, end); empty when next == end.
    struct alignas(per_thread_alignment) Slot {
        std::atomic<std::uint64_t> next{0};
        std::atomic<std::uint64_t> end{0};
    };

    // Every thread's block claim writes it; away from what every pick reads.
    alignas(per_thread_alignment) std::atomic<std::uint64_t> shared_{0};
    alignas(per_thread_alignment) const std::size_t slot_count_;
    const std::unique_ptr<Slot[]> slots_;
};

}  // namespace rpclb::detail
