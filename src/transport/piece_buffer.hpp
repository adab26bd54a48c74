// What a connection reads into, and the pieces of a large frame it joins (internal, sans-I/O).
#pragma once

#include <rpclb/detail/wire.hpp>

#include <boost/asio/buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rpclb::detail {

/// The read buffer of one connection (a dynamic buffer for Beast's reads, which append each
/// message to it) and the joiner of a frame sent in pieces (wire::piece_bytes).
///
/// Each message is read after the pieces held so far, so a piece lands where it belongs in
/// its frame: joining copies nothing. After each read the driver calls on_message():
/// - a message of frames (any message not ending with a piece byte) is message(); once
///   they are handled, done() drops it and keeps the pieces held before it;
/// - a piece is held (its trailing byte dropped); the last one makes the frame whole:
///   joined(), then done();
/// - a piece that brings the held bytes over `limit`, or a last piece with none before it,
///   is a protocol error: on_message() returns its text and the connection must end.
/// So the buffer holds at most `limit` bytes of pieces and one message beyond them.
///
/// Thread safety: none (the connection's strand).
class PieceBuffer {
public:
    using const_buffers_type = boost::asio::const_buffer;
    using mutable_buffers_type = boost::asio::mutable_buffer;

    /// `limit`: the most bytes of one frame in pieces held (the connection's read limit).
    explicit PieceBuffer(std::size_t limit) : limit_(limit) {}

    /// What on_message() found.
    enum class Kind { message, piece, joined };

    /// Classifies the message just read; throws nothing. Returns an error text (the
    /// connection must end) or an empty string.
    std::string on_message(bool pieces_allowed) {
        const std::size_t length = size_ - held_;
        const char last = length > 0 ? data_[size_ - 1] : 0;
        if (!pieces_allowed || (last != wire::piece_more && last != wire::piece_last)) {
            kind_ = Kind::message;
            return {};
        }
        --size_;  // the piece byte
        if (size_ > limit_)
            return "a frame in pieces over " + std::to_string(limit_) + " bytes (the read limit)";
        if (last == wire::piece_last && size_ == 0) return "the last piece of a frame that had no piece";
        held_ = size_;
        kind_ = last == wire::piece_last ? Kind::joined : Kind::piece;
        return {};
    }
    Kind kind() const noexcept { return kind_; }
    /// The message just read (Kind::message).
    std::string_view message() const noexcept { return {data_.get() + held_, size_ - held_}; }
    /// The frame its pieces made (Kind::joined).
    std::string_view joined() const noexcept { return {data_.get(), held_}; }
    /// Bytes of pieces held for a frame not yet whole.
    std::size_t held() const noexcept { return kind_ == Kind::joined ? 0 : held_; }
    /// Drops what on_message() found, once handled (a joined frame, or a message of frames;
    /// pieces held stay). Frees the memory of a large frame once a message a quarter of
    /// its size or less follows, so that an idle link holds a few KiB.
    void done() {
        if (kind_ == Kind::joined) held_ = 0;
        const std::size_t read = size_ - held_;
        size_ = held_;
        if (held_ == 0 && capacity_ > 8 * 1024 && read <= capacity_ / 4) {
            data_.reset();
            capacity_ = 0;
        }
        kind_ = Kind::message;
    }

    // ---- DynamicBuffer (Boost.Asio's v1 requirements), for Beast's reads ----
    std::size_t size() const noexcept { return size_; }
    std::size_t max_size() const noexcept { return 2 * limit_ + 2; }
    std::size_t capacity() const noexcept { return capacity_; }
    const_buffers_type data() const noexcept { return {data_.get(), size_}; }
    mutable_buffers_type data() noexcept { return {data_.get(), size_}; }
    /// Room for `n` more bytes after size(); std::length_error past max_size().
    mutable_buffers_type prepare(std::size_t n) {
        if (n > max_size() - size_) throw std::length_error("rpclb read buffer overflow");
        if (size_ + n > capacity_) {
            const std::size_t grown = std::min(max_size(), std::max(size_ + n, 2 * capacity_));
            auto bigger = std::make_unique_for_overwrite<char[]>(grown);
            if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
            data_ = std::move(bigger);
            capacity_ = grown;
        }
        return {data_.get() + size_, n};
    }
    void commit(std::size_t n) noexcept { size_ += std::min(n, capacity_ - size_); }
    /// Drops the first `n` bytes; the connection never calls it (Beast's reads do not).
    void consume(std::size_t n) noexcept {
        n = std::min(n, size_);
        std::memmove(data_.get(), data_.get() + n, size_ - n);
        size_ -= n;
        held_ = n >= held_ ? 0 : held_ - n;
    }

private:
    std::unique_ptr<char[]> data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    std::size_t held_ = 0;  // bytes at the front: pieces of a frame (whole, with Kind::joined)
    std::size_t limit_;
    Kind kind_ = Kind::message;
};

}  // namespace rpclb::detail
