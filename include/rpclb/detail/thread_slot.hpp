// Thread slots: a small dense index per live thread, so per-thread state can sit in arrays.
#pragma once

#include <cstddef>

namespace rpclb::detail {

/// Alignment (and so size) of state that one thread slot writes: 128 bytes, not the 64 of a
/// cache line, because Intel's spatial prefetcher fetches lines in aligned 128-byte pairs,
/// so two threads writing the two halves of a pair still slow each other down.
inline constexpr std::size_t per_thread_alignment = 128;

/// How many thread slots the process has: twice the hardware threads, at least 8 and at
/// most 256, fixed at the first call.
///
/// Thread safety: safe from any thread.
std::size_t thread_slot_count() noexcept;

/// Claims the calling thread's slot: the slow path of thread_slot(), for its first call on
/// a thread. Takes a process-wide mutex.
std::size_t claim_thread_slot() noexcept;

/// The calling thread's slot plus one; 0 before its first thread_slot() call. Constant-
/// initialised and initial-exec: librpclb is loaded with the program, so reading this is
/// one thread-pointer-relative load, from librpclb and from plugins alike (a program that
/// dlopens librpclb itself needs 8 bytes of glibc's static TLS surplus, which it reserves
/// for this).
[[gnu::tls_model("initial-exec")]] extern constinit thread_local std::size_t thread_slot_plus_one;

/// The calling thread's slot, in [0, thread_slot_count()], held until the thread exits.
///
/// The first call on a thread claims the lowest free slot (taking a process-wide mutex,
/// once per thread); later calls read a thread_local. While a slot is held no other live
/// thread has it, so state indexed by it has a single writer. A thread that finds every
/// slot taken gets thread_slot_count() ("no slot") for its whole life, and its callers fall
/// back to state shared by such threads. A slot freed by an exiting thread goes to the next
/// thread that asks, with whatever state the last holder left in it.
///
/// Thread safety: safe from any thread. Never allocates after the first call on a thread.
inline std::size_t thread_slot() noexcept {
    const std::size_t slot_plus_one = thread_slot_plus_one;
    return slot_plus_one != 0 ? slot_plus_one - 1 : claim_thread_slot();
}

}  // namespace rpclb::detail
