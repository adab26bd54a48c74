#include "transport/connection.hpp"

#include "transport/link_open.hpp"

#include <rpclb/detail/deadline.hpp>
#include <rpclb/detail/host_port.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket/stream_base.hpp>

#include <algorithm>
#include <array>
#include <charconv>

#include <netinet/in.h>
#include <netinet/tcp.h>

namespace rpclb::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;
using tcp = asio::ip::tcp;

namespace {
// The unsent bytes the kernel holds for a link that sends in pieces (TCP_NOTSENT_LOWAT).
constexpr std::size_t unsent_limit = 16 * 1024;
// A probe's ping payload: this prefix and the probe's seq; the pong echoes it.
constexpr std::string_view probe_prefix = "probe ";
// This node ended the connection (it is stopping, it gave the connection up, or its
// handshake timer ran out): its close says nothing about the peer or its cookie.
bool closed_by_this_side(LinkError why) {
    return why == LinkError::stopping || why == LinkError::refused || why == LinkError::channel_closed ||
           why == LinkError::handshake_timed_out;
}

// Senders check the size limit first, so an oversize call fails at its caller with a
// clear error; the receiver checks again (wire::decode) and Beast caps what is read.
// Up to twice the limit is read so that a request a peer with a larger limit sent can
// still be answered with bad_request; beyond that the connection is closed.
// Batched messages (wire::max_batch_bytes) are read whatever the limit; each of their
// frames is still held to it.
std::size_t established_message_max(const ConnectionSettings& settings) {
    return std::max(settings.max_message_size * 2, wire::max_batch_bytes);
}

LinkCore make_core(const ConnectionSettings& settings) {
    return LinkCore(settings.max_batch_frames, std::min(settings.max_message_size, wire::max_batch_bytes),
                    settings.max_send_queue_bytes);
}
}  // namespace

Connection::Connection(Socket socket, ConnectionOwner& owner, const ConnectionSettings& settings)
    : tls_context_(settings.tls ? settings.tls->current() : nullptr),
      ws_(std::move(socket), tls_context_.get()),
      owner_(owner),
      settings_(settings),
      handshake_(Role::acceptor, settings.local, settings.cookie, settings.max_batch_frames > 1, false,
                 settings.accept_channels),
      in_(established_message_max(settings)),
      core_(make_core(settings)),
      handshake_timer_(ws_.get_executor()),
      deadline_timer_(ws_.get_executor()) {
    beast::error_code ec;
    const auto remote = ws_.socket().remote_endpoint(ec);
    if (!ec) remote_ = to_host_port(remote);
}

Connection::Connection(Executor executor, std::string target, ConnectionOwner& owner,
                       const ConnectionSettings& settings)
    : tls_context_(settings.tls ? settings.tls->current() : nullptr),
      ws_(executor, tls_context_.get()),
      owner_(owner),
      settings_(settings),
      target_(std::move(target)),
      handshake_(Role::dialer, settings.local, settings.cookie, settings.max_batch_frames > 1, false,
                 settings.accept_channels),
      in_(established_message_max(settings)),
      core_(make_core(settings)),
      handshake_timer_(ws_.get_executor()),
      deadline_timer_(ws_.get_executor()) {}

void Connection::configure() {
    configure_stream(ws_, settings_.handshake_timeout);
    ws_.visit([&](auto& ws) {
        // Runs inside this connection's reads, which hold a reference to it.
        ws.control_callback([this](ws::frame_type kind, beast::string_view payload) {
            std::uint64_t seq = 0;
            const auto* end = payload.data() + payload.size();
            if (kind == ws::frame_type::pong && payload.starts_with(probe_prefix) &&
                std::from_chars(payload.data() + probe_prefix.size(), end, seq).ptr == end)
                owner_.on_probe_answered(shared_from_this(), seq);
            else if (kind == ws::frame_type::pong && peer_load_)
                on_load_pong(payload);
            else if (kind == ws::frame_type::ping && established_ && payload.starts_with(probe_prefix))
                // Beast answers the ping itself; the load goes in a pong of its own, sent
                // once this read is done (the stream takes no new operation inside it).
                asio::post(ws_.get_executor(), [self = shared_from_this()] {
                    self->load_pong_due_ = true;
                    self->ping_next();
                });
        });
    });
}

