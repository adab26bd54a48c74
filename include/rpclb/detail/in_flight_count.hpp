// Calls in flight per node of one balancer, kept per thread: InFlightTable and its counts.
#pragma once

#include <rpclb/detail/thread_slot.hpp>

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
/// blocks of 16; within a block each shard's 16 counts fill one 128-byte segment
/// (per_thread_alignment), followed by that shard's 16 view words (InFlightCount::estimate).
/// So a thread reading the counts of up to 16 nodes that got their columns together (the
/// members of a balancer usually do) reads one segment per shard in use, and writing its
/// own part touches only its own segment.
///
/// Blocks are never moved or freed while the table lives, so InFlightCount handles stay
/// valid. The table is owned by AlgorithmState, one per balancer, for the whole process.
///
/// Thread safety: distinct objects safe. `add_column` must not run concurrently with
/// itself (AlgorithmState calls it under its mutex); the counts are safe from any thread.
class InFlightTable {
public:
    InFlightTable() : shards_(thread_slot_count() + 1) {}
    InFlightTable(const InFlightTable&) = delete;
    InFlightTable& operator=(const InFlightTable&) = delete;

    /// The count of a new node, at 0. Allocates a block every 16 columns; throws
    /// std::bad_alloc when memory runs out.
    InFlightCount add_column();

private:
    friend class InFlightCount;
    static constexpr std::size_t block_columns = 16;

    struct alignas(per_thread_alignment) Segment {
        std::atomic<std::uint64_t> words[block_columns]{};
    };
    // One shard's part of one block.
    struct Part {
        Segment counts;
        Segment views;
    };
    static_assert(sizeof(Segment) == per_thread_alignment);
    static_assert(sizeof(Part) == 2 * sizeof(Segment));

    // Shards at index ≥ used_ have never been written; raised before a shard's first write,
    // so `release` and `value` need not read the others. Read by every pick, written only
    // when a thread slot first counts on this balancer: its own line.
    alignas(per_thread_alignment) std::atomic<std::uint32_t> used_{0};
    alignas(per_thread_alignment) const std::size_t shards_;
    std::vector<std::unique_ptr<Part[]>> blocks_;  // each holds shards_ parts
    std::size_t columns_ = 0;
};

/// The count of calls in flight on one node of one balancer: a handle on a column of its
/// InFlightTable, cheap to copy, like a pointer (its operations are `const` and change the
/// count, not the handle; the default value refers to nothing and must not be used).
///
/// The count is the sum of the column's shards, each never below zero. `acquire` adds a
/// call to the calling thread's shard. `release` takes a call off the calling thread's
/// shard if it holds one, else off the first other shard that does, with a
/// compare-exchange, so a release on thread B cancels a pick made on thread A exactly. When
/// no shard holds a call, `release` reads every shard twice; if nothing changed in between
/// (each shard carries a modification counter beside its count), the count was zero at that
/// moment and the release is dropped, as a single counter clamped at zero would drop it.
/// Every operation therefore behaves as on one counter with "decrement unless zero", and no
/// read, even one racing with writers, sees a negative count. A legitimate release (one per
/// counted pick, after it) is never dropped unless a `reset` came between.
///
/// Two ways to read it. `value` adds up every shard now: exact, but each shard another
/// thread has written since this thread last read it costs a cache-line transfer, on every
/// read. `estimate` adds the calling thread's own shard, read now, to the sum of the other
/// shards as this thread last read them; it re-reads them every `refresh_every` estimates
/// (per thread, per node). So from one thread, with no other thread picking, `estimate` is
/// exact (a release from another thread lands on the picking thread's own shard), and with
/// several picking threads it lags the others' calls by at most `refresh_every` of this
/// thread's estimates of this count.
///
/// A shard holds up to 2³² − 1 calls (one thread's calls in flight on one node).
///
/// Costs: `acquire` is one uncontended atomic add on the thread's own segment. `release`
/// on the thread that picked is one compare-exchange there; on another thread it writes the
/// picker's segment (one cache-line transfer per call, not per pick). `value` reads one
/// segment per shard in use (shards are used from the lowest, so with k threads about k);
/// `estimate` reads the thread's own segments, and the others once per `refresh_every`.
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation.
class InFlightCount {
public:
    /// Estimates between two reads of the other threads' shards.
    static constexpr std::uint32_t refresh_every = 32;

    InFlightCount() = default;

    /// One more call in flight.
    void acquire() const noexcept {
        const std::size_t shard = thread_slot();
        raise_used(static_cast<std::uint32_t>(shard + 1));
        count(shard).fetch_add(one_call);
    }

