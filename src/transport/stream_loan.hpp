// The loan of an accepted call channel's stream to the thread that brings an answer
// (internal).
#pragma once

#include <mutex>
#include <utility>

namespace rpclb::detail {

/// Counts the answers a call channel owes (Connection::answer_later) and whether its
/// stream is lent to the thread that will bring the next one. While one answer is owed
/// and no write runs, the strand lends the stream: the worker that produced the answer
/// writes it itself, so the caller has it without a hop back to the network thread. The
/// strand takes the stream back before it touches it again (take_back), waiting for a
/// borrower's write in progress, which is short: the channel's socket never blocks.
///
/// Thread safety: write_if_lent() from any thread; the rest on the connection's strand.
class StreamLoan {
public:
    /// One more answer is owed; the stream is lent when it is the only one and `can_lend`.
    void promise(bool can_lend) {
        ++owed_;
        std::lock_guard lock(mutex_);
        lent_ = owed_ == 1 && can_lend;
    }
    /// Ends the loan; when the stream was lent and `fits`, first runs `write()` (which
    /// writes the answer) and returns true. Else false: the answer goes by the strand.
    template <class Write>
    bool write_if_lent(bool fits, Write&& write) {
        std::lock_guard lock(mutex_);
        if (!std::exchange(lent_, false) || !fits) return false;
        write();
        return true;
    }
    /// Ends the loan, waiting for a borrower's write in progress.
    void take_back() {
        std::lock_guard lock(mutex_);
        lent_ = false;
    }
    /// A promised answer went out or was forgone; true when none is owed any more.
    bool delivered() noexcept { return --owed_ == 0; }
    /// Some promised answer has not been delivered (no read is started meanwhile).
    bool owed() const noexcept { return owed_ > 0; }

private:
    int owed_ = 0;
    std::mutex mutex_;
    bool lent_ = false;  // under mutex_, which a borrower holds while it writes
};

}  // namespace rpclb::detail
