// Calls in flight per node of one balancer, kept per thread: InFlightTable and its counts.
#pragma once

#include <rpclb/detail/thread_slot.hpp>
#include <rpclb/detail/view_clock.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rpclb::detail {

class InFlightCount;

/// The in-flight counts of one balancer's nodes, laid out so that each thread writes only
/// its own cache lines (reference §2.4, §2.5; never below zero as §10.4 asks).
///
/// Every node gets a column. Every thread slot (detail::thread_slot), plus one shard for
/// threads without a slot, gets a row: its part of every node's count. Columns come in
/// blocks of 8; within a block each shard's part of the 8 counts fills one 128-byte segment
/// (per_thread_alignment), followed by a segment of that shard's view words
/// (InFlightCount::estimate). So a thread reading the counts of up to 8 nodes that got their
/// columns together (the members of a balancer usually do) reads one segment per shard in
/// use, and counting its own calls touches only its own segment.
///
/// Blocks are never moved or freed while the table lives, so InFlightCount handles stay
/// valid. The table is owned by AlgorithmState, one per balancer, for the whole process.
///
/// Thread safety: distinct objects safe. `add_column` must not run concurrently with
/// itself (AlgorithmState calls it under its mutex); the counts are safe from any thread.
class InFlightTable {
public:
    InFlightTable() : slots_(thread_slot_count()), paces_(std::make_unique<Pace[]>(slots_ + 1)) {}
    InFlightTable(const InFlightTable&) = delete;
    InFlightTable& operator=(const InFlightTable&) = delete;

    /// The count of a new node, at 0. Allocates a block every 8 columns; throws
    /// std::bad_alloc when memory runs out.
    InFlightCount add_column();

private:
    friend class InFlightCount;
    static constexpr std::size_t block_columns = 8;

    struct alignas(per_thread_alignment) Segment {
        std::atomic<std::uint64_t> words[2 * block_columns]{};
    };
    // One shard's part of one block. counts.words[2c] and [2c + 1] are column c's calls
    // acquired and released on this shard; views.words[c] is its view word.
    struct Part {
        Segment counts;
        Segment views;
    };
    static_assert(sizeof(Segment) == per_thread_alignment);

    // How fast one shard's thread picks on this balancer (InFlightCount::begin_pick): the
    // picks left in its period (low 32 bits) and the period (high 32 bits), and the view
    // clock when the period began.
    struct alignas(per_thread_alignment) Pace {
        std::atomic<std::uint64_t> left_and_period{0};
        std::atomic<std::uint64_t> began{0};
    };

    // Shards at index ≥ used_ have never been written; raised before a shard's first write,
    // so `release` and `value` need not read the others. Read by every pick, written only
    // when a thread slot first counts on this balancer: its own line.
    alignas(per_thread_alignment) std::atomic<std::uint32_t> used_{0};
    alignas(per_thread_alignment) const std::size_t slots_;  // shards: slots_ + 1
    const std::unique_ptr<Pace[]> paces_;                    // one per shard
    std::vector<std::unique_ptr<Part[]>> blocks_;
    std::size_t columns_ = 0;
};