std::string Connection::describe_peer() const {
    if (!target_.empty()) return target_;
    return remote_.empty() ? std::string("an incoming peer") : "an incoming peer (" + remote_ + ")";
}

void Connection::start() {
    auto self = shared_from_this();
    handshake_timer_.expires_after(settings_.handshake_timeout);
    handshake_timer_.async_wait([self](beast::error_code ec) {
        if (!ec && !self->established_) self->fail({LinkError::handshake_timed_out});
    });
    asio::dispatch(ws_.get_executor(), [self] {
        self->configure();
        auto opened = [self](std::optional<OpenFailure> failure) {
            if (!failure) return self->on_websocket_open();
            if (failure->tls_problem) return self->tls_fail(*failure->tls_problem);
            self->fail(failure->close);
        };
        if (self->role() == Role::acceptor)
            open_accepted(self->ws_, std::move(opened));
        else
            open_dialled(self->ws_, self->target_, std::move(opened));
    });
}

void Connection::tls_fail(const std::string& reason) {
    if (closed()) return;
    owner_.on_tls_failed(shared_from_this(), reason);
    fail({LinkError::tls_failed, {}, "TLS handshake: " + reason});
}

void Connection::on_websocket_open() {
    if (closed()) return;  // failed (the handshake timer) while the open's completion waited
    state_ = LinkState::handshaking;
    handle_step(handshake_.start());
    do_read();
    write_next();
}

void Connection::do_read() {
    auto self = shared_from_this();
    ws_.visit([&](auto& ws) {
        ws.async_read(self->in_, [self](beast::error_code ec, std::size_t bytes) {
            if (ec) {
                if (ec == ws::error::message_too_big && !self->established_) {
                    self->owner_.on_oversize_before_handshake(self);
                    return self->fail(LinkClose{LinkError::too_large, ec,
                                                "a message over " + std::to_string(max_handshake_message) +
                                                    " bytes before the cookie handshake was done"});
                }
                return self->fail(read_failure(self->ws_, ec, !self->established_ && self->handshake_.awaiting_ready()));
            }
            self->on_read(bytes);
        });
    });
}

void Connection::on_read(std::size_t) {
    // A read that completed before fail() closed the socket still runs: what it brought is
    // dropped, or a late Ready would establish a connection already reported closed.
    if (closed()) return;
    // Pieces of a large frame (wire::piece_bytes) come only once established.
    if (auto problem = in_.on_message(established_); !problem.empty())
        return fail({LinkError::protocol_error, {}, "protocol error: " + problem});
    std::string failure;
    if (in_.kind() == PieceBuffer::Kind::joined) {
        handling_read_ = true;
        failure = on_frame_text(in_.joined());
        handling_read_ = false;
        write_next();
    } else if (in_.kind() == PieceBuffer::Kind::message && established_) {
        // Once established a message may hold several frames (a batch, wire::Hello::batch):
        // every frame it brought is handled before the next read, and the frames they
        // queue go out together after the last (one write instead of one per frame, when
        // inline handlers answer or inline completions start the next calls).
        auto text = in_.message();
        handling_read_ = true;
        while (failure.empty() && !closed()) {
            const auto end = text.find(wire::batch_separator);
            failure = on_frame_text(text.substr(0, end));
            if (end == std::string_view::npos) break;
            text.remove_prefix(end + 1);
        }
        handling_read_ = false;
        write_next();
    } else if (in_.kind() == PieceBuffer::Kind::message) {
        failure = on_frame_text(in_.message());
    }
    // The frames viewed in_: drop them only now, and before the next read is started
    // (which may fill it at once).
    in_.done();
    if (!failure.empty()) return fail({LinkError::handshake_failed, {}, failure});
    if (closed() || loan_.owed()) return;  // answer_delivered reads again
    do_read();
}

