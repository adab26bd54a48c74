#include <rpclb/detail/wire.hpp>

#include "json_fields.hpp"
#include "transport/frame_parser.hpp"
#include "transport/json_text.hpp"
#include "transport/wire_load.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <array>
#include <exception>
#include <stdexcept>
#include <type_traits>

namespace rpclb::detail::wire {
namespace {

namespace json = boost::json;
using json_fields::describe;

using Decoded = boost::system::result<Frame, DecodeError>;

// ---- names ------------------------------------------------------------------------------

template <class T>
constexpr std::string_view frame_name = "";
template <> constexpr std::string_view frame_name<Hello> = "hello";
template <> constexpr std::string_view frame_name<Auth> = "auth";
template <> constexpr std::string_view frame_name<Ready> = "ready";
template <> constexpr std::string_view frame_name<Nodes> = "nodes";
template <> constexpr std::string_view frame_name<GroupSync> = "gsync";
template <> constexpr std::string_view frame_name<GroupJoin> = "gjoin";
template <> constexpr std::string_view frame_name<GroupLeave> = "gleave";
template <> constexpr std::string_view frame_name<Request> = "req";
template <> constexpr std::string_view frame_name<Cast> = "cast";
template <> constexpr std::string_view frame_name<Response> = "res";
template <> constexpr std::string_view frame_name<Bye> = "bye";
template <> constexpr std::string_view frame_name<Probe> = "probe";
template <> constexpr std::string_view frame_name<MemberState> = "member";
template <> constexpr std::string_view frame_name<Cancel> = "cancel";

constexpr std::array<std::string_view, 4> probe_kinds{"ping", "ping_req", "ack", "nack"};
constexpr std::array<std::string_view, 3> member_healths{"alive", "suspect", "dead"};

// ---- decoding ---------------------------------------------------------------------------

// Reads the members of one frame object (or of an object nested in it, at `path`). Every
// member read is required. The first failure is recorded in the shared `error`; later
// reads are skipped, so a decoder can read every member unconditionally and check once at
// the end. Arrays, objects and values are moved out of the parsed document, not copied.
class Members {
public:
    Members(json::object& obj, std::string_view type, std::optional<DecodeError>& error, std::string path = {})
        : obj_(obj), type_(type), error_(error), path_(std::move(path)) {}

    bool failed() const noexcept { return error_.has_value(); }

    void string(std::string_view key, std::string& out) { field(key, out, "a string"); }
    void boolean(std::string_view key, bool& out) { field(key, out, "a boolean"); }
    // Ids travel as JSON integers (json_fields::non_negative_integer).
    void uint64(std::string_view key, std::uint64_t& out) { field(key, out, "an unsigned integer"); }
    void integer(std::string_view key, int& out) { field(key, out, "an integer in the range of int", "an integer"); }
    void array(std::string_view key, json::array& out) { field(key, out, "an array"); }
    void object(std::string_view key, json::object& out) { field(key, out, "an object"); }

    // An optional boolean: absence leaves `out` as it is; a non-boolean is an error.
    void optional_boolean(std::string_view key, bool& out) {
        if (failed()) return;
        if (auto* v = obj_.if_contains(key); v && !json_fields::read(*v, out)) fail(key, "a boolean", v);
    }

    // An optional unsigned integer: absence leaves `out` empty; anything else is an error.
    void optional_uint64(std::string_view key, std::optional<std::uint64_t>& out) {
        if (failed()) return;
        auto* v = obj_.if_contains(key);
        if (!v) return;
        std::uint64_t n = 0;
        if (!json_fields::read(*v, n)) return fail(key, "an unsigned integer", v);
        out = n;
    }

    // An optional string: absence leaves `out` empty; a non-string is an error.
    void optional_string(std::string_view key, std::string& out) {
        if (failed()) return;
        if (auto* v = obj_.if_contains(key); v && !json_fields::read(*v, out)) fail(key, "a string", v);
    }

    // The array member `key` itself, for decoders that walk its elements.
    json::array* array_ref(std::string_view key) {
        if (auto* v = find(key, "an array")) {
            if (auto* a = v->if_array()) return a;
            fail(key, "an array", v);
        }
        return nullptr;
    }

    // Element `index` of the array member `key` as a nested reader, or nullopt (with the
    // error recorded) when the element is not an object.
    std::optional<Members> element(std::string_view key, std::size_t index, json::value& v) {
        auto path = json_fields::element_path(json_fields::member_path(path_, key), index);
        if (auto* o = v.if_object()) return Members(*o, type_, error_, std::move(path));
        fail_path(path, "an object", &v);
        return std::nullopt;
    }

