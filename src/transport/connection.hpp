// One authenticated WebSocket connection between two nodes (internal).
#pragma once

#include "transport/connection_owner.hpp"
#include "transport/frame_pool.hpp"
#include "transport/link_core.hpp"
#include "transport/link_error.hpp"
#include "transport/link_settings.hpp"
#include "transport/mesh_stream.hpp"
#include "transport/piece_buffer.hpp"
#include "transport/stream_loan.hpp"

#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rpclb::detail {

/// A WebSocket to one peer, the I/O driver of its LinkCore: the handshakes, one read loop
/// (which joins a large frame sent in pieces, PieceBuffer), one write path (LinkCore's
/// queue: control frames first, batches, large data frames in pieces to a peer that reads
/// them; doc/explanation/control-first.md) and the deadline timer. It
/// sends no keep-alive of its own: the mesh's failure detector probes the peer over it.
/// Its state changes and its I/O run on its strand; the public members
/// are safe from any thread. On an accepted call channel a worker may write one answer
/// itself while the strand has lent it the stream (answer_later).
class Connection : public std::enable_shared_from_this<Connection> {
public:
    using Executor = MeshStream::Executor;
    /// The socket type: its executor is the connection's strand, typed (not
    /// any_io_executor), so that each operation skips the type-erased executor's copies.
    using Socket = MeshStream::Socket;

    /// An accepted socket (this side is the acceptor). Its executor must be a strand of
    /// an io_context (as `async_accept(make_strand(ioc), ...)` gives); it becomes the
    /// connection's strand.
    Connection(Socket socket, ConnectionOwner& owner,
               const ConnectionSettings& settings);
    /// A connection to dial at "host:port" (this side is the dialer).
    Connection(Executor executor, std::string target, ConnectionOwner& owner,
               const ConnectionSettings& settings);

    /// Starts the WebSocket handshake (accept or dial) then the cookie handshake.
    void start();

    /// Queues a frame's text. Dropped after close.
    void send(std::string frame);
    /// Queues the text of a control frame (a probe, an ack, a membership frame): it goes
    /// out before the data frames queued (requests, answers, casts, bye), and between two
    /// pieces of a large one (WriteQueue). Dropped after close. Any thread.
    void send_control(std::string frame);

    /// An empty buffer to encode the next frame for this connection into: the memory of
    /// a large frame already written, when one is kept (FramePool: mesh links only,
    /// trimmed at the mesh's trim ticks), else a new string. Thread safety: any thread.
    std::string spare_buffer() { return spares_.take(); }

    /// Queues a cast (no answer). Errors: `bad_request` (Failure::too_large) when its frame
    /// is over the size limit; `service_unavailable` (Failure::overloaded) when the send
    /// queue is full; `service_unavailable` (Failure::no_connection, `details.reason` "not
    /// connected") once the connection has closed.
    Result<void> cast(wire::Cast cast);

    /// Sends a request and completes `done` with its response, `request_timeout` at
    /// `deadline` (the request carries the time left: wire_timeout_ms), or `service_unavailable` when the connection closes first or, at once,
    /// when the send queue is full (Failure::overloaded). A request refused unsent because
    /// the connection had closed or the peer had said bye fails with Failure::no_connection
    /// and LinkError::not_connected (RequestOutcome::never_sent()); one that was queued and
    /// then lost its connection fails with the close's LinkError. Either way
    /// `details.reason` is that LinkError's text. Any thread. Returns the request's id
    /// (for cancel_request), 0 when it failed at once.
    std::uint64_t request(wire::Request request, std::chrono::steady_clock::time_point deadline,
                          ResponseHandler done);
    /// Tells the peer this node gave up request `id` ("cancel"), when the peer reads
    /// cancels and the link is open; `done` of the request still runs with its answer (the
    /// peer answers one it did not start at once). Any thread.
    void cancel_request(std::uint64_t id);

    /// On the strand, while the frame of a request this connection delivered
    /// (ConnectionOwner::on_frame) is handled: its answer will come from another thread,
    /// through answer() or, when there is none, forgo_answer(). On an accepted plain call
    /// channel the connection then reads nothing more until it has come (its dialer sends
    /// one call at a time) and may lend that thread the stream (StreamLoan). Elsewhere it
    /// does nothing.
    void answer_later();
    /// Sends the answer promised by answer_later(). Any thread. Written right here when
    /// the stream was lent and the frame is at most max_lent_write bytes (the socket is
    /// non-blocking: a full buffer fails the channel, LinkError::peer_not_reading, rather
    /// than waiting); else queued as send() does.
    void answer(std::string frame);
    /// No answer will come for what answer_later() promised (the request was not run).
    void forgo_answer();
    /// The largest answer a worker writes itself on a lent stream: one that fits the
    /// socket buffers of a peer that reads.
    static constexpr std::size_t max_lent_write = 8 * 1024;