std::string Connection::on_frame_text(std::string_view text) {
    auto decoded = wire::decode(text, settings_.max_message_size);
    if (!decoded) {
        const auto& error = decoded.error();
        const auto request_id = error.request_id ? error.request_id : wire::peek_frame_id(text, "req");
        if (request_id && established_) {
            send(wire::encode(wire::Response{
                *request_id,
                ErrorMessage{ErrorCode::bad_request, "bad request: " + error.message,
                             boost::json::object{{"node", settings_.local.node}}}}));
        }
        if (const auto response_id = wire::peek_frame_id(text, "res"); response_id && established_) {
            if (auto done = core_.on_malformed_response(*response_id, error.message, peer().node)) done->run();
        }
        owner_.on_bad_frame(shared_from_this(), error);
        // During the handshake any bad frame ends the connection.
        return established_ ? std::string() : "malformed frame during handshake: " + error.message;
    }
    if (!established_) {
        handle_step(handshake_.on_frame(*decoded));
    } else if (auto* response = std::get_if<wire::Response>(&*decoded)) {
        if (peer_load_) note_load(*peer_load_, response->load, response->load_problem, peer().node);
        if (auto done = core_.on_response(std::move(*response))) done->run();
        // Else it timed out already: a late answer, dropped.
    } else {
        owner_.on_frame(shared_from_this(), std::move(*decoded));
    }
    return {};
}

void Connection::handle_step(Handshake::Step step) {
    for (auto& frame : step.send) send(wire::encode(frame));
    if (step.error) {
        owner_.on_handshake_failed(shared_from_this(), *step.error);
        if (step.wrong_cookie && role() == Role::acceptor) return refuse_cookie(*step.error);
        return fail({LinkError::handshake_failed, {}, *step.error});
    }
    if (step.done) {
        handshake_timer_.cancel();
        // The peer proved it holds the cookie. The next read starts after this returns, so
        // the next message is already held to the normal limit.
        ws_.visit([&](auto& ws) { ws.read_message_max(established_message_max(settings_)); });
        core_.set_batching(handshake_.peer_batch() && settings_.max_batch_frames > 1);
        channel_ = handshake_.peer_channel();
        if (channel_) configure_call_channel(ws_);
        if (!channel_ && handshake_.peer_pieces()) send_in_pieces();
        // Looked up once per link: each answer from the peer then stores its load with no
        // lock. Only an authenticated peer gets a record.
        peer_load_ = NodeLoads::instance().of(handshake_.peer().node);
        established_ = true;
        if (state() == LinkState::handshaking) state_ = LinkState::open;
        owner_.on_established(shared_from_this());
    }
}

void Connection::send_in_pieces() { core_.set_pieces(wire::piece_bytes, wire::pieced_above); }

void Connection::hold_little_unsent() {
    // The kernel takes a new write only while less than this waits in it unsent, so what
    // the queue puts first (a control frame) waits behind at most this, not behind a send
    // buffer of megabytes (doc/explanation/control-first.md). Bytes in flight don't count.
    // Set only once the link carries a frame in pieces: the limit wakes the writer more
    // often, which costs a link of smaller frames a tenth of its throughput.
    using unsent_lowat = asio::detail::socket_option::integer<IPPROTO_TCP, TCP_NOTSENT_LOWAT>;
    beast::error_code ignored;
    ws_.socket().set_option(unsent_lowat(static_cast<int>(unsent_limit)), ignored);
    little_unsent_ = true;
}

void Connection::send(std::string frame) {
    core_.reserve(frame.size(), false);  // answers are never refused
    enqueue(std::move(frame));
}

void Connection::send_control(std::string frame) {
    core_.reserve(frame.size(), false);
    enqueue(std::move(frame), true);
}

void Connection::enqueue(std::string frame, bool control) {
    asio::dispatch(ws_.get_executor(), [self = shared_from_this(), f = std::move(frame), control]() mutable {
        self->queue_frame(std::move(f), control);
    });
}

void Connection::queue_frame(std::string frame, bool control) {
    if (closed()) return core_.release(frame.size());
    if (!control && !little_unsent_ && core_.in_pieces(frame)) hold_little_unsent();
    if (control ? core_.push_control(std::move(frame)) : core_.push(std::move(frame))) write_next();
}