    // The raw member, for values of any JSON type ("ok").
    json::value* raw(std::string_view key) { return failed() ? nullptr : obj_.if_contains(key); }

    // A string member that must be one of `words`: its index (0 once failed).
    template <std::size_t N>
    std::size_t word(std::string_view key, const std::array<std::string_view, N>& words) {
        std::string s;
        string(key, s);
        for (std::size_t i = 0; i < N && !failed(); ++i)
            if (words[i] == s) return i;
        fail_message("\"" + std::string(type_) + "\" frame: member \"" + std::string(key) + "\" has an unknown value \"" +
                     s.substr(0, 32) + "\"");
        return 0;
    }

    void fail_message(std::string message) {
        if (!failed())
            error_.emplace(DecodeError{DecodeErrorKind::bad_shape, std::move(message), std::nullopt});
    }

    void set_request_id(std::uint64_t id) {
        if (error_) error_->request_id = id;
    }

private:
    // Required member `key` into `out`; `expected` names the accepted values when the
    // member is of another kind, `expected_if_missing` (default: the same) when absent.
    template <class T>
    void field(std::string_view key, T& out, std::string_view expected, std::string_view expected_if_missing = {}) {
        auto* v = find(key, expected_if_missing.empty() ? expected : expected_if_missing);
        if (v && !json_fields::read(*v, out)) fail(key, expected, v);
    }

    // The member `key`, or nullptr after recording a "missing" error (or a prior error).
    json::value* find(std::string_view key, std::string_view expected) {
        if (failed()) return nullptr;
        if (auto* v = obj_.if_contains(key)) return v;
        fail(key, expected, nullptr);
        return nullptr;
    }

    void fail(std::string_view key, std::string_view expected, const json::value* got) {
        fail_path(json_fields::member_path(path_, key), expected, got);
    }

    void fail_path(std::string_view path, std::string_view expected, const json::value* got) {
        std::string message;
        message.append("\"").append(type_).append("\" frame: member \"").append(path);
        message.append("\" must be ").append(expected);
        message.append(" (").append(got ? "got " : "missing");
        if (got) message.append(describe(*got));
        message.append(")");
        fail_message(std::move(message));
    }

