#include "membership/etcd_codec.hpp"

#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/option_problem.hpp>

#include <boost/beast/core/detail/base64.hpp>
#include <boost/json/serialize.hpp>

#include <charconv>

namespace rpclb::detail::etcd {
namespace json = boost::json;
namespace b64 = boost::beast::detail::base64;

std::string base64_encode(std::string_view bytes) {
    std::string out(b64::encoded_size(bytes.size()), '\0');
    out.resize(b64::encode(out.data(), bytes.data(), bytes.size()));
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    if (text.size() % 4 != 0) return std::nullopt;
    std::size_t padding = 0;
    while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
    const auto data = text.substr(0, text.size() - padding);
    std::string out(b64::decoded_size(text.size()), '\0');
    // Beast's decoder stops at the first character outside the alphabet: all of `data`
    // must have been read.
    const auto [written, read] = b64::decode(out.data(), data.data(), data.size());
    if (read != data.size()) return std::nullopt;
    out.resize(written);
    return out;
}

std::string prefix_range_end(std::string_view prefix) {
    std::string end(prefix);
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (end.empty()) return std::string(1, '\0');  // etcd: "\0" means every key from `key` on
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    return end;
}

namespace {

// `text` quoted for a log line: control characters escaped, at most 200 bytes shown.
std::string shown(std::string_view text) {
    constexpr std::size_t most = 200;
    auto quoted = json::serialize(json::string(text.substr(0, most)));
    return text.size() > most ? quoted + "..." : quoted;
}

// `v` as JSON text for an error message, at most 200 bytes of it.
std::string excerpt(const json::value& v) {
    auto text = json::serialize(v);
    if (text.size() > 200) text = text.substr(0, 200) + "...";
    return text;
}

std::string body(json::object o) { return json::serialize(o); }

const json::object& as_object(const json::value& v, std::string_view what) {
    const auto* o = v.if_object();
    if (!o) throw BadAnswer(std::string(what) + " is not a JSON object");
    return *o;
}

// An int64 field, which the gateway writes as a decimal string (numbers are taken too);
// absent means 0, as in protobuf.
std::int64_t integer(const json::object& o, std::string_view field) {
    const auto* v = o.if_contains(field);
    if (!v) return 0;
    if (const auto* i = v->if_int64()) return *i;
    if (const auto* u = v->if_uint64(); u && *u <= std::uint64_t(INT64_MAX)) return static_cast<std::int64_t>(*u);
    if (const auto* s = v->if_string()) {
        std::int64_t n = 0;
        const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), n);
        if (ec == std::errc() && end == s->data() + s->size() && !s->empty()) return n;
    }
    throw BadAnswer("field \"" + std::string(field) + "\" is not an integer: " + excerpt(*v));
}

bool boolean(const json::object& o, std::string_view field) {
    const auto* v = o.if_contains(field);
    if (!v) return false;
    if (const auto* b = v->if_bool()) return *b;
    throw BadAnswer("field \"" + std::string(field) + "\" is not a boolean: " + excerpt(*v));
}

// A base64 field, decoded; absent means empty.
std::string bytes(const json::object& o, std::string_view field) {
    const auto* v = o.if_contains(field);
    if (!v) return {};
    const auto* s = v->if_string();
    auto decoded = s ? base64_decode(*s) : std::nullopt;
    if (!decoded) throw BadAnswer("field \"" + std::string(field) + "\" is not base64: " + excerpt(*v));
    return std::move(*decoded);
}

const json::object& result_of(const json::value& answer, std::string_view what) {
    const auto& o = as_object(answer, what);
    const auto* r = o.if_contains("result");
    if (!r) throw BadAnswer(std::string(what) + " has no \"result\"");
    return as_object(*r, std::string(what) + "'s result");
}

KeyValue key_value(const json::value& v) {
    const auto& o = as_object(v, "a key-value");
    return KeyValue{bytes(o, "key"), bytes(o, "value"), integer(o, "lease")};
}

}  // namespace

std::string grant_request(std::chrono::seconds ttl) { return body({{"TTL", ttl.count()}}); }

std::string put_request(std::string_view key, std::string_view value, std::int64_t lease) {
    return body({{"key", base64_encode(key)}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}});
}

std::string range_request(std::string_view prefix, std::size_t limit) {
    return body({{"key", base64_encode(prefix)},
                 {"range_end", base64_encode(prefix_range_end(prefix))},
                 {"limit", std::to_string(limit)}});
}

std::string watch_request(std::string_view prefix, std::int64_t start_revision) {
    return body({{"create_request",
                  {{"key", base64_encode(prefix)},
                   {"range_end", base64_encode(prefix_range_end(prefix))},
                   {"start_revision", std::to_string(start_revision)}}}});
}

std::string keepalive_request(std::int64_t lease) { return body({{"ID", std::to_string(lease)}}); }

std::string revoke_request(std::int64_t lease) { return body({{"ID", std::to_string(lease)}}); }

std::optional<std::string> error_message(const json::value& answer) {
    const auto* o = answer.if_object();
    const auto* e = o ? o->if_contains("error") : nullptr;
    if (!e) return std::nullopt;
    if (const auto* m = o->if_contains("message"); m && m->is_string()) return std::string(m->get_string());
    if (const auto* s = e->if_string()) return std::string(*s);
    if (const auto* eo = e->if_object())
        if (const auto* m = eo->if_contains("message"); m && m->is_string()) return std::string(m->get_string());
    return excerpt(*e);
}

