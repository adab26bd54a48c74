// The mesh wire protocol: one Boost.JSON object per WebSocket text frame.
//
// Every frame is a JSON object with a string member "t" naming its type. This header is
// the codec only (sans-I/O): the connection code reads a frame's text, decodes it here,
// and encodes replies here.
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/trace.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/system/result.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rpclb::detail::wire {

/// Protocol version carried in Hello; peers with another version are refused.
inline constexpr int protocol_version = 1;

/// Default maximum size of one frame (16 MiB).
inline constexpr std::size_t default_max_message_size = 16u * 1024u * 1024u;

/// A node as peers describe it. `listen` is "host:port", empty for a client node.
struct PeerInfo {
    std::string node;         ///< "short@host"
    std::string incarnation;  ///< random id drawn when the node started
    std::string listen;       ///< "host:port" or "" (client nodes have no listener)
    bool client = false;      ///< a client (hidden) node: hosts no group members
    friend bool operator==(const PeerInfo&, const PeerInfo&) = default;
};

/// "hello": {"t","v","node","inc","listen","client","nonce"[,"batch"][,"channels"][,"channel"][,"cancel"][,"pieces"]}. Sent first by the
/// dialer and answered by the acceptor; neither carries a proof (a "proof" member, as
/// older versions sent, is ignored like any unknown member).
struct Hello {
    int version = protocol_version;
    PeerInfo peer;
    std::string nonce;  ///< hex, fresh per connection
    /// "batch" (optional, default false): the sender reads WebSocket messages that hold
    /// several frames separated by '\n' (see `batch_separator`). A connection's frames
    /// are batched only towards a peer whose Hello said so, so a peer without batching
    /// still gets one frame per message.
    bool batch = false;
    /// "channels" (optional, default false): the sender accepts call channels, the extra
    /// connections on which a blocking caller does its own I/O (doc/architecture.md
    /// "Call channels"). A node opens channels only to a peer whose Hello said so.
    bool channels = false;
    /// "channel" (optional, default false; a dialer's Hello only): this connection is a
    /// call channel, not the pair's mesh link: it carries requests and their responses
    /// only, and lives while the pair's mesh link does.
    bool channel = false;
    /// "cancel" (optional, default false): the sender reads "cancel" frames. A node sends
    /// them only to a peer whose Hello said so.
    bool cancel = false;
    /// "pieces" (optional, default false): the sender reads a large frame sent in pieces
    /// (see `piece_bytes`). A node sends pieces only to a peer whose Hello said so.
    bool pieces = false;
};

/// Size of one piece of a large frame on a mesh link. Towards a peer that reads pieces
/// (Hello::pieces), a frame longer than `pieced_above` goes as several WebSocket messages,
/// each at most this many bytes of the frame's text (cut at any byte) followed by one byte:
/// `piece_more`, or `piece_last` on the frame's last piece. Messages of the link's other
/// frames may come between two pieces, never a piece of another frame. A reader
/// joins the pieces in order into one frame and holds at most its read limit of them; a
/// piece stream over that is a protocol error that ends the link. The trailing byte tells
/// a piece from a frame: a frame is JSON text, which never ends with a control character.
/// doc/explanation/control-first.md says why.
inline constexpr std::size_t piece_bytes = 32 * 1024;
/// Towards such a peer, only a frame longer than this goes in pieces, and a batch of frames
/// is at most this long: a frame of a 64 KiB argument still goes whole (its pieces would
/// cost three writes where one does), and a control frame waits behind at most this much.
inline constexpr std::size_t pieced_above = 3 * piece_bytes;
/// The last byte of a piece that more pieces of the same frame follow.
inline constexpr char piece_more = '\x01';
/// The last byte of a frame's last piece.
inline constexpr char piece_last = '\x02';

/// Separates the frames of a batched message. Encoded frames are compact JSON, which
/// never holds a raw newline (one inside a string is escaped).
inline constexpr char batch_separator = '\n';

/// Largest batched message, in bytes, separators included. A frame bigger than this (up
/// to the size limit) travels alone; a reader accepts messages of this size whatever its
/// own size limit, so peers with different limits still take each other's batches.
inline constexpr std::size_t max_batch_bytes = 1u << 20;

/// "auth": {"t","proof"} — the dialer's proof (hex HMAC-SHA256).
struct Auth {
    std::string proof;
};

/// "ready": {"t","proof"} — the acceptor accepted the dialer's proof; carries the
/// acceptor's own proof (hex HMAC-SHA256).
struct Ready {
    std::string proof;
};

/// "nodes": {"t","nodes":[PeerInfo...]} — gossip of the nodes the sender knows.
struct Nodes {
    std::vector<PeerInfo> nodes;
};

/// "gsync": {"t","groups":[{"group","meta"}...]} — every group the sender is a member of.
struct GroupSync {
    std::vector<std::pair<std::string, boost::json::object>> groups;
};

/// "gjoin": {"t","group","meta"} — the sender joined `group`; `meta` is what it announces
/// (a balancer's {"algorithm","algorithm_opts"}).
struct GroupJoin {
    std::string group;
    boost::json::object meta;
};

/// "gleave": {"t","group"} — the sender left `group`.
struct GroupLeave {
    std::string group;
};

/// How a request's "tp" member read (Request::trace_read).
enum class TraceRead : std::uint8_t {
    absent,     ///< no "tp": a peer that sends no trace context
    valid,      ///< a traceparent parse_traceparent() accepts
    malformed,  ///< present but not one (not a string, too long, wrong version, ...)
};

/// Longest "tp" text read as a traceparent: a later version may append fields, but no
/// more than this is kept or parsed.
inline constexpr std::size_t max_traceparent_text = 256;

/// "req": {"t","id","m","f","a"[,"lb"][,"to"][,"tp"[,"ts"]]} — call `m.f(a...)` and
/// answer with "res".
struct Request {
    std::uint64_t id = 0;
    std::string module;
    std::string function;
    boost::json::array args;
    std::string load_balancer;  ///< empty when the call was not load-balanced
    /// "to": the caller's timeout in milliseconds, as it sent the request (absent: none).
    /// The receiver does not start a handler after that long (gRPC's grpc-timeout).
    std::optional<std::uint64_t> timeout_ms = std::nullopt;
    /// "tp" (optional): the W3C traceparent of the caller's attempt (W3C Trace Context
    /// §3.2), written as version 00 when `trace_read` is `valid`. A malformed "tp" does
    /// not make the frame malformed: `trace_read` says so and the receiver starts a new
    /// trace. A peer that sends none is served as the start of a new trace too.
    TraceParent trace{};
    TraceRead trace_read = TraceRead::absent;
    /// "ts" (optional, only with a valid "tp"): the W3C tracestate, at most
    /// max_tracestate_size bytes; a longer or non-string one is dropped.
    std::string tracestate{};
};

/// "cast": {"t","m","f","a"[,"lb"][,"tp"[,"ts"]]} — like Request but unanswered.
struct Cast {
    std::string module;
    std::string function;
    boost::json::array args;
    std::string load_balancer;
    /// "tp" and "ts": the caster's trace context, read and written as Request's.
    TraceParent trace{};
    TraceRead trace_read = TraceRead::absent;
    std::string tracestate{};
};

/// A node's load as its answers carry it (rpclb::LoadReport says what each field means).
/// On the wire, the optional member "ld" of a "res" frame: `[busy, queue]` or
/// `[busy, queue, application]`, busy an integer in [0, 1000] (thousandths of the worker
/// pool busy), queue an integer in [0, 2^32), application a number in (0, 1e9], left out
/// when 0 (none set).
struct Load {
    std::uint32_t busy_permille = 0;
    std::uint32_t queue = 0;
    double application = 0.0;
    friend bool operator==(const Load&, const Load&) = default;
};

/// Largest Load::application accepted.
inline constexpr double max_application_load = 1e9;

/// Why `v`, the "ld" member of a frame, is not a Load, or nullopt when it is one (then
/// stored in `out`).
std::optional<std::string> read_load(const boost::json::value& v, Load& out);

/// "res": {"t","id","ok":value[,"ld"]} or {"t","id","err":ErrorMessage-json[,"ld"]}.
struct Response {
    std::uint64_t id = 0;
    CallResult result;
    /// "ld" (optional): the answering node's load when it answered. A peer of an earlier
    /// version sends none. A malformed "ld" does not make the frame malformed: `load` stays
    /// empty and `load_problem` says what was wrong (the receiver takes the node's load as
    /// unknown).
    std::optional<Load> load = std::nullopt;
    std::string load_problem = {};
};

/// The payload of the unsolicited WebSocket pong (RFC 6455 §5.5.3) a node sends next to
/// the pong that answers a probe's ping: "load BUSY QUEUE[ APPLICATION]", numbers as in
/// Load. A node of an earlier version ignores a pong it did not ask for.
std::string encode_load_pong(const Load& load);
/// A pong's payload read as encode_load_pong writes it: nullopt when the payload is not a
/// load pong at all (no "load " prefix); otherwise the Load or why it is malformed.
std::optional<boost::system::result<Load, std::string>> decode_load_pong(std::string_view payload);

/// "bye": {"t"[,"reply"]} — the sender is stopping: it has left its groups and drained its
/// balancers. The receiver sends no new request on this connection and answers with a
/// "bye" with "reply": true, which says only that it will send nothing new: the stopping
/// node may still send it requests (its handlers' own calls) until it closes. Once the
/// stopping node has every answer (and has served what arrived before them) it closes.
/// This is HTTP/2's GOAWAY (RFC 9113 §6.8) for the mesh: no request is ever lost in the
/// close. A receiver whose own stop has begun answers with a plain "bye" instead, and
/// then neither side sends the other anything new. (A node of an earlier version ignores "reply" and takes every
/// "bye" as the sender's stop.)
struct Bye {
    bool reply = false;
};

/// What a "probe" frame asks or answers (doc/explanation/failure-detection.md).
enum class ProbeKind {
    ping,      ///< "ping": answer with "ack" and the same seq
    ping_req,  ///< "ping_req": ping `node` on the sender's behalf; "ack" (or "nack") with this seq
    ack,       ///< "ack": the ping (or the indirect ping) with this seq was answered
    nack,      ///< "nack": the indirect ping with this seq got no answer in time
};

/// "probe": {"t","k","seq"[,"node"]} — the failure detector's ping, indirect ping and
/// their answers. `node` is set for "ping_req" only.
struct Probe {
    ProbeKind kind = ProbeKind::ping;
    std::uint64_t seq = 0;
    std::string node;
};

/// What a "member" frame says of a member.
enum class MemberHealth {
    alive,    ///< "alive": it answers (a member says so of itself to refute a suspicion)
    suspect,  ///< "suspect": a probe of it went unanswered
    dead,     ///< "dead": it stayed suspected for the suspicion timeout; drop its link
};

/// "member": {"t","state","node","inc","v"} — what the sender's failure detector says of
/// `node`'s incarnation `inc` at version `v`. A member raises its version to refute a
/// suspicion; news with a lower version than the receiver's is stale and ignored.
struct MemberState {
    MemberHealth state = MemberHealth::alive;
    std::string node;
    std::string incarnation;
    std::uint64_t version = 0;
};

/// "cancel": {"t","id"} — the caller gave up request `id` before its deadline (it was
/// cancelled, or another attempt of the call answered first). The receiver does not start
/// it if it has not, answering `request_timeout` ("not run: the caller cancelled it"), and
/// a running handler sees call_cancelled(); an unknown id is ignored.
struct Cancel {
    std::uint64_t id = 0;
};

using Frame = std::variant<Hello, Auth, Ready, Nodes, GroupSync, GroupJoin, GroupLeave,
                           Request, Cast, Response, Bye, Probe, MemberState, Cancel>;

/// Why a frame was refused.
enum class DecodeErrorKind {
    too_large,     ///< over the size limit; the text was not parsed
    bad_json,      ///< not valid JSON, or not a JSON object
    bad_shape,     ///< a known type with missing or mistyped members
    unknown_type,  ///< "t" missing, not a string, or not a known type
};

/// A decoding failure. `request_id` is set when the frame was a "req" whose id could be
/// read, so the receiver can answer that call with `bad_request`.
struct DecodeError {
    DecodeErrorKind kind;
    std::string message;  ///< human-readable, names the type and member at fault
    std::optional<std::uint64_t> request_id;
};

/// The name of a DecodeErrorKind ("too_large", ...).
std::string_view to_string(DecodeErrorKind kind) noexcept;

/// Decodes one frame's text. Never throws.
///
/// The size is checked before parsing. Members the type doesn't define are ignored (room
/// for later versions); a "res" must hold exactly one of "ok" and "err". bad_shape
/// messages read `"req" frame: member "m" must be a string (got an integer)` or
/// `... (missing)`; members of objects inside arrays are named like "nodes[1].inc".
/// Boost.JSON's default parse limits apply (nesting depth 32).
boost::system::result<Frame, DecodeError> decode(std::string_view text,
                                                 std::size_t max_size = default_max_message_size);

/// The id of a "req" or "res" frame (`type`) read from the frame's head alone, as this
/// codec writes it (`{"t":"req","id":N,...`), for a frame too large or too malformed to
/// decode: its call can then be answered or failed instead of waiting for its deadline.
/// nullopt when the head is not of that form.
std::optional<std::uint64_t> peek_frame_id(std::string_view text, std::string_view type) noexcept;

/// Encodes a frame as compact JSON text. An empty `load_balancer` is left out.
std::string encode(const Frame& frame);
/// The same for the frames of the call path, without building a Frame (which would copy
/// the arguments or the result), written into `buffer` (emptied first; its capacity is
/// used and kept), so that a connection can reuse the memory of frames it has written
/// (FramePool).
std::string encode(const Request& frame, std::string buffer = {});
std::string encode(const Cast& frame, std::string buffer = {});
std::string encode(const Response& frame, std::string buffer = {});

/// The "t" value of a frame ("hello", "req", ...).
std::string_view type_name(const Frame& frame) noexcept;

[[noreturn]] void throw_exception_from_error(const DecodeError& e,
                                             const boost::source_location& loc);

}  // namespace rpclb::detail::wire
