// The frames waiting to go out on one connection (internal, sans-I/O).
#pragma once

#include <cstddef>
#include <deque>
#include <string>

namespace rpclb::detail {

/// A FIFO of encoded frames with at most one write in progress.
///
/// begin_write() hands out the frames at the front as the next write; they stay in the
/// queue, at the same addresses, until end_write() (a write's buffers must outlive it,
/// whatever happens to the connection meanwhile). fail() drops every frame not being
/// written; the ones being written go at end_write(). std::deque never moves its
/// elements on push_back, so frames queued during a write don't disturb it.
///
/// Thread safety: none; the owning connection's strand serialises every use.
class WriteQueue {
public:
    /// Queues `frame`; false (and the frame dropped) after fail().
    bool push(std::string frame) {
        if (failed_) return false;
        frames_.push_back(std::move(frame));
        return true;
    }

    bool writing() const noexcept { return in_write_ > 0; }
    /// No frame waits to be written (frames being written don't count).
    bool idle() const noexcept { return frames_.size() == in_write_; }
    std::size_t queued() const noexcept { return frames_.size(); }

    /// Starts a write of the first frames, at most `max_frames` and, past the first, at
    /// most `max_bytes` in all. Returns how many; 0 when a write runs or nothing waits.
    std::size_t begin_write(std::size_t max_frames, std::size_t max_bytes) {
        if (writing() || frames_.empty() || failed_) return 0;
        std::size_t bytes = frames_.front().size();
        in_write_ = 1;
        while (in_write_ < frames_.size() && in_write_ < max_frames &&
               bytes + frames_[in_write_].size() + 1 <= max_bytes)
            bytes += frames_[in_write_++].size() + 1;
        return in_write_;
    }

    /// The `i`th frame of the write in progress.
    const std::string& at(std::size_t i) const { return frames_[i]; }

    /// The write in progress ended (written or failed): its frames go, each handed to
    /// `spent(std::string&&)` (which may keep its buffer). Returns the bytes of the frames
    /// that went.
    template <class Spent>
    std::size_t end_write(Spent&& spent) {
        std::size_t bytes = 0;
        while (in_write_ > 0) {
            bytes += frames_.front().size();
            spent(std::move(frames_.front()));
            frames_.pop_front();
            --in_write_;
        }
        return bytes;
    }
    std::size_t end_write() {
        return end_write([](std::string&&) {});
    }

    /// The connection failed: frames not being written go now, and nothing queues again.
    /// Returns the bytes of the frames that went.
    std::size_t fail() {
        failed_ = true;
        std::size_t bytes = 0;
        for (std::size_t i = in_write_; i < frames_.size(); ++i) bytes += frames_[i].size();
        frames_.resize(in_write_);
        return bytes;
    }

private:
    std::deque<std::string> frames_;
    std::size_t in_write_ = 0;  // frames at the front that belong to the write in progress
    bool failed_ = false;
};

}  // namespace rpclb::detail
