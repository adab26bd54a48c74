// The number of calls in flight on one node of one balancer, sharded by thread.
#pragma once

#include <rpclb/detail/thread_slot.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace rpclb::detail {

/// A count of calls in flight that picks on many threads can raise without sharing a cache
/// line (reference §2.4, §2.5; never below zero as §10.4 asks).
///
/// The count is the sum of one shard per thread slot (detail::thread_slot) plus one shard
/// for threads without a slot, each on its own cache line and each never below zero.
/// `acquire` adds a call to the calling thread's shard. `release` takes a call off the
/// calling thread's shard if it holds one, else off the first other shard that does, with a
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
/// (per thread, per count). So from one thread, with no other thread picking, `estimate` is
/// exact (a release from another thread lands on the picking thread's own shard), and with
/// several picking threads it lags the others' calls by at most `refresh_every` of this
/// thread's estimates of this count.
///
/// A shard holds up to 2³² − 1 calls (one thread's calls in flight on one node).
///
/// Costs: `acquire` is one uncontended atomic add on the thread's own line. `release` on the
/// thread that picked is one compare-exchange on that line; on another thread it writes the
/// picker's line (one cache-line transfer per call, not per pick). `value` reads one line
/// per shard in use (shards are used from the lowest, so with k threads about k lines);
/// `estimate` reads only the thread's own line, and those lines once per `refresh_every`.
///
/// Thread safety: distinct objects safe; shared objects safe. No lock, no allocation
/// (construction allocates the shards).
class InFlightCount {
public:
    InFlightCount() : shards_(new Shard[thread_slot_count() + 1]) {}
    InFlightCount(const InFlightCount&) = delete;
    InFlightCount& operator=(const InFlightCount&) = delete;

    /// One more call in flight.
    void acquire() noexcept {
        const std::size_t shard = thread_slot();
        raise_used(shard + 1);
        shards_[shard].word.fetch_add(one_call);
    }

    /// One call fewer in flight; false (and no change) when the count was zero.
    bool release() noexcept {
        const std::size_t own = thread_slot();
        std::uint64_t word = 0;
        if (own < used_.load() && take(shards_[own], word)) return true;
        for (;;) {
            // First pass: take a call from any shard holding one; else sum the shards'
            // modification counters, which only grow.
            const std::uint32_t used = used_.load();
            std::uint64_t changes = 0;
            bool held = false;
            for (std::size_t s = 0; s < used; ++s) {
                if (take(shards_[s], word)) return true;
                changes += word >> 32;
            }
            // Second pass: the same shards, the same counters and all counts zero mean
            // every shard was at zero at once, between the passes.
            std::uint64_t again = 0;
            for (std::size_t s = 0; s < used; ++s) {
                word = shards_[s].word.load();
                held = held || (word & count_mask) != 0;
                again += word >> 32;
            }
            if (!held && again == changes && used_.load() == used) return false;
        }
    }

    /// Estimates between two reads of the other threads' shards.
    static constexpr std::uint32_t refresh_every = 32;

    /// Calls in flight now: the sum of the shards, each read once (≥ 0 always).
    std::int64_t value() const noexcept {
        const std::uint32_t used = used_.load(std::memory_order_relaxed);
        std::uint64_t sum = 0;
        for (std::size_t s = 0; s < used; ++s)
            sum += shards_[s].word.load(std::memory_order_relaxed) & count_mask;
        return static_cast<std::int64_t>(sum);
    }

    /// Calls in flight as the calling thread sees them (≥ 0 always): its own shard now plus
    /// the other shards as of its last refresh, at most `refresh_every` estimates ago.
    std::int64_t estimate() noexcept {
        const std::size_t slot = thread_slot();
        Shard& mine = shards_[slot];
        // The view fields have one writer, this thread (or, for the shard of threads without
        // a slot, any of them: then the view is merely shared): no read-modify-write.
        std::uint32_t left = mine.estimates_left.load(std::memory_order_relaxed);
        std::uint64_t others = mine.others.load(std::memory_order_relaxed);
        if (left == 0) {
            others = 0;
            const std::uint32_t used = used_.load(std::memory_order_relaxed);
            for (std::size_t s = 0; s < used; ++s)
                if (s != slot) others += shards_[s].word.load(std::memory_order_relaxed) & count_mask;
            mine.others.store(others, std::memory_order_relaxed);
            left = refresh_every;
        }
        mine.estimates_left.store(left - 1, std::memory_order_relaxed);
        return static_cast<std::int64_t>((mine.word.load(std::memory_order_relaxed) & count_mask) + others);
    }

    /// Sets the count to zero (the node left its group). A pick or release racing with it
    /// lands before or after it shard by shard.
    void reset() noexcept {
        const std::uint32_t used = used_.load();
        for (std::size_t s = 0; s < used; ++s) {
            std::uint64_t word = shards_[s].word.load();
            while (!shards_[s].word.compare_exchange_weak(word, ((word >> 32) + 1) << 32)) {
            }
        }
    }

private:
    // Low 32 bits: calls in flight counted on this shard. High 32 bits: how many times the
    // shard changed (wrapping), which tells `release` whether two reads saw the same state.
    static constexpr std::uint64_t count_mask = 0xffff'ffff;
    static constexpr std::uint64_t one_change = std::uint64_t{1} << 32;
    static constexpr std::uint64_t one_call = one_change + 1;

    struct alignas(per_thread_alignment) Shard {
        std::atomic<std::uint64_t> word{0};
        // The owner's view of the other shards, for `estimate`.
        std::atomic<std::uint64_t> others{0};
        std::atomic<std::uint32_t> estimates_left{0};  // 0: read the other shards now
    };

    // Takes one call off `shard` if it holds one; else leaves in `word` the state that
    // showed it held none.
    static bool take(Shard& shard, std::uint64_t& word) noexcept {
        word = shard.word.load();
        while ((word & count_mask) != 0)
            if (shard.word.compare_exchange_weak(word, word + one_change - 1)) return true;
        return false;
    }

    // Shards at index ≥ used_ have never been written; raised before a shard's first write,
    // so `release` and `value` need not read the others.
    void raise_used(std::uint32_t at_least) noexcept {
        std::uint32_t used = used_.load();
        while (used < at_least && !used_.compare_exchange_weak(used, at_least)) {
        }
    }

    // Read on every pick, written only when a thread slot touches this count the first
    // time: its own line, away from the shards.
    alignas(64) std::atomic<std::uint32_t> used_{0};
    const std::unique_ptr<Shard[]> shards_;
};

}  // namespace rpclb::detail