std::optional<ErrorMessage> Connection::admit(std::string_view what, std::size_t size, std::string_view module,
                                               std::string_view function) {
    if (auto error = too_large(what, size, settings_.max_message_size, peer().node, module, function)) return error;
    if (core_.reserve(size, true)) return std::nullopt;
    settings_.counters->overloaded.fetch_add(1, std::memory_order_relaxed);
    return overloaded(settings_.max_send_queue_bytes, peer().node, module, function);
}

void Connection::write_next() {
    const auto now = state();
    if (core_.writing() || now == LinkState::connecting || now == LinkState::closed || handling_read_) return;
    if (core_.write_idle() && now != LinkState::saying_bye) return;
    if (channel_) loan_.take_back();  // before this thread touches the stream
    if (core_.write_idle()) return start_close();
    // Frames that queued up behind the last write go out together, as one message, to a
    // peer that reads batches (never past the size limit; see LinkCore::begin_write).
    const auto count = core_.begin_write();
    // A frame in pieces counts once, with its last piece; each piece is a message.
    count_written(core_.piece() && core_.piece_trailer() != wire::piece_last ? 0 : count);
    auto done = [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_written(ec); };
    ws_.visit([&](auto& ws) {
        if (core_.piece()) {
            piece_trailer_ = core_.piece_trailer();
            const auto text = core_.piece_text();
            const std::array<asio::const_buffer, 2> piece{asio::buffer(text.data(), text.size()),
                                                          asio::buffer(&piece_trailer_, 1)};
            return ws.async_write(piece, std::move(done));
        }
        if (count == 1) return ws.async_write(asio::buffer(core_.at(0)), std::move(done));
        ws.async_write(batch_buffers(count), std::move(done));
    });
}

const std::vector<asio::const_buffer>& Connection::batch_buffers(std::size_t count) {
    static constexpr char separator[] = {wire::batch_separator};
    write_buffers_.clear();
    for (std::size_t i = 0; i < count; ++i) {
        if (i > 0) write_buffers_.push_back(asio::buffer(separator));
        write_buffers_.push_back(asio::buffer(core_.at(i)));
    }
    return write_buffers_;
}

void Connection::on_written(boost::system::error_code ec) {
    // The frames written stayed queued until now, even if fail() ran meanwhile: their
    // bytes were the write's buffers.
    // A call channel keeps none: it has no keep-alive timer to trim them, and sixteen
    // idle channels to a node would each hold one for the link's life.
    const std::size_t keep = channel_ ? 0 : FramePool::max_spares;
    core_.end_write([this, keep](std::string&& frame) {
        if (!closed()) spares_.give(std::move(frame), keep);
    });
    if (closed()) return;
    if (ec) return fail(write_failure(ec));
    write_next();
}

Result<void> Connection::cast(wire::Cast cast) {
    if (auto error = not_json("cast", cast.args, peer().node, cast.module, cast.function)) return std::move(*error);
    if (closed()) return link_failure(LinkError::not_connected, peer().node, cast.module, cast.function);
    auto frame = wire::encode(cast, spares_.take());
    if (auto error = admit("cast", frame.size(), cast.module, cast.function)) return std::move(*error);
    enqueue(std::move(frame));
    return {};
}

std::uint64_t Connection::request(wire::Request request, Clock::time_point deadline, ResponseHandler done) {
    // Encoding happens on the caller's thread, off the connection's strand.
    if (auto error = not_json("request", request.args, peer().node, request.module, request.function))
        return done(std::move(*error)), 0;
    // Closed already (the node may be stopping, its strand about to run no more), or the
    // peer said bye: fail now, unsent, rather than queue what may never be looked at.
    if (closed() || going_away()) return done(unsent(peer().node, request.module, request.function)), 0;
    const auto id = next_id_.fetch_add(1, std::memory_order_relaxed);
    request.id = id;
    // The peer starts no handler for it after this long (RpcServer::run_unless_expired).
    request.timeout_ms = wire_timeout_ms(deadline, Clock::now());
    auto frame = wire::encode(request, spares_.take());
    if (auto error = admit("request", frame.size(), request.module, request.function))
        return done(std::move(*error)), 0;
    Call call{std::move(done), deadline, std::move(request.module), std::move(request.function)};
    asio::dispatch(ws_.get_executor(),
                   [self = shared_from_this(), id, frame = std::move(frame), call = std::move(call)]() mutable {
                       self->start_request(id, std::move(frame), std::move(call));
                   });
    return id;
}