/// The count of calls in flight on one node of one balancer: a handle on a column of its
/// InFlightTable, cheap to copy, like a pointer (its operations are `const` and change the
/// count, not the handle; the default value refers to nothing and must not be used).
///
/// Each shard holds two counters that only grow: calls acquired on it and calls released
/// from it; its part of the count is the difference, never below zero. `acquire` adds a
/// call to the calling thread's shard with a plain store (only that thread writes that
/// counter; threads without a slot share a shard and use an atomic add). `release` takes a
/// call off the calling thread's shard if it holds one, else off the first other shard that
/// does, by a compare-exchange on that shard's released counter that succeeds only while
/// it stays below the acquired one, so a release on thread B cancels a pick made on thread
/// A exactly. When no shard holds a call, `release` reads every shard twice; if no counter
/// moved in between, the count was zero and the release is dropped, as a single counter
/// clamped at zero would drop it. So no count ever goes, or reads, below zero, and a
/// legitimate release (one per counted pick, made after it) is never dropped unless a
/// `reset` or a surplus release took its call first.
///
/// Two ways to read it. `value` adds up every shard now: exact, but each shard another
/// thread has written since this thread last read it costs a cache-line transfer, on every
/// read. `estimate` adds the calling thread's own shard, read now, to the sum of the other
/// shards as this thread last read them (its view), which it re-reads after at most
/// `period` of its estimates of this count. The period comes from `begin_pick`, which a
/// pick calls once, and keeps a view's life within `view_budget_ticks` of the view clock
/// (detail::view_clock_now), about 8 µs. Per thread and balancer it starts at 1; at the end
/// of each period of picks it doubles (up to `longest_period`) if those picks took less
/// than half the budget, stays if they took less than the budget, and falls back to 1 if
/// they took longer. So:
///
/// - a thread that picks less often than once per half a budget (≈4 µs) on a balancer
///   (any thread that waits for its calls: no call between two nodes is that short) keeps
///   a period of 1 and re-reads the other shards on every estimate, which is then exact;
/// - a thread picking faster reads through views about one budget old at most, less than
///   any call lasts, and re-reads them less often the faster it picks (every 32 of its
///   reads at most);
/// - when such a thread slows down, up to `longest_period` − 1 more picks may read the old
///   views before the end of the period shows the slower pace;
/// - the thread's own calls (and releases of them from any thread: they land on its own
///   shard) are always current, so from one thread alone `estimate` is exact.
///
/// Costs: `acquire` is a load and a store on the thread's own segment, no locked
/// instruction. `release` on the thread that picked is one compare-exchange there; on
/// another thread it writes the picker's segment (one cache-line transfer per call, not per
/// pick). `value` reads one segment per shard in use (shards are used from the lowest, so
/// with k threads about k); `estimate` reads the thread's own segments, and at a re-read
/// the other shards' segments; `begin_pick` reads and writes the thread's own pace, and
/// the view clock once per period.
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation.
class InFlightCount {
public:
    /// The most estimates between two reads of the other threads' shards.
    static constexpr std::uint32_t longest_period = 32;

    /// How long a view may live, in view-clock ticks: 16384, about 8 µs at the 2.1 GHz
    /// time-stamp counter of the bench machine (bench/README.md), 4 µs at 4 GHz.
    static constexpr std::uint64_t view_budget_ticks = 16384;

    InFlightCount() = default;

