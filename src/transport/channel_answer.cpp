// The answers of an accepted call channel: the worker that has one writes it itself
// (doc/architecture.md, "Call channels").
#include "transport/connection.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>

#include <mutex>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;

// A call channel carries one call at a time: its dialer sends the next request only once
// it has the answer (or gave up on it, and then closes the channel: CallChannels::call).
// So while a worker runs a request that came on one, the acceptor need not read. With no
// read, no write and no close in progress nothing else uses the stream, and the strand
// lends it to the worker that brings the answer: the worker writes the answer with a
// blocking write (on a non-blocking socket: it never waits), so that the caller does not
// wait for a hand-off to the strand; the strand starts the next read after it. The strand
// takes the loan back under answer_mutex_ (so after a write in progress) before it touches
// the stream itself (write_next, fail).

void Connection::answer_later() {
    if (!accepted_channel() || ++answers_owed_ > 1) return;
    // Inside on_read, so no read is outstanding (none starts while an answer is owed);
    // lent before the request reaches the worker, which may be done before on_read is. The
    // rest of on_read touches no stream state but through write_next and fail, which take
    // the loan back first.
    if (reading_ || queue_.writing() || !queue_.idle() || close_reason_ || closed_) return;
    std::lock_guard lock(answer_mutex_);
    stream_lent_ = true;
}

void Connection::answer(std::string frame) {
    if (!accepted_channel()) return send(std::move(frame));
    if (frame.size() <= max_in_place_frame) {
        std::unique_lock lock(answer_mutex_);
        if (stream_lent_) {
            stream_lent_ = false;
            // Counted before the write, as write_next counts, so that a caller that has
            // its answer sees it counted (a failed write ends the channel anyway).
            count_written(1);
            settings_.counters->worker_answers.fetch_add(1, std::memory_order_relaxed);
            beast::error_code ec;
            ws_.visit([&](auto& ws) { ws.write(asio::buffer(frame), ec); });
            lock.unlock();
            asio::post(ws_.get_executor(), [self = shared_from_this(), ec] { self->answer_delivered(ec); });
            return;
        }
    }
    reserve(frame.size(), false);
    asio::post(ws_.get_executor(), [self = shared_from_this(), f = std::move(frame)]() mutable {
        self->queue_frame(std::move(f));
        self->answer_delivered({});
    });
}

void Connection::forgo_answer() {
    if (!accepted_channel()) return;
    asio::post(ws_.get_executor(), [self = shared_from_this()] { self->answer_delivered({}); });
}

void Connection::answer_delivered(boost::system::error_code ec) {
    // A loan no worker used (the answer came through the strand, or none came) ends here.
    take_stream_back();
    --answers_owed_;
    if (closed_) return;
    if (ec) return fail(write_failure(ec));
    if (answers_owed_ == 0 && open_ && !reading_ && !close_started_) do_read();
}

void Connection::take_stream_back() {
    std::lock_guard lock(answer_mutex_);
    stream_lent_ = false;
}

}  // namespace rpclb::detail
