// Whether the caller of a call served here gave up on it, and the hooks that end the calls
// its handler made when it does (internal).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// Set once when the caller of a call this node serves on a worker gives up on it: it
/// cancelled it (wire::Cancel) or its connection closed. The calls that call's handler
/// makes hook themselves here (AbandonTie): fire() runs each hook once, on the firing
/// thread, with no lock held; a call that completes first removes its hook, so the list
/// holds at most the calls under way. A hook added after fire() is refused.
///
/// Thread safety: every member may be called from any thread.
class AbandonSignal : public std::enable_shared_from_this<AbandonSignal> {
public:
    using Hook = std::function<void()>;
    /// Names an added hook for remove(); never 0.
    using HookId = std::uint64_t;

    /// Whether fire() was called.
    bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }

    /// Adds `hook`, to run once when fire() is called. Returns its id; 0, without adding
    /// it, when fire() was called already (the caller acts at once itself).
    HookId add(Hook hook) {
        std::lock_guard lock(mutex_);
        if (fired_.load(std::memory_order_relaxed)) return 0;
        hooks_.emplace_back(++last_id_, std::move(hook));
        return last_id_;
    }

    /// Removes hook `id` unless fire() has taken it (then it runs, or has run). Unknown
    /// ids are ignored.
    void remove(HookId id) noexcept {
        std::lock_guard lock(mutex_);
        for (auto& entry : hooks_) {
            if (entry.first != id) continue;
            std::swap(entry, hooks_.back());
            hooks_.pop_back();
            return;
        }
    }

    /// Sets fired() and runs every hook added, once each, on this thread, with no lock
    /// held (a hook may call add() or remove()). Later calls do nothing. Returns whether
    /// this call fired it.
    bool fire() {
        std::vector<std::pair<HookId, Hook>> hooks;
        {
            std::lock_guard lock(mutex_);
            if (fired_.exchange(true, std::memory_order_acq_rel)) return false;
            hooks.swap(hooks_);
        }
        for (auto& [id, hook] : hooks) hook();
        return true;
    }

    /// How many hooks wait (tests).
    std::size_t hooks() const {
        std::lock_guard lock(mutex_);
        return hooks_.size();
    }

private:
    std::atomic<bool> fired_{false};
    mutable std::mutex mutex_;
    std::vector<std::pair<HookId, Hook>> hooks_;  // under mutex_
    HookId last_id_ = 0;                          // under mutex_
};

/// Ties one call to the AbandonSignal of the call whose handler made it: tie() adds its
/// hook, untie() (the call completed) removes it. Either may come first, on different
/// threads: a hook added after untie() is removed at once.
///
/// Thread safety: tie() once and untie() any number of times, from any threads.
class AbandonTie {
public:
    AbandonTie() = default;
    AbandonTie(const AbandonTie&) = delete;
    AbandonTie& operator=(const AbandonTie&) = delete;
    ~AbandonTie() { untie(); }

    /// Adds `hook` to `signal`, which must be owned by a shared_ptr. Returns false, adding
    /// nothing, when `signal` has fired already.
    bool tie(AbandonSignal& signal, AbandonSignal::Hook hook) {
        const auto id = signal.add(std::move(hook));
        if (id == 0) return false;
        {
            std::lock_guard lock(mutex_);
            if (!untied_) {
                signal_ = signal.shared_from_this();
                id_ = id;
                return true;
            }
        }
        signal.remove(id);
        return true;
    }

    /// Removes the hook tie() added, or will add. Never blocks on a running hook.
    void untie() noexcept {
        std::shared_ptr<AbandonSignal> signal;
        AbandonSignal::HookId id = 0;
        {
            std::lock_guard lock(mutex_);
            untied_ = true;
            signal = std::move(signal_);
            id = id_;
        }
        if (signal) signal->remove(id);
    }

private:
    std::mutex mutex_;
    std::shared_ptr<AbandonSignal> signal_;  // under mutex_
    AbandonSignal::HookId id_ = 0;           // under mutex_
    bool untied_ = false;                    // under mutex_
};

}  // namespace rpclb::detail