void Connection::cancel_request(std::uint64_t id) {
    if (!peer_accepts_cancel() || closed()) return;
    send(wire::encode(wire::Cancel{id}));
}

void Connection::start_request(std::uint64_t id, std::string frame, Call call) {
    // After the peer's bye (handled on this strand) nothing new goes out: the peer may
    // close once it has our answering bye, and would never read this request.
    if (closed() || going_away()) {
        core_.release(frame.size());
        return call.done(unsent(peer().node, call.module, call.function));
    }
    if (const auto arm = core_.start_call(id, std::move(call))) arm_deadline(*arm);
    if (core_.push(std::move(frame))) write_next();  // cannot fail while open
}

void Connection::arm_deadline(Clock::time_point deadline) {
    deadline_timer_.expires_at(deadline);  // cancels the previous wait (operation_aborted)
    deadline_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->on_deadline();
    });
}

void Connection::on_deadline() {
    // Completion handlers may start new calls here: the timer is re-armed after them.
    for (auto& done : core_.on_timer(Clock::now(), peer().node)) done.run();
    if (closed()) return;
    if (const auto next = core_.next_deadline()) arm_deadline(*next);
}

void Connection::answer_later() {
    if (!channel_) return;
    loan_.promise(!ws_.tls() && core_.write_idle() && !core_.writing() && state() == LinkState::open);
}

void Connection::answer(std::string frame) {
    if (channel_) {
        beast::error_code ec;
        if (loan_.write_if_lent(frame.size() <= max_lent_write,
                                [&] { ws_.visit([&](auto& ws) { ws.write(asio::buffer(frame), ec); }); })) {
            count_written(1);
            return asio::dispatch(ws_.get_executor(), [self = shared_from_this(), ec] { self->answer_delivered(ec); });
        }
        send(std::move(frame));
        return forgo_answer();
    }
    send(std::move(frame));
}

void Connection::forgo_answer() {
    if (!channel_) return;
    asio::dispatch(ws_.get_executor(), [self = shared_from_this()] { self->answer_delivered({}); });
}

void Connection::answer_delivered(beast::error_code ec) {
    const bool none_owed = loan_.delivered();
    if (closed()) return;
    if (ec) return fail(write_failure(ec));
    if (none_owed && !close_started_) do_read();
}

void Connection::close(LinkError why, std::string detail) {
    LinkClose reason{why, {}, std::move(detail)};
    asio::dispatch(ws_.get_executor(), [self = shared_from_this(), reason = std::move(reason)]() mutable {
        const auto now = self->state();
        if (now == LinkState::saying_bye || now == LinkState::closed) return;
        if (now == LinkState::connecting) return self->fail(reason);
        // Frames already queued (replies to served calls) go out before the close frame.
        self->close_reason_ = std::move(reason);
        self->state_ = LinkState::saying_bye;
        self->write_next();
    });
}

void Connection::abort(LinkError why, std::string detail) {
    LinkClose reason{why, {}, std::move(detail)};
    asio::dispatch(ws_.get_executor(), [self = shared_from_this(), reason = std::move(reason)] { self->fail(reason); });
}

void Connection::start_close() {
    if (close_started_) return;
    close_started_ = true;
    // Say goodbye politely; fail() then runs with the reason. A peer that never answers
    // the close frame is ended by the handshake timeout (Beast times the close with it).
    ws::close_reason why(ws::close_code::normal);
    if (refusing_cookie_) why = ws::close_reason(ws::close_code::policy_error, cookie_refused_close_reason);
    if (close_reason_ && close_reason_->kind == LinkError::name_taken)
        why = ws::close_reason(ws::close_code::policy_error, name_taken_close_reason);
    if (close_reason_ && close_reason_->kind == LinkError::declared_dead)
        why = ws::close_reason(ws::close_code::policy_error, declared_dead_close_reason);
    if (close_reason_ && close_reason_->kind == LinkError::refused)
        why = ws::close_reason(ws::close_code::normal, refused_close_reason);
    ws_.visit([&](auto& ws) {
        ws.async_close(why, [self = shared_from_this()](beast::error_code) { self->fail(*self->close_reason_); });
    });
}