    json::object& obj_;
    std::string_view type_;
    std::optional<DecodeError>& error_;
    std::string path_;
};

void read_peer(Members& m, PeerInfo& p) {
    m.string("node", p.node);
    m.string("inc", p.incarnation);
    m.string("listen", p.listen);
    m.boolean("client", p.client);
}

void read(Members& m, Hello& f) {
    m.integer("v", f.version);
    read_peer(m, f.peer);
    m.string("nonce", f.nonce);
    m.optional_boolean("batch", f.batch);
    m.optional_boolean("channels", f.channels);
    m.optional_boolean("channel", f.channel);
    m.optional_boolean("cancel", f.cancel);
    m.optional_boolean("pieces", f.pieces);
}

void read(Members& m, Auth& f) { m.string("proof", f.proof); }

void read(Members& m, Ready& f) { m.string("proof", f.proof); }

void read(Members& m, Nodes& f) {
    auto* nodes = m.array_ref("nodes");
    if (!nodes) return;
    f.nodes.reserve(nodes->size());
    for (std::size_t i = 0; i < nodes->size() && !m.failed(); ++i) {
        if (auto e = m.element("nodes", i, (*nodes)[i])) read_peer(*e, f.nodes.emplace_back());
    }
}

void read(Members& m, GroupSync& f) {
    auto* groups = m.array_ref("groups");
    if (!groups) return;
    f.groups.reserve(groups->size());
    for (std::size_t i = 0; i < groups->size() && !m.failed(); ++i) {
        if (auto e = m.element("groups", i, (*groups)[i])) {
            auto& [group, meta] = f.groups.emplace_back();
            e->string("group", group);
            e->object("meta", meta);
        }
    }
}

void read(Members& m, GroupJoin& f) {
    m.string("group", f.group);
    m.object("meta", f.meta);
}

void read(Members& m, GroupLeave& f) { m.string("group", f.group); }

void read(Members& m, Request& f) {
    m.uint64("id", f.id);
    const bool id_read = !m.failed();
    m.string("m", f.module);
    m.string("f", f.function);
    m.array("a", f.args);
    m.optional_string("lb", f.load_balancer);
    m.optional_uint64("to", f.timeout_ms);
    // Lets the receiver answer a malformed call with bad_request instead of dropping it.
    if (id_read) m.set_request_id(f.id);
}

void read(Members& m, Cast& f) {
    m.string("m", f.module);
    m.string("f", f.function);
    m.array("a", f.args);
    m.optional_string("lb", f.load_balancer);
}

void read(Members& m, Bye& f) { m.optional_boolean("reply", f.reply); }

void read(Members& m, Cancel& f) { m.uint64("id", f.id); }

void read(Members& m, Probe& f) {
    f.kind = static_cast<ProbeKind>(m.word("k", probe_kinds));
    m.uint64("seq", f.seq);
    m.optional_string("node", f.node);
}

void read(Members& m, MemberState& f) {
    f.state = static_cast<MemberHealth>(m.word("state", member_healths));
    m.string("node", f.node);
    m.string("inc", f.incarnation);
    m.uint64("v", f.version);
}

// "tp" and "ts" of a Request or Cast: never a reason to refuse the frame (the receiver
// starts a new trace). parse_frame() has read a plain string "tp"; any other stays in the
// document.
template <class F>
void read_trace(Members& m, F& f, const ParsedTrace& parsed) {
    if (parsed.read != TraceRead::absent) {
        f.trace_read = parsed.read;
        f.trace = parsed.parent;
    } else if (const auto* tp = m.raw("tp")) {
        const auto* text = tp->if_string();
        const auto parent =
            text && text->size() <= max_traceparent_text ? parse_traceparent(*text) : std::optional<TraceParent>();
        f.trace_read = parent ? TraceRead::valid : TraceRead::malformed;
        if (parent) f.trace = *parent;
    }
    if (f.trace_read != TraceRead::valid) return;
    if (const auto* ts = m.raw("ts"); ts && ts->is_string() && ts->get_string().size() <= max_tracestate_size)
        f.tracestate = ts->get_string();
}

// What drop_non_finite_load() puts in place of an "ld" holding a non-finite number.
constexpr std::string_view non_finite_load = "\x01non-finite";

void read(Members& m, Response& f) {
    m.uint64("id", f.id);
    auto* ok = m.raw("ok");
    auto* err = m.raw("err");
    if (m.failed()) return;
    if (const auto* ld = m.raw("ld")) {
        Load load;
        if (ld->is_string() && ld->get_string() == non_finite_load)  // drop_non_finite_load
            f.load_problem = "holds a number too large for a double";
        else if (auto problem = read_load(*ld, load))
            f.load_problem = std::move(*problem);
        else
            f.load = load;
    }
    if ((ok == nullptr) == (err == nullptr)) {
        m.fail_message("\"res\" frame: exactly one of members \"ok\" and \"err\" must be present");
    } else if (ok) {
        f.result.emplace(std::move(*ok));  // constructed: keeps the document's storage
    } else if (auto e = ErrorMessage::from_json(*err)) {
        f.result = CallResult(boost::system::in_place_error, std::move(*e));
    } else {
        m.fail_message(
            "\"res\" frame: member \"err\" must be an object with a known string \"code\" "
            "and a string \"message\"");
    }
}

template <class T>
Decoded decode_as(json::object& obj, const ParsedTrace& trace) {
    std::optional<DecodeError> error;
    Members m(obj, frame_name<T>, error);
    T frame;
    read(m, frame);
    if constexpr (std::is_same_v<T, Request> || std::is_same_v<T, Cast>) read_trace(m, frame, trace);
    if (error) return Decoded(boost::system::in_place_error, std::move(*error));
    return Decoded(boost::system::in_place_value, std::in_place_type<T>, std::move(frame));
}

struct FrameType {
    std::string_view name;
    Decoded (*decode)(json::object&, const ParsedTrace&);
};

// One entry per Frame alternative, in variant order, so `frame_types[frame.index()]`
// names any frame.
template <std::size_t... I>
constexpr auto make_frame_types(std::index_sequence<I...>) {
    return std::array<FrameType, sizeof...(I)>{
        FrameType{frame_name<std::variant_alternative_t<I, Frame>>,
                  &decode_as<std::variant_alternative_t<I, Frame>>}...};
}

constexpr auto frame_types = make_frame_types(std::make_index_sequence<std::variant_size_v<Frame>>{});

DecodeError decode_error(DecodeErrorKind kind, std::string message) {
    return DecodeError{kind, std::move(message), std::nullopt};
}

// The head this codec writes for a frame of type `type`, up to the digits of its id
// (`{"t":"req","id":`): the text after it, or nullopt.
std::optional<std::string_view> after_head(std::string_view text, std::string_view type) noexcept {
    constexpr std::string_view open = R"({"t":")", middle = R"(","id":)";
    if (!text.starts_with(open)) return std::nullopt;
    text.remove_prefix(open.size());
    if (!text.starts_with(type)) return std::nullopt;
    text.remove_prefix(type.size());
    if (!text.starts_with(middle)) return std::nullopt;
    return text.substr(middle.size());
}

// The 1 to 19 digits that start `text` (an id below 10^19 always fits a uint64), and how
// many there were; nullopt for none or for 20 and more.
struct IdDigits {
    std::uint64_t value;
    std::size_t count;
};
std::optional<IdDigits> id_digits(std::string_view text) noexcept {
    std::size_t n = 0;
    std::uint64_t v = 0;
    for (; n < text.size() && n < 20 && text[n] >= '0' && text[n] <= '9'; ++n)
        v = v * 10 + static_cast<std::uint64_t>(text[n] - '0');
    if (n == 0 || n == 20) return std::nullopt;
    return IdDigits{v, n};
}

// A frame whose only non-finite number is in its "ld" member is read with that member
// replaced by a string saying so: a malformed load report makes the node's load unknown,
// never the frame (its answer) lost. True when that made `doc` all finite.
bool drop_non_finite_load(json::value& doc) {
    auto* obj = doc.if_object();
    if (!obj) return false;
    auto* ld = obj->if_contains("ld");
    if (!ld || json_fields::all_finite(*ld)) return false;
    *ld = non_finite_load;
    return json_fields::all_finite(doc);
}

Decoded decode_unchecked(std::string_view text, std::size_t max_size) {
    if (text.size() > max_size)
        return DecodeError{DecodeErrorKind::too_large,
                           "frame of " + std::to_string(text.size()) +
                               " bytes exceeds the limit of " + std::to_string(max_size) + " bytes",
                           peek_frame_id(text, "req")};

    boost::system::error_code ec;
    ParsedTrace trace;
    json::value doc = parse_frame(text, trace, ec);
    if (ec) return decode_error(DecodeErrorKind::bad_json, "invalid JSON: " + ec.message());
    if (!json_fields::all_finite(doc) && !drop_non_finite_load(doc))
        return decode_error(DecodeErrorKind::bad_json, "invalid JSON: a number is too large for a double");
    auto* obj = doc.if_object();
    if (!obj)
        return decode_error(DecodeErrorKind::bad_json,
                            "frame must be a JSON object (got " + std::string(describe(doc)) + ")");

    const auto* t = obj->if_contains("t");
    if (!t) return decode_error(DecodeErrorKind::unknown_type, "frame has no member \"t\"");
    const auto* type = t->if_string();
    if (!type)
        return decode_error(DecodeErrorKind::unknown_type,
                            "frame member \"t\" must be a string (got " + std::string(describe(*t)) +
                                ")");
    for (const auto& ft : frame_types)
        if (ft.name == *type) return ft.decode(*obj, trace);

    // A hostile peer controls the name; keep log lines bounded.
    constexpr std::size_t max_shown = 64;
    std::string shown(type->data(), std::min(type->size(), max_shown));
    if (type->size() > max_shown) shown += "...";
    return decode_error(DecodeErrorKind::unknown_type, "unknown frame type \"" + shown + "\"");
}

// ---- encoding ---------------------------------------------------------------------------

using Writer = JsonWriter;  // json_text.hpp

void write_peer(Writer& w, const PeerInfo& p) {
    w.string("node", p.node);
    w.string("inc", p.incarnation);
    w.string("listen", p.listen);
    w.boolean("client", p.client);
}

void write(Writer& w, const Hello& f) {
    w.integer("v", f.version);
    write_peer(w, f.peer);
    w.string("nonce", f.nonce);
    if (f.batch) w.boolean("batch", true);
    if (f.channels) w.boolean("channels", true);
    if (f.channel) w.boolean("channel", true);
    if (f.cancel) w.boolean("cancel", true);
    if (f.pieces) w.boolean("pieces", true);
}

void write(Writer& w, const Auth& f) { w.string("proof", f.proof); }

void write(Writer& w, const Ready& f) { w.string("proof", f.proof); }

void write(Writer& w, const Nodes& f) {
    w.begin_array("nodes");
    for (const auto& p : f.nodes) {
        w.begin_object();
        write_peer(w, p);
        w.end_object();
    }
    w.end_array();
}

void write(Writer& w, const GroupSync& f) {
    w.begin_array("groups");
    for (const auto& [group, meta] : f.groups) {
        w.begin_object();
        w.string("group", group);
        w.value("meta", meta);
        w.end_object();
    }
    w.end_array();
}

void write(Writer& w, const GroupJoin& f) {
    w.string("group", f.group);
    w.value("meta", f.meta);
}

void write(Writer& w, const GroupLeave& f) { w.string("group", f.group); }

template <class F>  // Request or Cast
void write_trace(Writer& w, const F& f) {
    if (f.trace_read != TraceRead::valid) return;
    // Hex digits and '-' need no escaping: the member is written whole, in one copy.
    constexpr std::string_view key = R"("tp":")";
    char text[key.size() + traceparent_size + 1];
    key.copy(text, key.size());
    write_traceparent(f.trace, text + key.size());
    text[sizeof text - 1] = '"';
    w.member(std::string_view(text, sizeof text));
    if (!f.tracestate.empty() && f.tracestate.size() <= max_tracestate_size) w.string("ts", f.tracestate);
}

void write(Writer& w, const Request& f) {
    w.uint64("id", f.id);
    w.string("m", f.module);
    w.string("f", f.function);
    w.value("a", f.args);
    if (!f.load_balancer.empty()) w.string("lb", f.load_balancer);
    if (f.timeout_ms) w.uint64("to", *f.timeout_ms);
    write_trace(w, f);
}

void write(Writer& w, const Cast& f) {
    w.string("m", f.module);
    w.string("f", f.function);
    w.value("a", f.args);
    if (!f.load_balancer.empty()) w.string("lb", f.load_balancer);
    write_trace(w, f);
}

void write(Writer& w, const Response& f) {
    w.uint64("id", f.id);
    if (f.result.has_value())
        w.value("ok", *f.result);
    else
        w.value("err", f.result.error().to_json());
    if (f.load) {
        char text[52];
        text[0] = '[';
        char* p = format_load(*f.load, text + 1, ',');
        *p++ = ']';
        w.raw("ld", std::string_view(text, static_cast<std::size_t>(p - text)));
    }
}

void write(Writer& w, const Bye& f) {
    if (f.reply) w.boolean("reply", true);
}

void write(Writer& w, const Cancel& f) { w.uint64("id", f.id); }

void write(Writer& w, const Probe& f) {
    w.string("k", probe_kinds[static_cast<std::size_t>(f.kind)]);
    w.uint64("seq", f.seq);
    if (!f.node.empty()) w.string("node", f.node);
}

void write(Writer& w, const MemberState& f) {
    w.string("state", member_healths[static_cast<std::size_t>(f.state)]);
    w.string("node", f.node);
    w.string("inc", f.incarnation);
    w.uint64("v", f.version);
}

}  // namespace