    /// Closes the connection (idempotent; any thread) once what is queued is written: the
    /// close reports `why` (ConnectionOwner::on_closed, the calls it fails) and logs
    /// `detail`.
    void close(LinkError why, std::string detail = {});
    /// Ends the connection now, without the close handshake: pending requests fail at
    /// once with `why` (idempotent; any thread). `detail` is for logs.
    void abort(LinkError why, std::string detail = {});

    /// An accepted call channel (the dialer's wire::Hello::channel) rather than a mesh
    /// link: it carries only requests and their answers, and is not probed.
    /// Meaningful once established.
    bool channel() const noexcept { return channel_.load(); }
    /// The peer accepts call channels (wire::Hello::channels); meaningful once established.
    bool peer_accepts_channels() const noexcept { return handshake_.peer_channels(); }
    /// The peer reads "cancel" frames (wire::Hello::cancel); meaningful once established.
    bool peer_accepts_cancel() const noexcept { return handshake_.peer_cancel(); }

    Role role() const noexcept { return handshake_.role(); }
    /// The peer; meaningful once established.
    const wire::PeerInfo& peer() const noexcept { return handshake_.peer(); }
    /// The dialer's handshake nonce (see Handshake::dialer_nonce).
    const std::string& dialer_nonce() const noexcept { return handshake_.dialer_nonce(); }
    /// The "host:port" dialled, empty for an accepted connection.
    const std::string& target() const noexcept { return target_; }
    /// An accepted connection's peer as "ADDRESS:PORT" (IPv6 in brackets); empty for a
    /// dialled one or when the socket could not tell.
    const std::string& remote() const noexcept { return remote_; }
    /// Who is at the other end, for logs: the "host:port" dialled, or "an incoming peer
    /// (ADDRESS:PORT)".
    std::string describe_peer() const;
    LinkState state() const noexcept { return state_.load(); }
    /// The cookie handshake succeeded (the connection may have closed since).
    bool established() const noexcept { return established_.load(); }
    /// Sends a WebSocket ping carrying `seq` (RFC 6455 §5.5.2), which goes out between
    /// the fragments of a large message and which the peer's WebSocket answers by itself;
    /// its pong calls the owner's on_probe_answered. Pings queue behind one in flight
    /// (Beast allows one). Any thread.
    void probe(std::uint64_t seq);
    /// Frees the large-frame buffers kept when none was used since the last call (the
    /// mesh calls it every few seconds; FramePool::trim). Any thread.
    void trim_spares() { spares_.trim(); }
    bool closed() const noexcept { return state() == LinkState::closed; }

    /// The peer said "bye" (it is stopping): no new request may be sent here.
    bool going_away() const noexcept { return going_away_.load(); }
    void set_going_away() noexcept { going_away_.store(true); }
    /// This side has sent its "bye"; returns false when it had already.
    bool mark_bye_sent() noexcept { return !bye_sent_.exchange(true); }
    /// The peer answered this side's "bye" (wire::Bye::reply): it sends nothing new here,
    /// and still takes this side's requests until this side closes.
    bool peer_quiet() const noexcept { return peer_quiet_.load(); }
    void set_peer_quiet() noexcept { peer_quiet_.store(true); }

private:
    using Clock = std::chrono::steady_clock;
    using Call = LinkCore::Call;

    /// On the strand: registers the request's deadline and queues its frame.
    void start_request(std::uint64_t id, std::string frame, Call call);

    /// The close of a failed write.
    static LinkClose write_failure(const boost::system::error_code& ec) { return LinkClose::from(ec, "write"); }
    /// On the strand: an answer promised by answer_later() went out (`ec`: how a lent
    /// write ended) or was forgone; reads resume once none is owed.
    void answer_delivered(boost::system::error_code ec);
    /// Counts a write of `count` frames in one message into WireCounters.
    void count_written(std::size_t count) noexcept {
        settings_.counters->frames_sent.fetch_add(count, std::memory_order_relaxed);
        settings_.counters->messages_sent.fetch_add(1, std::memory_order_relaxed);
    }

