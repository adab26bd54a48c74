// etcd's v3 JSON gateway, sans I/O: the request bodies EtcdDiscovery sends and the answers
// it reads, as etcd 3.4 spells them (keys and values base64, 64-bit integers as decimal
// strings: the protobuf JSON mapping). The HTTP exchange is in etcd_discovery.cpp.
#pragma once

#include <boost/json/value.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail::etcd {

/// An answer from etcd that is not what the gateway sends: its what() says what was wrong.
struct BadAnswer : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Padded base64 (RFC 4648 section 4) of `bytes`. Thread safety: pure function.
std::string base64_encode(std::string_view bytes);
/// The bytes of padded base64 `text`; nullopt when it is not padded base64.
/// Thread safety: pure function.
std::optional<std::string> base64_decode(std::string_view text);

/// The end of etcd's range of every key that starts with `prefix` (non-empty): `prefix`
/// with its last byte that is not 0xff incremented, and what follows it dropped.
/// Thread safety: pure function.
std::string prefix_range_end(std::string_view prefix);

// ---- request bodies (POST /v3/...) -------------------------------------------------------

/// /v3/lease/grant: a lease of `ttl` seconds.
std::string grant_request(std::chrono::seconds ttl);
/// /v3/kv/put: `key` = `value`, attached to `lease`.
std::string put_request(std::string_view key, std::string_view value, std::int64_t lease);
/// /v3/kv/range: every key under `prefix`, at most `limit` of them.
std::string range_request(std::string_view prefix, std::size_t limit);
/// /v3/watch: changes of every key under `prefix` from `start_revision` on.
std::string watch_request(std::string_view prefix, std::int64_t start_revision);
/// /v3/lease/keepalive: renew `lease` once.
std::string keepalive_request(std::int64_t lease);
/// /v3/lease/revoke: end `lease`, deleting its keys.
std::string revoke_request(std::int64_t lease);

// ---- answers -----------------------------------------------------------------------------
// Each throws BadAnswer when the JSON lacks a field etcd always sends or holds one of the
// wrong type.

/// The message of an error answer (`{"error": "...", "message": "...", "code": N}` or a
/// stream's `{"error": {"message": ...}}`), or nullopt when `answer` is not one.
std::optional<std::string> error_message(const boost::json::value& answer);

/// A granted lease.
struct Grant {
    std::int64_t lease = 0;  ///< its ID, non-zero
    std::int64_t ttl = 0;    ///< seconds, as etcd granted it
};
Grant parse_grant(const boost::json::value& answer);

/// The seconds left on the lease a keepalive answer (`{"result": {...}}`) renewed; 0 when
/// the lease is gone (expired or revoked).
std::int64_t parse_keepalive(const boost::json::value& answer);

/// One key and its value, decoded, and the lease it is attached to.
struct KeyValue {
    std::string key;
    std::string value;
    std::int64_t lease = 0;  ///< 0: none
};

/// A range answer.
struct Range {
    std::int64_t revision = 0;  ///< the store's revision the listing is of
    std::vector<KeyValue> kvs;
    bool more = false;          ///< the listing stopped at the request's limit
};
Range parse_range(const boost::json::value& answer);

/// One change under a watched prefix.
struct Event {
    bool deleted = false;  ///< a DELETE (key gone), else a PUT
    KeyValue kv;           ///< value empty for a DELETE
};

/// One message of a watch stream (`{"result": {...}}`).
struct WatchMessage {
    bool created = false;         ///< the watch is set up
    bool canceled = false;        ///< etcd ended the watch (see reason)
    std::string reason;           ///< why it was canceled
    std::int64_t compact_revision = 0;  ///< non-zero: the start revision was compacted away
    std::vector<Event> events;
};
WatchMessage parse_watch(const boost::json::value& message);

// ---- the listing ---------------------------------------------------------------------------

/// The nodes registered under a prefix: node name → advertised "HOST:PORT", built from a
/// range and kept up to date by watch events. An entry whose key is not PREFIX/NAME with a
/// valid node name, or whose value is not a HOST:PORT that can be dialled, is left out and
/// described in `problems` (for the caller to log). Plain data; not thread-safe.
class NodeList {
public:
    /// The most nodes listed; keys of further nodes are left out (one problem says how many).
    static constexpr std::size_t max_nodes = 65536;

    /// `prefix`: the URL's PREFIX; `self`: this node's name, never listed.
    NodeList(std::string prefix, std::string self);

    /// Replaces the list with `kvs` (a range's).
    void reset(const std::vector<KeyValue>& kvs, std::vector<std::string>& problems);
    /// Applies `events` in order; true when the list changed.
    bool apply(const std::vector<Event>& events, std::vector<std::string>& problems);
    const std::map<std::string, std::string, std::less<>>& nodes() const noexcept { return nodes_; }

private:
    /// The node name of `key`, or nullopt (with the problem added) when it is not PREFIX/NAME.
    std::optional<std::string> name_of(const std::string& key, std::vector<std::string>& problems) const;
    bool put(const KeyValue& kv, std::vector<std::string>& problems);
    void say_left_out(std::vector<std::string>& problems);

    std::string key_prefix_;  // "PREFIX/"
    std::size_t left_out_ = 0;  // keys of nodes past max_nodes, in the reset or apply under way
    std::string self_;
    std::map<std::string, std::string, std::less<>> nodes_;
};

}  // namespace rpclb::detail::etcd