void Connection::refuse_cookie(const std::string& reason) {
    // Nothing else is sent: the close frame (after what is queued) tells the dialer why,
    // so it stops dialling. handshake_timer_ still ends a dialer that never answers it.
    if (state() == LinkState::saying_bye || closed()) return;
    close_reason_ = LinkClose{LinkError::handshake_failed, {}, reason};
    state_ = LinkState::saying_bye;
    refusing_cookie_ = true;
    write_next();
}

void Connection::probe(std::uint64_t seq) {
    asio::dispatch(ws_.get_executor(), [self = shared_from_this(), seq] {
        if (self->state() != LinkState::open) return;
        self->probes_.push_back(seq);
        self->ping_next();
    });
}

void Connection::on_load_pong(std::string_view payload) {
    auto load = wire::decode_load_pong(payload);
    if (!load) return;  // a pong this node did not ask for, and no load report
    if (*load)
        note_load(*peer_load_, **load, {}, peer().node);
    else
        note_load(*peer_load_, std::nullopt, load->error(), peer().node);
}

void Connection::ping_next() {
    if (pinging_ || state() != LinkState::open) return;
    if (load_pong_due_) {
        load_pong_due_ = false;
        pinging_ = true;
        const auto text = wire::encode_load_pong(settings_.load->sample());
        ws_.visit([&](auto& ws) {
            ws.async_pong(ws::ping_data(text.data(), text.size()), [self = shared_from_this()](beast::error_code) {
                self->pinging_ = false;
                self->ping_next();
            });
        });
        return;
    }
    if (probes_.empty()) return;
    pinging_ = true;
    const auto text = std::string(probe_prefix) + std::to_string(probes_.front());
    probes_.erase(probes_.begin());
    ws_.visit([&](auto& ws) {
        ws.async_ping(ws::ping_data(text.data(), text.size()), [self = shared_from_this()](beast::error_code) {
            self->pinging_ = false;
            self->ping_next();
        });
    });
}

void Connection::fail(const LinkClose& reason) {
    if (state_.exchange(LinkState::closed) == LinkState::closed) return;
    if (channel_) loan_.take_back();  // before the socket closes under a lent write
    spares_.trim(true);
    handshake_timer_.cancel();
    deadline_timer_.cancel();
    beast::error_code ignored;
    ws_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.socket().close(ignored);
    core_.fail_writes();  // a write in progress keeps its frames until it completes
    if (reason.kind == LinkError::cookie_refused)
        owner_.on_cookie_refused(shared_from_this());
    else if (reason.kind == LinkError::name_taken && !(close_reason_ && close_reason_->kind == LinkError::name_taken))
        owner_.on_name_taken(shared_from_this());
    else if (reason.kind == LinkError::declared_dead &&
             !(close_reason_ && close_reason_->kind == LinkError::declared_dead))
        owner_.on_declared_dead(shared_from_this());
    else if (!established_ && handshake_.awaiting_ready() && !closed_by_this_side(reason.kind) &&
             reason.kind != LinkError::name_taken && reason.kind != LinkError::declared_dead)
        owner_.on_handshake_failed(shared_from_this(), "wrong cookie: " + peer().node +
                                                           " closed the connection after our proof "
                                                           "(its cookie differs, or it went away)");
    // The owner first (the mesh takes a lost peer out of every group and balancer), then
    // the pending calls: a caller that learns of the loss and calls again can no longer
    // pick the member whose link this was.
    owner_.on_closed(shared_from_this(), reason, established_);
    for (auto& done : core_.on_closed(reason, peer().node)) done.run();
}

}  // namespace rpclb::detail