    void configure();
    /// Once established with a peer that reads pieces, on a mesh link: large data frames
    /// go in pieces.
    void send_in_pieces();
    /// From the first data frame that goes in pieces on: the kernel holds little unsent.
    void hold_little_unsent();
    /// A TLS failure (see ConnectionOwner::on_tls_failed): reports it, then fails.
    void tls_fail(const std::string& reason);
    void on_websocket_open();
    void do_read();
    void on_read(std::size_t bytes);
    /// Handles one frame; returns why the connection must end (a bad handshake frame:
    /// LinkError::handshake_failed), or an empty string.
    std::string on_frame_text(std::string_view text);
    void handle_step(Handshake::Step step);
    void write_next();
    /// Queues a frame whose bytes are reserved (see reserve) on the strand, on the control
    /// lane when `control`; releases them when the connection has closed.
    void enqueue(std::string frame, bool control = false);
    /// On the strand: queues a reserved frame and writes it when it can (released instead
    /// when the connection has closed).
    void queue_frame(std::string frame, bool control);
    /// Checks an encoded request or cast (`what`) of `size` bytes before it is queued:
    /// too_large(), or the send queue full (overloaded(), counted in WireCounters). nullopt
    /// when it may go; its bytes are then reserved (LinkCore::reserve). Any thread.
    std::optional<ErrorMessage> admit(std::string_view what, std::size_t size, std::string_view module,
                                      std::string_view function);
    /// The buffers of a write of `count` queued frames: the frames separated by
    /// wire::batch_separator (one message).
    const std::vector<boost::asio::const_buffer>& batch_buffers(std::size_t count);
    void on_written(boost::system::error_code ec);
    void start_close();
    /// Acceptor: the dialer's proof failed; close with cookie_refused_close_reason.
    void refuse_cookie(const std::string& reason);
    /// Ends the connection for `reason` (the first one given wins): fails its pending
    /// requests, then tells the owner.
    void fail(const LinkClose& reason);
    void arm_deadline(Clock::time_point deadline);
    void on_deadline();
    /// Sends a due load pong, or else the first of probes_, unless a ping or pong is in
    /// flight (Beast allows one).
    void ping_next();
    /// A pong that is not a probe's answer: the peer's load report, if it is one.
    void on_load_pong(std::string_view payload);

    // The TLS credentials this connection was made with (null: plain TCP): its stream
    // refers to them, so they live as long as it does, whatever reloads come meanwhile.
    std::shared_ptr<boost::asio::ssl::context> tls_context_;
    MeshStream ws_;
    ConnectionOwner& owner_;
    const ConnectionSettings& settings_;
    std::string target_;
    std::string remote_;  // accepted: the peer's ADDRESS:PORT, for logs
    Handshake handshake_;
    PieceBuffer in_;  // what reads append to: a message, after the pieces of a frame held
    LinkCore core_;  // pending calls, deadlines, write queue
    FramePool spares_;  // buffers of large frames written, for the next ones
    std::vector<boost::asio::const_buffer> write_buffers_;  // the write in progress's, when batched
    char piece_trailer_ = 0;  // the byte after the piece being written
    // The frames of a read are being handled: what they queue (answers of inline handlers,
    // requests of inline completions) is written together once the last is handled.
    bool handling_read_ = false;
    std::optional<LinkClose> close_reason_;  // saying_bye: why close() was called
    bool close_started_ = false;             // saying_bye: the WebSocket close is under way
    bool refusing_cookie_ = false;  // acceptor: the close says cookie_refused_close_reason
    boost::asio::steady_timer handshake_timer_;
    boost::asio::steady_timer deadline_timer_;
    std::vector<std::uint64_t> probes_;  // probe seqs to send as pings, oldest first (strand)
    bool little_unsent_ = false;         // TCP_NOTSENT_LOWAT is set (strand)
    bool pinging_ = false;               // a ping or load pong is being written (strand)
    bool load_pong_due_ = false;         // a probe's ping came: report this node's load (strand)
    // The peer's load record (NodeLoads), from the handshake on; written on the strand.
    std::shared_ptr<NodeLoad> peer_load_;
    StreamLoan loan_;  // accepted call channel: answers owed, and the stream lent for them
    std::atomic<std::uint64_t> next_id_{1};
    std::atomic<LinkState> state_{LinkState::connecting};  // written on the strand only
    std::atomic<bool> established_{false};
    std::atomic<bool> channel_{false};
    std::atomic<bool> going_away_{false};
    std::atomic<bool> bye_sent_{false};
    std::atomic<bool> peer_quiet_{false};
};

}  // namespace rpclb::detail