    /// One more call in flight.
    void acquire() const noexcept {
        const std::size_t shard = thread_slot();
        raise_used(static_cast<std::uint32_t>(shard + 1));
        std::atomic<std::uint64_t>& acquired = acquired_on(shard);
        if (shard < slots_)
            acquired.store(acquired.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        else
            acquired.fetch_add(1, std::memory_order_acq_rel);
    }

    /// One call fewer in flight; false (and no change) when the count was zero.
    bool release() const noexcept {
        const std::size_t own = thread_slot();
        Seen seen;
        if (own < used_->load(std::memory_order_acquire) && take(own, seen)) return true;
        for (;;) {
            // First pass: take a call from any shard holding one; else add up the counters,
            // which only grow.
            const std::uint32_t used = used_->load(std::memory_order_acquire);
            std::uint64_t moves = 0;
            for (std::size_t s = 0; s < used; ++s) {
                if (take(s, seen)) return true;
                moves += seen.acquired + seen.released;
            }
            // Second pass: the same sum and every shard empty mean that no counter moved
            // between the passes and every shard was empty then. (A legitimate pick whose
            // call another release took is visible to this pass: that release's
            // compare-exchange, read in the first pass, came after the pick.)
            std::uint64_t again = 0;
            bool held = false;
            for (std::size_t s = 0; s < used; ++s) {
                seen = read(s);
                held = held || seen.acquired != seen.released;
                again += seen.acquired + seen.released;
            }
            if (!held && again == moves && used_->load(std::memory_order_acquire) == used) return false;
        }
    }

    /// Calls in flight now: the sum of the shards, each read once (≥ 0 always; exact when no
    /// release races with the read).
    std::int64_t value() const noexcept { return value(shards_in_use()); }

    /// The same sum given `shards_in_use()`, read once for many counts of one balancer (a
    /// pick that reads every member's count). A shard raised after that read is left out:
    /// it had no call counted when the read was made.
    std::int64_t value(std::uint32_t shards_in_use) const noexcept {
        // Locals: the loads are relaxed, so nothing makes the compiler reload them. Shard 0
        // always exists (all zero if unused): reading it first keeps the usual case of one
        // thread loop-free.
        const InFlightTable::Part* block = block_;
        const std::size_t at = 2 * column_;
        std::uint64_t sum = held(block[0].counts.words[at], block[0].counts.words[at + 1]);
        for (std::size_t s = 1; s < shards_in_use; ++s)
            sum += held(block[s].counts.words[at], block[s].counts.words[at + 1]);
        return static_cast<std::int64_t>(sum);
    }

    /// How many shards of this count's balancer have ever been written (from 0 up).
    std::uint32_t shards_in_use() const noexcept { return used_->load(std::memory_order_acquire); }

    /// What one pick passes to each of its `estimate` calls: the calling thread's slot and
    /// its period (1 … `longest_period`) on the balancer.
    struct Pick {
        std::size_t slot;
        std::uint64_t period;
    };

    /// Starts a pick on this count's balancer from the calling thread: advances the
    /// thread's pace there and returns what to pass to every `estimate` of the pick, on
    /// this thread only. Any count of the balancer gives the same pace.
    Pick begin_pick() const noexcept {
        const std::size_t slot = thread_slot();
        InFlightTable::Pace& pace = paces_[slot];
        const std::uint64_t word = pace.left_and_period.load(std::memory_order_relaxed);
        std::uint64_t left = word & 0xffffffff;
        std::uint64_t period = word >> 32;
        if (left == 0) {
            const std::uint64_t now = view_clock_now();
            const std::uint64_t took = now - pace.began.load(std::memory_order_relaxed);
            if (period == 0 || took > view_budget_ticks)
                period = 1;
            else if (took < view_budget_ticks / 2)
                period = std::min<std::uint64_t>(2 * period, longest_period);
            pace.began.store(now, std::memory_order_relaxed);
            left = period;
        }
        // One writer, this thread (for the shard of threads without a slot, any of them:
        // then the pace is merely shared), so a plain store.
        pace.left_and_period.store((period << 32) | (left - 1), std::memory_order_relaxed);
        return {slot, period};
    }

    /// Calls in flight as the calling thread sees them (≥ 0 always): its own shard now plus
    /// its view of the other shards, re-read when it is `pick.period` estimates old (at
    /// once when the period has shrunk below what the view has left; with a period of 1,
    /// always). `pick` is what this pick's `begin_pick` returned, on this thread.
    std::int64_t estimate(const Pick& pick) const noexcept {
        const std::size_t slot = pick.slot;
        const std::uint64_t period = pick.period;
        // This thread's view: the other shards' sum (low 40 bits) and the estimates left
        // before the next re-read (high bits; 0: re-read now). One writer, as for the pace.
        std::atomic<std::uint64_t>& view = block_[slot].views.words[column_];
        const std::uint64_t seen = view.load(std::memory_order_relaxed);
        std::uint64_t others = seen & view_mask;
        std::uint64_t left = seen >> 40;
        if (left == 0 || left >= period) {
            others = 0;
            const std::uint32_t used = shards_in_use();
            for (std::size_t s = 0; s < used; ++s)
                if (s != slot) others += held_on(s);
            others &= view_mask;
            left = period;
        }
        view.store(((left - 1) << 40) | others, std::memory_order_relaxed);
        return static_cast<std::int64_t>(held_on(slot) + others);
    }

    /// Sets the count to zero (the node left its group): every shard's released counter
    /// catches up with its acquired one. A pick or release racing with it lands before or
    /// after it shard by shard.
    void reset() const noexcept {
        const std::uint32_t used = used_->load(std::memory_order_acquire);
        for (std::size_t s = 0; s < used; ++s) {
            std::uint64_t released = released_on(s).load(std::memory_order_acquire);
            for (;;) {
                const std::uint64_t acquired = acquired_on(s).load(std::memory_order_acquire);
                if (acquired == released ||
                    released_on(s).compare_exchange_weak(released, acquired, std::memory_order_acq_rel,
                                                         std::memory_order_acquire))
                    break;
            }
        }
    }

private:
    friend class InFlightTable;

    static constexpr std::uint64_t view_mask = (std::uint64_t{1} << 40) - 1;

    struct Seen {
        std::uint64_t acquired = 0;
        std::uint64_t released = 0;
    };

    InFlightCount(InFlightTable::Part* block, std::atomic<std::uint32_t>* used, InFlightTable::Pace* paces,
                  std::size_t column, std::size_t slots)
        : block_(block), used_(used), paces_(paces), column_(static_cast<std::uint32_t>(column)),
          slots_(static_cast<std::uint32_t>(slots)) {}

    std::atomic<std::uint64_t>& acquired_on(std::size_t shard) const noexcept {
        return block_[shard].counts.words[2 * column_];
    }
    std::atomic<std::uint64_t>& released_on(std::size_t shard) const noexcept {
        return block_[shard].counts.words[2 * column_ + 1];
    }

    // For `release`'s two passes. Released first: every release that moved it had read an
    // acquired counter at least as high, which the acquire load makes visible here, so
    // acquired ≥ released.
    Seen read(std::size_t shard) const noexcept {
        Seen seen;
        seen.released = released_on(shard).load(std::memory_order_acquire);
        seen.acquired = acquired_on(shard).load(std::memory_order_acquire);
        return seen;
    }

    std::uint64_t held_on(std::size_t shard) const noexcept {
        return held(acquired_on(shard), released_on(shard));
    }

    // A shard's calls for a pick to compare, read without ordering: a read racing with a
    // release may see the released counter ahead of the acquired one; that reads as 0.
    static std::uint64_t held(const std::atomic<std::uint64_t>& acquired,
                              const std::atomic<std::uint64_t>& released) noexcept {
        const std::uint64_t in = acquired.load(std::memory_order_relaxed);
        const std::uint64_t out = released.load(std::memory_order_relaxed);
        return in > out ? in - out : 0;
    }

    // Takes one call off `shard` if it holds one; else leaves in `seen` the state that
    // showed it held none.
    bool take(std::size_t shard, Seen& seen) const noexcept {
        std::atomic<std::uint64_t>& released = released_on(shard);
        seen.released = released.load(std::memory_order_acquire);
        for (;;) {
            seen.acquired = acquired_on(shard).load(std::memory_order_acquire);
            if (seen.acquired == seen.released) return false;
            if (released.compare_exchange_weak(seen.released, seen.released + 1, std::memory_order_acq_rel,
                                               std::memory_order_acquire))
                return true;
        }
    }

    void raise_used(std::uint32_t at_least) const noexcept {
        std::uint32_t used = used_->load(std::memory_order_acquire);
        while (used < at_least &&
               !used_->compare_exchange_weak(used, at_least, std::memory_order_acq_rel, std::memory_order_acquire)) {
        }
    }

    InFlightTable::Part* block_ = nullptr;
    std::atomic<std::uint32_t>* used_ = nullptr;
    InFlightTable::Pace* paces_ = nullptr;
    std::uint32_t column_ = 0;  // within the block
    std::uint32_t slots_ = 0;   // shards below this have one writer of their acquired counter
};

inline InFlightCount InFlightTable::add_column() {
    const std::size_t column = columns_ % block_columns;
    if (column == 0) blocks_.push_back(std::make_unique<Part[]>(slots_ + 1));
    ++columns_;
    return InFlightCount(blocks_.back().get(), &used_, paces_.get(), column, slots_);
}

}  // namespace rpclb::detail
