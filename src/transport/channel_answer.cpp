// The answers of an accepted call channel: the worker that has one writes it itself, and
// may take the caller's next request itself (doc/architecture.md, "Call channels").
#include "transport/connection.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <poll.h>

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
//
// A worker that wrote an answer may then stay on the channel for the caller's next request
// (answer(frame, true), then follow()): leader/follower, as a blocking caller reads its own
// answer (channel_call.cpp). It holds answer_mutex_ while it waits (at most follow_window),
// so the strand, which takes that lock before it touches the stream, finds the stream its
// own again once the wait is over.

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

bool Connection::answer(std::string frame, bool stay) {
    if (!accepted_channel()) {
        send(std::move(frame));
        return false;
    }
    if (frame.size() <= max_in_place_frame) {
        std::unique_lock lock(answer_mutex_);
        if (stream_lent_) {
            // Counted before the write, as write_next counts, so that a caller that has
            // its answer sees it counted (a failed write ends the channel anyway).
            count_written(1);
            settings_.counters->worker_answers.fetch_add(1, std::memory_order_relaxed);
            beast::error_code ec;
            ws_.visit([&](auto& ws) { ws.write(asio::buffer(frame), ec); });
            if (!ec && stay && ws_.plain_socket() && following_pays_.worth_trying())
                return true;  // the loan is kept for follow()
            end_loan();
            lock.unlock();
            asio::post(ws_.get_executor(), [self = shared_from_this(), ec] { self->answer_delivered(ec); });
            return false;
        }
    }
    reserve(frame.size(), false);
    asio::post(ws_.get_executor(), [self = shared_from_this(), f = std::move(frame)]() mutable {
        self->queue_frame(std::move(f));
        self->answer_delivered({});
    });
    return false;
}

std::optional<wire::Request> Connection::follow(const std::function<bool()>& may_stay,
                                                const std::function<bool(const wire::Request&)>& may_take) {
    // The caller has its answer; a caller in a loop of blocking calls sends its next request
    // at once. Wait for it here, briefly, instead of handing the channel back to the strand,
    // which would wake the network thread to read it and then a worker to run it.
    std::unique_lock lock(answer_mutex_);
    bool came = false;
    if (stream_lent_ && !closed_) {  // else the strand took the stream back meanwhile (a close)
        auto* socket = ws_.plain_socket();
        came = socket->ahead().size() > 0;
        // Out of the reactor while this thread stays (until end_loan): the request would
        // otherwise also wake the network thread, for nothing. Staying works without.
        beast::error_code ignored;
        socket->detach(ignored);
        if (!came) {
            pollfd watch{socket->descriptor(), POLLIN, 0};
            const auto window = std::chrono::duration_cast<std::chrono::nanoseconds>(follow_window).count();
            const timespec wait{0, static_cast<long>(window)};
            came = ::ppoll(&watch, 1, &wait, nullptr) > 0;
        }
        following_pays_.learn(came);
        // The pool may have got other work during the wait: then the request is the
        // strand's, to hand to the pool in turn.
        if (came && !may_stay()) came = false;
    }
    bool read = false;  // a message was read into follow_buffer_, and it is not one request
    beast::error_code ec;
    if (came && !closed_ && take_frame() == Waiting::frame) {
        // Not into buffer_: the strand may still be in the read handler that lent the
        // stream, which empties buffer_ when it ends.
        read = true;
        follow_buffer_.clear();
        ws_.visit([&](auto& ws) { ws.read(follow_buffer_, ec); });
        if (!ec) {
            const auto data = follow_buffer_.cdata();
            const std::string_view text(static_cast<const char*>(data.data()), data.size());
            if (auto decoded = wire::decode(text, settings_.max_message_size);
                decoded && std::holds_alternative<wire::Request>(*decoded) &&
                may_take(std::get<wire::Request>(*decoded))) {
                settings_.counters->followed_requests.fetch_add(1, std::memory_order_relaxed);
                return std::move(std::get<wire::Request>(*decoded));  // the loan is kept for its answer
            }
        }
    }
    end_loan();
    lock.unlock();
    if (!read) {
        // Nothing was read: what came waits in ahead() or the socket for the strand's read.
        asio::post(ws_.get_executor(), [self = shared_from_this()] { self->answer_delivered({}); });
        return std::nullopt;
    }
    // A failed read, a message other than one request, or a request this thread may not
    // take (an inline handler's): the strand handles it as its own read would have
    // (on_read answers a bad request, serves a batch, runs an inline handler), once the
    // answer just written is counted as delivered.
    asio::post(ws_.get_executor(), [self = shared_from_this(), ec] {
        self->take_stream_back();
        --self->answers_owed_;
        if (self->closed_) return;
        if (ec) return self->fail(LinkClose::from(ec));
        // The read handler that lent the stream has ended (it ran before this, on the
        // strand), so buffer_ is empty and the message can move there.
        std::swap(self->buffer_, self->follow_buffer_);
        self->on_read(self->buffer_.size());
    });
    return std::nullopt;
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
    end_loan();
}

void Connection::end_loan() {
    stream_lent_ = false;
    // A socket a staying worker took out of the reactor goes back in before the strand
    // uses it. Should that fail, the socket is closed, and the strand's next operation on
    // it fails the connection.
    if (auto* socket = ws_.plain_socket(); socket && socket->detached()) {
        beast::error_code ec;
        socket->attach(ec);
    }
}

}  // namespace rpclb::detail
