// The calls and writes of one link, without I/O (internal, sans-I/O).
#pragma once

#include "transport/link_error.hpp"
#include "transport/write_queue.hpp"

#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// Called once with the outcome of a request sent on a link.
using ResponseHandler = std::function<void(RequestOutcome)>;

/// What one link between two nodes has in flight, as a state machine with no sockets,
/// timers or threads: the pending calls with their deadlines, the frames waiting to be
/// written and how they are coalesced into messages, and the bytes queued. Its driver
/// (Connection) feeds it events — a call started, an answer read, the deadline timer
/// fired, a write done, the link closed — and does what it returns: completions to run
/// (`Completion::run`, outside the core), the instant to arm the one deadline timer for,
/// the frames of the next write. Time is passed in, so tests drive it on a virtual clock.
///
/// Errors, as the completions carry them: a call whose deadline passes fails with
/// `request_timeout` (Failure::timeout); a call pending when the link closes fails with
/// Failure::no_connection and the close's LinkError (RequestOutcome::link). An answer is
/// handed on as it came (the rules of a call are CallMachine's).
///
/// Thread safety: reserve() and release() from any thread; everything else from one
/// thread at a time (the driver's strand).
class LinkCore {
public:
    using Clock = std::chrono::steady_clock;

    /// A call waiting for its answer.
    struct Call {
        ResponseHandler done;
        Clock::time_point deadline;
        std::string module;
        std::string function;
    };
    /// A call's outcome, to hand to its caller by run().
    struct Completion {
        ResponseHandler done;
        RequestOutcome outcome;
        void run() { done(std::move(outcome)); }
    };

    /// `max_batch_frames`, `max_batch_bytes`: the most frames, and bytes with their
    /// separators, one message may carry once batching is on (set_batching); a single
    /// frame always goes. `max_queued_bytes`: the
    /// send queue's limit (reserve).
    LinkCore(std::size_t max_batch_frames, std::size_t max_batch_bytes, std::size_t max_queued_bytes)
        : max_batch_frames_(max_batch_frames), max_batch_bytes_(max_batch_bytes), max_queued_bytes_(max_queued_bytes) {}

    // ---- calls ----
    /// Call `id` was sent (its frame pushed): it waits for its answer until its deadline.
    /// Returns the instant to arm the deadline timer for when it must be (re)armed: the
    /// deadline is earlier than the timer's; nullopt when the armed timer covers it.
    std::optional<Clock::time_point> start_call(std::uint64_t id, Call call);
    /// The answer to a call came: its completion, nullopt when the call is not pending (it
    /// timed out already: a late answer).
    std::optional<Completion> on_response(wire::Response&& response);
    /// The answer to call `id` could not be decoded: its completion
    /// (`internal_server_error`, "malformed response: " and `why`), if it is pending.
    std::optional<Completion> on_malformed_response(std::uint64_t id, std::string_view why, std::string_view peer);
    /// The deadline timer fired at `now`: the completions of the calls whose deadline has
    /// passed. Once they have run, arm the timer for next_deadline().
    std::vector<Completion> on_timer(Clock::time_point now, std::string_view peer);
    /// The earliest pending deadline, to arm the timer for (recorded as armed); nullopt
    /// when no call is pending.
    std::optional<Clock::time_point> next_deadline();
    /// The link closed for `why`: the completions of every pending call.
    std::vector<Completion> on_closed(const LinkClose& why, std::string_view peer);
    std::size_t pending() const noexcept { return calls_.size(); }

    // ---- writes ----
    /// The peer reads messages of several frames (wire::Hello::batch).
    void set_batching(bool on) noexcept { batching_ = on; }
    /// Counts `bytes` of a frame about to be queued; with `refusable`, refuses (false,
    /// nothing counted) when they would pass the limit and the queue is not empty. Any
    /// thread.
    bool reserve(std::size_t bytes, bool refusable) noexcept;
    /// Uncounts `bytes` reserved for a frame that was not queued. Any thread.
    void release(std::size_t bytes) noexcept { queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }
    /// Data frames longer than `whole_max` go in pieces of `piece_size`
    /// (WriteQueue::set_pieces); 0: none.
    void set_pieces(std::size_t piece_size, std::size_t whole_max) noexcept { queue_.set_pieces(piece_size, whole_max); }
    /// Whether `frame`, a data frame, goes in pieces.
    bool in_pieces(const std::string& frame) const noexcept { return queue_.in_pieces(frame); }
    /// Queues a reserved data frame; false (its bytes released) once the link failed.
    bool push(std::string frame);
    /// Queues a reserved control frame, which goes before the data frames
    /// (WriteQueue::push_control); false (its bytes released) once the link failed.
    bool push_control(std::string frame);
    /// Starts the next write: how many queued frames go out as one message (0: a write
    /// runs already, or nothing waits); each is at(i), or, when piece(), the write is one
    /// piece: piece_text() then piece_trailer().
    std::size_t begin_write() {
        return queue_.begin_write(batching_ ? max_batch_frames_ : 1, max_batch_bytes_);
    }
    const std::string& at(std::size_t i) const { return queue_.at(i); }
    bool piece() const noexcept { return queue_.piece(); }
    std::string_view piece_text() const { return queue_.piece_text(); }
    char piece_trailer() const noexcept { return queue_.piece_trailer(); }
    bool writing() const noexcept { return queue_.writing(); }
    /// No frame waits to be written.
    bool write_idle() const noexcept { return queue_.idle(); }
    /// The write in progress ended: its frames go, each handed to `spent(std::string&&)`
    /// (which may keep its buffer), and their bytes are released.
    template <class Spent>
    void end_write(Spent&& spent) {
        release(queue_.end_write(std::forward<Spent>(spent)));
    }
    /// The link failed: frames not being written go, and nothing queues again.
    void fail_writes() { release(queue_.fail()); }

private:
    using Deadline = std::pair<Clock::time_point, std::uint64_t>;  // (deadline, call id)
    std::optional<Call> take(std::uint64_t id);

    // One deadline timer per link, not one per call: `deadlines_` orders the pending
    // calls, and the timer is re-armed only for a deadline earlier than `armed_`. A
    // wake-up for a call that completed meanwhile just re-arms for the next.
    std::unordered_map<std::uint64_t, Call> calls_;
    std::set<Deadline> deadlines_;
    std::optional<Clock::time_point> armed_;
    WriteQueue queue_;
    const std::size_t max_batch_frames_;
    const std::size_t max_batch_bytes_;
    const std::size_t max_queued_bytes_;
    bool batching_ = false;
    std::atomic<std::size_t> queued_bytes_{0};
};

// Why a request or cast (`what`: "request", "cast") to `peer` must not be sent; each is
// checked before the frame is queued, so the caller gets the error at once.

/// `bad_request` (Failure::not_json) when `args` hold NaN or infinity, which no JSON text
/// can carry; nullopt when they do not.
std::optional<ErrorMessage> not_json(std::string_view what, const boost::json::array& args, std::string_view peer,
                                     std::string_view module, std::string_view function);
/// `bad_request` (Failure::too_large) when a frame of `size` bytes is over `max_size`.
std::optional<ErrorMessage> too_large(std::string_view what, std::size_t size, std::size_t max_size,
                                      std::string_view peer, std::string_view module, std::string_view function);
/// `service_unavailable` (Failure::overloaded, with `details.max_send_queue_bytes`): the
/// send queue is full (LinkCore::reserve refused).
ErrorMessage overloaded(std::size_t max_send_queue_bytes, std::string_view peer, std::string_view module,
                        std::string_view function);

}  // namespace rpclb::detail
