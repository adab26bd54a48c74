// The frames waiting to go out on one connection (internal, sans-I/O).
#pragma once

#include <rpclb/detail/wire.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// Two FIFOs of encoded frames, control and data, with at most one write in progress.
///
/// Data frames (requests, answers, casts, cancels, bye) keep their order among themselves,
/// and so do control frames (probes, acks, membership). With pieces on (set_pieces), a
/// data frame longer than `whole_max` goes one piece per write (wire::piece_bytes,
/// wire::pieced_above); a control frame goes before it (between two of its pieces) and
/// before every data frame queued after it, and after the smaller data frames queued
/// before it, in writes of at most `whole_max`. So a control frame waits behind at most
/// `whole_max` of data, never behind a whole large frame. A piece is a view of the frame, never a copy. With pieces
/// off, control frames are data frames.
///
/// begin_write() hands out the frames at the front of one lane as the next write; they
/// stay queued, at the same addresses, until end_write() (a write's buffers must outlive
/// it, whatever happens to the connection meanwhile). fail() drops every frame not being
/// written; the ones being written go at end_write(). std::deque never moves its
/// elements on push_back, so frames queued during a write don't disturb it.
///
/// Thread safety: none; the owning connection's strand serialises every use.
class WriteQueue {
public:
    /// Queues data frame `frame`; false (and the frame dropped) after fail().
    bool push(std::string frame) { return push_to(data_, std::move(frame)); }
    /// Queues control frame `frame`: it goes before every data frame not yet started,
    /// and between two pieces of one. False (and the frame dropped) after fail().
    bool push_control(std::string frame) {
        if (piece_size_ == 0) return push(std::move(frame));
        if (control_.empty()) data_ahead_ = data_.size();
        return push_to(control_, std::move(frame));
    }

    /// Data frames longer than `piece_size` bytes go in pieces from the next write on;
    /// 0: none do (the peer does not read pieces).
    /// Frames longer than `whole_max` (at least `piece_size`) go in pieces of `piece_size`,
    /// and a batch is at most `whole_max` long.
    void set_pieces(std::size_t piece_size, std::size_t whole_max = 0) noexcept {
        piece_size_ = piece_size;
        whole_max_ = std::max(whole_max, piece_size);
    }

    bool writing() const noexcept { return in_write_ > 0; }
    /// No frame or piece waits to be written (the write in progress doesn't count).
    bool idle() const noexcept {
        const bool frame_done = lane_ != &data_ || !piece_ || piece_last_;
        return control_.size() == (lane_ == &control_ ? in_write_ : 0) &&
               data_.size() == (lane_ == &data_ && frame_done ? in_write_ : 0);
    }
    std::size_t queued() const noexcept { return control_.size() + data_.size(); }

    /// Starts a write of the first frames of a lane, at most `max_frames` and, past the
    /// first, at most `max_bytes` in all (with pieces on, a data write at most the piece
    /// size); or of one piece (piece()). Returns how many frames (1 for a piece); 0 when a
    /// write runs or nothing waits.
    std::size_t begin_write(std::size_t max_frames, std::size_t max_bytes) {
        if (writing() || failed_) return 0;
        // Control frames go before a frame in pieces (between two of its pieces) and before
        // data frames queued after them, not before smaller data frames queued ahead of
        // them: those make a write no longer than a piece.
        const bool data_first = data_ahead_ > 0 && !data_.empty() && !in_pieces(data_.front());
        lane_ = data_first || control_.empty() ? &data_ : &control_;
        if (data_first) max_frames = std::min(max_frames, data_ahead_);
        auto& lane = *lane_;
        if (lane.empty()) return 0;
        piece_ = lane_ == &data_ && in_pieces(lane.front());
        if (piece_) {
            piece_last_ = lane.front().size() - offset_ <= piece_size_;
            return in_write_ = 1;
        }
        if (lane_ == &data_ && piece_size_ > 0) max_bytes = std::min(max_bytes, whole_max_);
        std::size_t bytes = lane.front().size();
        in_write_ = 1;
        while (in_write_ < lane.size() && in_write_ < max_frames && bytes + lane[in_write_].size() + 1 <= max_bytes &&
               !(lane_ == &data_ && in_pieces(lane[in_write_])))
            bytes += lane[in_write_++].size() + 1;
        return in_write_;
    }

    /// The `i`th frame of the write in progress (not a piece write).
    const std::string& at(std::size_t i) const { return (*lane_)[i]; }
    /// True when the write in progress is one piece of a frame.
    bool piece() const noexcept { return writing() && piece_; }
    /// The piece of the write in progress: its bytes (a view into the frame) ...
    std::string_view piece_text() const {
        const std::string_view frame = data_.front();
        return frame.substr(offset_, piece_size_);
    }
    /// ... and the byte written after them (wire::piece_more or wire::piece_last).
    char piece_trailer() const noexcept { return piece_last_ ? wire::piece_last : wire::piece_more; }

    /// The write in progress ended (written or failed): its frames go, each handed to
    /// `spent(std::string&&)` (which may keep its buffer); a piece's frame goes with its
    /// last piece. Returns the bytes of the frames that went.
    template <class Spent>
    std::size_t end_write(Spent&& spent) {
        if (in_write_ == 0) return 0;
        if (piece_ && !piece_last_ && !failed_) {
            offset_ += piece_size_;
            in_write_ = 0;
            return 0;
        }
        if (lane_ == &data_) {
            offset_ = 0;
            data_ahead_ -= std::min(data_ahead_, in_write_);
        } else {
            data_ahead_ = 0;  // control frames still queued no longer wait for older data
        }
        std::size_t bytes = 0;
        auto& lane = *lane_;
        while (in_write_ > 0) {
            bytes += lane.front().size();
            spent(std::move(lane.front()));
            lane.pop_front();
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
        for (auto* lane : {&control_, &data_}) {
            const std::size_t keep = lane == lane_ ? in_write_ : 0;
            for (std::size_t i = keep; i < lane->size(); ++i) bytes += (*lane)[i].size();
            lane->resize(keep);
        }
        return bytes;
    }

    /// Whether `frame`, a data frame, goes in pieces.
    bool in_pieces(const std::string& frame) const noexcept { return piece_size_ > 0 && frame.size() > whole_max_; }

private:
    bool push_to(std::deque<std::string>& lane, std::string frame) {
        if (failed_) return false;
        lane.push_back(std::move(frame));
        return true;
    }

    std::deque<std::string> control_;
    std::deque<std::string> data_;
    std::deque<std::string>* lane_ = &data_;  // the lane of the write in progress, or of the last
    std::size_t in_write_ = 0;  // frames at the front of *lane_ that belong to the write in progress
    std::size_t piece_size_ = 0;
    std::size_t whole_max_ = 0;
    std::size_t offset_ = 0;  // bytes of data_.front() written in pieces so far
    std::size_t data_ahead_ = 0;  // data frames queued before the oldest control frame waiting
    bool piece_ = false;       // the write in progress is a piece
    bool piece_last_ = false;  // ... the last of its frame
    bool failed_ = false;
};

}  // namespace rpclb::detail
