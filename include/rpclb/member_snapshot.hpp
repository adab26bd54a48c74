// The members of a group at one moment, as groups publish them and balancers pick from
// them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace rpclb {

/// A number no earlier call returned, from 1 up: what tells the owners of snapshot state
/// apart (SelectionAlgorithm::snapshot_owner), since an address may be reused by a later
/// instance. Thread-safe.
std::uint64_t new_snapshot_owner() noexcept;

/// A reference that keeps loaded the shared object holding the code at `address` (a
/// plugin's state destructor); null when there is none to take (the code is not in a
/// dlopen()ed object). Thread-safe.
void* hold_code_at(const void* address) noexcept;
/// Drops a reference hold_code_at() took; null is ignored.
void release_code(void* held) noexcept;

/// Calls in flight from this node to one member through one balancer: the balancer adds
/// one at each pick and takes it off at the pick's release. On a cache line of its own,
/// since picks on different threads write different members' counts.
///
/// Thread safety: shared objects safe (relaxed atomics: the count is a gauge).
struct alignas(64) InFlightCount {
    std::atomic<std::int64_t> calls{0};

    /// Calls in flight now.
    std::int64_t value() const noexcept { return calls.load(std::memory_order_relaxed); }
    /// One more call.
    void acquire() noexcept { calls.fetch_add(1, std::memory_order_relaxed); }
    /// One call fewer, never below zero; false (no change) when it was zero.
    bool release() noexcept {
        std::int64_t now = calls.load(std::memory_order_relaxed);
        while (now > 0)
            if (calls.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) return true;
        return false;
    }
};

/// An immutable view of a balancer's members at one moment: distinct node names in
/// ascending order, a version that changes whenever the set changes, each member's calls
/// in flight, and the per-snapshot state of the algorithms that pick from it.
///
/// A balancer picks from a snapshot of its own (a copy of its group's), with `calls` set;
/// it keeps the snapshot alive as long as any pick made from it, and destroys it before
/// the algorithm instance that picks from it (a state keeps its plugin loaded until it is
/// destroyed, so a snapshot may also outlive the instance). A snapshot without `calls` (a group's, or
/// one a test builds) counts no call: in_flight() is 0 until count_calls().
///
/// Never change `nodes` of a snapshot that has been picked from; make a new one. Copies
/// carry `nodes`, `version` and `calls`; they start with no algorithm state.
///
/// Thread safety: distinct objects safe; shared objects safe for the const members
/// (state() included).
struct MemberSnapshot {
    std::vector<std::string> nodes;
    std::uint64_t version = 0;
    /// Index-aligned with `nodes`: member i's calls in flight, shared with the balancer's
    /// next snapshot while the member stays. Empty when no balancer counts.
    std::vector<std::shared_ptr<InFlightCount>> calls;

    MemberSnapshot() = default;
    MemberSnapshot(std::vector<std::string> n, std::uint64_t v) : nodes(std::move(n)), version(v) {}
    MemberSnapshot(const MemberSnapshot& other) : nodes(other.nodes), version(other.version), calls(other.calls) {}
    MemberSnapshot& operator=(const MemberSnapshot& other) {
        if (this != &other) {
            clear_state();
            nodes = other.nodes;
            version = other.version;
            calls = other.calls;
        }
        return *this;
    }
    ~MemberSnapshot() { clear_state(); }

    /// Calls in flight to `nodes[i]` through the balancer picking from this snapshot;
    /// 0 when it counts none. No lock, one relaxed load.
    std::int64_t in_flight(std::size_t i) const noexcept { return i < calls.size() ? calls[i]->value() : 0; }

    /// Gives every member a count of its own at 0 (for a snapshot a test or a benchmark
    /// picks from directly; a balancer sets `calls` itself). Throws std::bad_alloc.
    void count_calls() {
        calls.clear();
        calls.reserve(nodes.size());
        for (std::size_t i = 0; i < nodes.size(); ++i) calls.push_back(std::make_shared<InFlightCount>());
    }

    /// The state `owner` (an algorithm instance's snapshot_owner()) keeps for this snapshot: the
    /// object the first call built with `make()` (which returns a T by value), the same
    /// for every later call, destroyed with the snapshot. Concurrent first calls may each
    /// run `make`; one result is kept, the others are destroyed. No lock; allocates only
    /// when it builds. Throws what `make` throws and std::bad_alloc. One owner keeps one
    /// type of state in a snapshot.
    template <class T, class Make>
    const T& state(std::uint64_t owner, Make&& make) const {
        if (const void* held = find_state(owner)) [[likely]]
            return *static_cast<const T*>(held);
        void (*destroy)(const void*) = [](const void* p) { delete static_cast<const T*>(p); };
        auto* made = new Slot{owner, new T(std::forward<Make>(make)()), destroy, nullptr, nullptr};
        // The destructor is the plugin's code: its library stays loaded until it has run.
        made->library = hold_code_at(reinterpret_cast<const void*>(destroy));
        return *static_cast<const T*>(adopt(made));
    }

private:
    struct Slot {
        std::uint64_t owner;
        const void* value;
        void (*destroy)(const void*);
        Slot* next;
        void* library;  // hold_code_at(destroy)
    };

    const void* find_state(std::uint64_t owner) const noexcept {
        for (const Slot* s = states_.load(std::memory_order_acquire); s; s = s->next)
            if (s->owner == owner) return s->value;
        return nullptr;
    }

    // Pushes `made` unless a slot of the same owner got there first; returns the value kept.
    const void* adopt(Slot* made) const noexcept {
        Slot* head = states_.load(std::memory_order_acquire);
        for (;;) {
            for (const Slot* s = head; s; s = s->next)
                if (s->owner == made->owner) {
                    made->destroy(made->value);
                    release_code(made->library);
                    delete made;
                    return s->value;
                }
            made->next = head;
            if (states_.compare_exchange_weak(head, made, std::memory_order_acq_rel, std::memory_order_acquire))
                return made->value;
        }
    }

    void clear_state() noexcept {
        Slot* s = states_.exchange(nullptr, std::memory_order_acq_rel);
        while (s) {
            Slot* next = s->next;
            s->destroy(s->value);
            release_code(s->library);
            delete s;
            s = next;
        }
    }

    mutable std::atomic<Slot*> states_{nullptr};
};

/// Which way a membership change went.
enum class NodeChange { joined, left };

}  // namespace rpclb