    /// One call fewer in flight; false (and no change) when the count was zero.
    bool release() const noexcept {
        const std::size_t own = thread_slot();
        std::uint64_t word = 0;
        if (own < used_->load() && take(count(own), word)) return true;
        for (;;) {
            // First pass: take a call from any shard holding one; else sum the shards'
            // modification counters, which only grow.
            const std::uint32_t used = used_->load();
            std::uint64_t changes = 0;
            for (std::size_t s = 0; s < used; ++s) {
                if (take(count(s), word)) return true;
                changes += word >> 32;
            }
            // Second pass: the same shards, the same counters and all counts zero mean
            // every shard was at zero at once, between the passes.
            std::uint64_t again = 0;
            bool held = false;
            for (std::size_t s = 0; s < used; ++s) {
                word = count(s).load();
                held = held || (word & count_mask) != 0;
                again += word >> 32;
            }
            if (!held && again == changes && used_->load() == used) return false;
        }
    }

    /// Calls in flight now: the sum of the shards, each read once (≥ 0 always).
    std::int64_t value() const noexcept { return value(shards_in_use()); }

    /// The same sum given `shards_in_use()`, read once for many counts of one balancer (a
    /// pick that reads every member's count). A shard raised after that read is left out:
    /// it had no call counted when the read was made.
    std::int64_t value(std::uint32_t shards_in_use) const noexcept {
        std::uint64_t sum = 0;
        for (std::size_t s = 0; s < shards_in_use; ++s) sum += count(s).load(std::memory_order_relaxed) & count_mask;
        return static_cast<std::int64_t>(sum);
    }

    /// How many shards of this count's balancer have ever been written (from 0 up).
    std::uint32_t shards_in_use() const noexcept { return used_->load(std::memory_order_relaxed); }

    /// Calls in flight as the calling thread sees them (≥ 0 always): its own shard now plus
    /// the other shards as of its last refresh, at most `refresh_every` estimates ago.
    std::int64_t estimate() const noexcept {
        const std::size_t slot = thread_slot();
        // This thread's view word: the other shards' sum (low 48 bits) and the estimates
        // left before the next refresh (high 16 bits; 0: refresh now). One writer, this
        // thread (for the shard of threads without a slot, any of them: then the view is
        // merely shared), so a plain store.
        std::atomic<std::uint64_t>& view = block_[slot].views.words[column_];
        std::uint64_t seen = view.load(std::memory_order_relaxed);
        std::uint64_t others = seen & view_mask;
        std::uint64_t left = seen >> 48;
        if (left == 0) {
            others = 0;
            const std::uint32_t used = used_->load(std::memory_order_relaxed);
            for (std::size_t s = 0; s < used; ++s)
                if (s != slot) others += count(s).load(std::memory_order_relaxed) & count_mask;
            others &= view_mask;
            left = refresh_every;
        }
        view.store(((left - 1) << 48) | others, std::memory_order_relaxed);
        return static_cast<std::int64_t>((count(slot).load(std::memory_order_relaxed) & count_mask) + others);
    }

    /// Sets the count to zero (the node left its group). A pick or release racing with it
    /// lands before or after it shard by shard.
    void reset() const noexcept {
        const std::uint32_t used = used_->load();
        for (std::size_t s = 0; s < used; ++s) {
            std::uint64_t word = count(s).load();
            while (!count(s).compare_exchange_weak(word, ((word >> 32) + 1) << 32)) {
            }
        }
    }

private:
    friend class InFlightTable;

    // Low 32 bits: calls in flight counted on this shard. High 32 bits: how many times the
    // shard changed (wrapping), which tells `release` whether two reads saw the same state.
    static constexpr std::uint64_t count_mask = 0xffff'ffff;
    static constexpr std::uint64_t one_change = std::uint64_t{1} << 32;
    static constexpr std::uint64_t one_call = one_change + 1;
    static constexpr std::uint64_t view_mask = (std::uint64_t{1} << 48) - 1;

    InFlightCount(InFlightTable::Part* block, std::atomic<std::uint32_t>* used, std::size_t column)
        : block_(block), used_(used), column_(static_cast<std::uint32_t>(column)) {}

    std::atomic<std::uint64_t>& count(std::size_t shard) const noexcept {
        return block_[shard].counts.words[column_];
    }

    // Takes one call off `word_of` if it holds one; else leaves in `word` the state that
    // showed it held none.
    static bool take(std::atomic<std::uint64_t>& word_of, std::uint64_t& word) noexcept {
        word = word_of.load();
        while ((word & count_mask) != 0)
            if (word_of.compare_exchange_weak(word, word + one_change - 1)) return true;
        return false;
    }

    void raise_used(std::uint32_t at_least) const noexcept {
        std::uint32_t used = used_->load();
        while (used < at_least && !used_->compare_exchange_weak(used, at_least)) {
        }
    }

    InFlightTable::Part* block_ = nullptr;
    std::atomic<std::uint32_t>* used_ = nullptr;
    std::uint32_t column_ = 0;  // within the block
};

inline InFlightCount InFlightTable::add_column() {
    const std::size_t column = columns_ % block_columns;
    if (column == 0) blocks_.push_back(std::make_unique<Part[]>(shards_));
    ++columns_;
    return InFlightCount(blocks_.back().get(), &used_, column);
}

}  // namespace rpclb::detail
