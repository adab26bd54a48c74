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
/// its own cache lines (seed §2.4, §2.5; never below zero as §10.4 asks).
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
    // acquired and released on this shard; views.words[c] is the shard's thread's view of
    // column c (the other shards' sum) and views.words[block_columns + c] the number of
    // the period that view was read in.
    struct Part {
        Segment counts;
        Segment views;
    };
    static_assert(sizeof(Segment) == per_thread_alignment);

    // How fast one shard's thread picks on this balancer (InFlightCount::begin_pick): the
    // picks left in its period (low 32 bits) and the period (high 32 bits), the view clock
    // when the period began, the period's number and that of the first period of the
    // current run of fast periods.
    struct alignas(per_thread_alignment) Pace {
        std::atomic<std::uint64_t> left_and_period{0};
        std::atomic<std::uint64_t> began{0};
        std::atomic<std::uint64_t> number{0};  // of the current period, from 1
        std::atomic<std::uint64_t> run{0};     // number of the first period of the current run
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
/// read. `estimate` adds the calling thread's own shard, read now, to the other shards as
/// this thread last read them (its *view*), when that view is recent enough; a pick calls
/// `begin_pick` once and passes what it returns to each `estimate`.
///
/// Recent enough is measured in *periods*: per thread and balancer, runs of consecutive
/// picks whose length follows the thread's pace on the view clock (detail::view_clock_now).
/// A period starts at 1 pick; when it ends, the next one is twice as long (up to
/// `longest_period`) if its picks took less than half of `view_budget_ticks` (about 8 µs),
/// as long if they took less than the budget, and 1 pick if they took longer, which also
/// ends the *run* of fast periods. A period also ends early, as a slow one, when a pick
/// finds it has lasted longer than the budget; picks read the clock every `clock_every`
/// picks of a period to find out. A view serves the picks of the period it was read in
/// and of the next `max_age` − 1 periods of the same run (`begin_pick(max_age)`); a pick
/// in a period of 1 pick reads every shard afresh. So:
///
/// - a thread that picks less often than once per half a budget (≈4 µs) on a balancer
///   (any thread that waits for its calls: no call between two nodes is that short) reads
///   every count afresh: `estimate` is then exact;
/// - a thread picking faster reads through views at most `max_age` periods old, each
///   period about one budget long at most: with `max_age` 1 (least_connections) about
///   8 µs, less than any call lasts; with 32 (power_of_two) at most about 250 µs;
/// - when such a thread pauses or slows down, at most `clock_every` − 1 of its picks
///   (7) may still read views from before, however long the pause;
/// - the thread's own calls (and releases of them from any thread: they land on its own
///   shard) are always current, so from one thread alone `estimate` is exact.
///
/// Costs: `acquire` is a load and a store on the thread's own segment, no locked
/// instruction. `release` on the thread that picked is one compare-exchange there; on
/// another thread it writes the picker's segment (one cache-line transfer per call, not per
/// pick). `value` reads one segment per shard in use (shards are used from the lowest, so
/// with k threads about k); `estimate` reads the thread's own segments (its counts and its
/// view), the other shards' segments when the view is too old, and every shard at a pace of
/// 1; `begin_pick` reads and writes the thread's own pace, and the view clock once per
/// period.
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation.
class InFlightCount {
public:
    /// The most picks in a period: 64. A longer period costs fewer re-reads of the other
    /// shards (each moves their cache lines).
    static constexpr std::uint32_t longest_period = 64;

    /// A period's picks read the view clock every this many picks (and at its end): 8.
    /// Reading it (`rdtsc`) costs about 20 ns on the bench machine, as much as the rest of
    /// a pick, so not every pick reads it.
    static constexpr std::uint32_t clock_every = 8;

    /// How long a period may last, in view-clock ticks: 16384, about 8 µs at the 2.1 GHz
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

    /// What one pick passes to each of its `estimate` calls (on the same thread): the
    /// calling thread's slot, its period on the balancer, the number of that period and
    /// the number of the oldest period whose views the pick may still use.
    struct Pick {
        std::size_t slot;
        std::uint64_t period;
        std::uint64_t number;
        std::uint64_t oldest;
    };

    /// Starts a pick on this count's balancer from the calling thread: advances the
    /// thread's pace there (any count of the balancer gives the same pace) and returns what
    /// to pass to every `estimate` of the pick. The pick may use views read up to
    /// `max_age` periods ago (≥ 1; 1: only in this period), never views older than the
    /// current run of fast periods.
    Pick begin_pick(std::uint64_t max_age) const noexcept {
        const std::size_t slot = thread_slot();
        InFlightTable::Pace& pace = paces_[slot];
        // One writer, this thread (for the shard of threads without a slot, any of them:
        // then the pace is merely shared), so plain stores.
        const std::uint64_t word = pace.left_and_period.load(std::memory_order_relaxed);
        std::uint64_t left = word & 0xffffffff;
        std::uint64_t period = word >> 32;
        std::uint64_t number = pace.number.load(std::memory_order_relaxed);
        std::uint64_t run = pace.run.load(std::memory_order_relaxed);
        // A period ends when its picks are used up, or when it has lasted longer than the
        // budget: the clock is read at every `clock_every`-th pick of a period (reading it
        // costs about as much as the rest of a pick here), so after a pause at most
        // `clock_every` − 1 picks still use the views from before it.
        std::uint64_t now = 0;
        std::uint64_t took = 0;
        if (left % clock_every == 0) {
            now = view_clock_now();
            took = now - pace.began.load(std::memory_order_relaxed);
        }
        if (left == 0 || took > view_budget_ticks) {
            ++number;
            if (period == 0 || took > view_budget_ticks) {
                period = 1;
                run = number;  // a slow period: no view read before it counts any more
                pace.run.store(run, std::memory_order_relaxed);
            } else if (took < view_budget_ticks / 2) {
                period = std::min<std::uint64_t>(2 * period, longest_period);
            }
            pace.began.store(now, std::memory_order_relaxed);
            pace.number.store(number, std::memory_order_relaxed);
            left = period;
        }
        pace.left_and_period.store((period << 32) | (left - 1), std::memory_order_relaxed);
        const std::uint64_t oldest = number >= run + max_age ? number - max_age + 1 : run;
        return {slot, period, number, oldest};
    }

    /// Calls in flight as the calling thread sees them (≥ 0 always): its own shard now plus
    /// the other shards, read now when `pick.period` is 1 (the thread picks slowly), else
    /// through its view, re-read if it was read before period `pick.oldest`. `pick` is
    /// what this pick's `begin_pick` returned, on this thread.
    std::int64_t estimate(const Pick& pick) const noexcept {
        const std::size_t slot = pick.slot;
        if (pick.period == 1) return value(shards_in_use());
        // This thread's view: the other shards' sum and the number of the period it was
        // read in (0: never). One writer, as for the pace.
        std::atomic<std::uint64_t>* views = block_[slot].views.words;
        std::uint64_t others;
        if (views[InFlightTable::block_columns + column_].load(std::memory_order_relaxed) >= pick.oldest) {
            others = views[column_].load(std::memory_order_relaxed);
        } else {
            others = 0;
            const std::uint32_t used = shards_in_use();
            for (std::size_t s = 0; s < used; ++s)
                if (s != slot) others += held_on(s);
            views[column_].store(others, std::memory_order_relaxed);
            views[InFlightTable::block_columns + column_].store(pick.number, std::memory_order_relaxed);
        }
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