std::optional<std::uint64_t> peek_frame_id(std::string_view text, std::string_view type) noexcept {
    const auto rest = after_head(text, type);
    if (!rest) return std::nullopt;
    const auto digits = id_digits(*rest);
    if (!digits || digits->count >= rest->size() || (*rest)[digits->count] != ',') return std::nullopt;
    return digits->value;
}

std::string_view to_string(DecodeErrorKind kind) noexcept {
    constexpr std::array<std::string_view, 4> names{"too_large", "bad_json", "bad_shape", "unknown_type"};
    const auto i = static_cast<std::size_t>(kind);
    return i < names.size() ? names[i] : "unknown";
}

boost::system::result<Frame, DecodeError> decode(std::string_view text, std::size_t max_size) {
    try {
        return decode_unchecked(text, max_size);
    } catch (const std::exception& e) {
        // Only allocation failure can get here; the promise is that decode never throws.
        return decode_error(DecodeErrorKind::bad_json, std::string("frame could not be decoded: ") + e.what());
    }
}

namespace {

template <class F>
std::string encode_one(const F& f, std::string buffer = {}) {
    Writer w(std::move(buffer));
    w.begin_object();
    w.string("t", frame_name<F>);
    write(w, f);
    w.end_object();
    return std::move(w).finish();
}

}  // namespace

std::string encode(const Frame& frame) {
    return std::visit([](const auto& f) { return encode_one(f); }, frame);
}

std::string encode(const Request& frame, std::string buffer) { return encode_one(frame, std::move(buffer)); }
std::string encode(const Cast& frame, std::string buffer) { return encode_one(frame, std::move(buffer)); }
std::string encode(const Response& frame, std::string buffer) { return encode_one(frame, std::move(buffer)); }

std::string_view type_name(const Frame& frame) noexcept {
    return frame_types[frame.index()].name;
}

void throw_exception_from_error(const DecodeError& e, const boost::source_location&) {
    throw std::runtime_error(std::string(to_string(e.kind)) + ": " + e.message);
}

}  // namespace rpclb::detail::wire