Grant parse_grant(const json::value& answer) {
    const auto& o = as_object(answer, "the lease grant answer");
    Grant g{integer(o, "ID"), integer(o, "TTL")};
    if (g.lease == 0) throw BadAnswer("the lease grant answer has no lease ID");
    if (g.ttl <= 0) throw BadAnswer("the lease grant answer has no TTL");
    return g;
}

std::int64_t parse_keepalive(const json::value& answer) {
    return integer(result_of(answer, "the keepalive answer"), "TTL");
}

Range parse_range(const json::value& answer) {
    const auto& o = as_object(answer, "the range answer");
    const auto* header = o.if_contains("header");
    if (!header) throw BadAnswer("the range answer has no header");
    Range r;
    r.revision = integer(as_object(*header, "the range answer's header"), "revision");
    if (r.revision <= 0) throw BadAnswer("the range answer has no revision");
    r.more = boolean(o, "more");
    if (const auto* kvs = o.if_contains("kvs")) {
        const auto* list = kvs->if_array();
        if (!list) throw BadAnswer("the range answer's kvs is not an array");
        for (const auto& kv : *list) r.kvs.push_back(key_value(kv));
    }
    return r;
}

WatchMessage parse_watch(const json::value& message) {
    const auto& o = result_of(message, "the watch message");
    WatchMessage m;
    m.created = boolean(o, "created");
    m.canceled = boolean(o, "canceled");
    m.compact_revision = integer(o, "compact_revision");
    if (const auto* reason = o.if_contains("cancel_reason"); reason && reason->is_string())
        m.reason = std::string(reason->get_string());
    if (const auto* events = o.if_contains("events")) {
        const auto* list = events->if_array();
        if (!list) throw BadAnswer("the watch message's events is not an array");
        for (const auto& e : *list) {
            const auto& eo = as_object(e, "a watch event");
            Event event;
            if (const auto* type = eo.if_contains("type")) {
                const auto* t = type->if_string();
                if (!t || (*t != "PUT" && *t != "DELETE"))
                    throw BadAnswer("a watch event's type is " + excerpt(*type));
                event.deleted = *t == "DELETE";
            }
            const auto* kv = eo.if_contains("kv");
            if (!kv) throw BadAnswer("a watch event has no kv");
            event.kv = key_value(*kv);
            m.events.push_back(std::move(event));
        }
    }
    return m;
}

NodeList::NodeList(std::string prefix, std::string self) : key_prefix_(std::move(prefix) + "/"), self_(std::move(self)) {}

std::optional<std::string> NodeList::name_of(const std::string& key, std::vector<std::string>& problems) const {
    // The name only keys the list and shows in logs (a peer's identity is what its
    // handshake proves), so the rule is the shape of a node name: short@host, printable,
    // of a sane length.
    constexpr std::size_t longest = 1024;
    const std::string name = key.starts_with(key_prefix_) ? key.substr(key_prefix_.size()) : std::string();
    const auto at = name.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == name.size() || name.find('@', at + 1) != std::string::npos ||
        name.size() > longest || check_printable("name", name)) {
        problems.push_back("key " + shown(key) + " is not " + key_prefix_ + "NAME with NAME a node name (short@host)");
        return std::nullopt;
    }
    return name;
}

bool NodeList::put(const KeyValue& kv, std::vector<std::string>& problems) {
    const auto name = name_of(kv.key, problems);
    if (!name) return false;
    if (auto problem = dial_problem(kv.value); problem || kv.value.starts_with(dns_seed_prefix)) {
        problems.push_back("key " + shown(kv.key) + ": its value " + shown(kv.value) + " " +
                           (problem ? *problem : std::string("is not HOST:PORT")));
        // A node's new value that cannot be dialled replaces its old one all the same.
        return nodes_.erase(*name) > 0;
    }
    if (*name == self_) return false;
    if (nodes_.size() >= max_nodes && !nodes_.contains(*name)) {
        ++left_out_;
        return false;
    }
    auto& address = nodes_[*name];
    if (address == kv.value) return false;
    address = kv.value;
    return true;
}

void NodeList::reset(const std::vector<KeyValue>& kvs, std::vector<std::string>& problems) {
    nodes_.clear();
    for (const auto& kv : kvs) put(kv, problems);
    say_left_out(problems);
}

void NodeList::say_left_out(std::vector<std::string>& problems) {
    if (left_out_ == 0) return;
    problems.push_back(std::to_string(left_out_) + " keys of further nodes left out: at most " +
                       std::to_string(max_nodes) + " nodes are listed");
    left_out_ = 0;
}

bool NodeList::apply(const std::vector<Event>& events, std::vector<std::string>& problems) {
    bool changed = false;
    for (const auto& e : events) {
        if (!e.deleted) {
            changed |= put(e.kv, problems);
        } else if (const auto name = name_of(e.kv.key, problems)) {
            changed |= nodes_.erase(*name) > 0;
        }
    }
    say_left_out(problems);
    return changed;
}

}  // namespace rpclb::detail::etcd
