// The simulated mesh: N nodes, each running the real FailureDetector and the real Groups,
// over a simulated link layer and network on virtual time (test/sim/mesh_sim.cpp drives it).
//
// The link layer models Mesh (src/membership/mesh.cpp) as far as the detector sees it:
// one link per pair, dialled by the smaller name (seeds by everyone), after a handshake
// that needs both nodes up, unstalled and reachable both ways; a link carries frames in
// order (TCP); the names a node learns come from the "nodes" lists exchanged when a link
// is established, the newcomer announced to every other peer, and the list sent to one
// peer in turn every 10 reconnect ticks (every tick for 3 ticks after a link came or
// went); each reconnect tick redials the seeds and every known, unlinked node this node
// dials. add()/remove() follow links up and down; frames
// read go to on_probe/on_member; the detector's `dead` drops links. Groups as Mesh drives
// them: each side of a new link sends the other its sync frame, a node's joins and leaves
// go to every linked peer as frames, a dropped link removes the peer from every group;
// the frames are the wire's, encoded and decoded.
//
// Links may be gray all the time (NetOptions::link_jitter, link_loss, bandwidth): a delay
// drawn per frame from the link's own range, lost segments that TCP retransmits (and the
// frames behind them wait), and a rate at which frames leave; nodes stall as under a CPU
// stall or SIGSTOP (stall/resume).
//
// Ids, not strings, everywhere but at the detector's API; per pair three flat arrays and
// four bitsets, so memory is the detectors' plus about 11 bytes per ordered pair.
#pragma once

#include "membership/failure_detector.hpp"

#include <rpclb/detail/wire.hpp>
#include <rpclb/groups.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

namespace rpclb::sim {

using Micros = std::int64_t;  // virtual time, microseconds since the run began
using rpclb::detail::DetectorOptions;
using rpclb::detail::FailureDetector;
namespace wire = rpclb::detail::wire;

constexpr Micros ms = 1000;
constexpr Micros sec = 1000 * ms;

inline Micros to_micros(std::chrono::milliseconds d) { return d.count() * ms; }

/// A row of bits, one per node id.
class Bits {
public:
    explicit Bits(std::size_t n = 0) : words_((n + 63) / 64) {}
    bool test(std::uint32_t i) const { return words_[i >> 6] >> (i & 63) & 1u; }
    void set(std::uint32_t i) { words_[i >> 6] |= std::uint64_t{1} << (i & 63); }
    void reset(std::uint32_t i) { words_[i >> 6] &= ~(std::uint64_t{1} << (i & 63)); }
    void clear() { std::fill(words_.begin(), words_.end(), 0); }
    std::size_t count() const {
        std::size_t c = 0;
        for (auto w : words_) c += std::popcount(w);
        return c;
    }
    // Calls f(i) for each set bit of (this & ~minus), in increasing order.
    template <class F> void for_each_not_in(const Bits& minus, F&& f) const {
        for (std::size_t k = 0; k < words_.size(); ++k)
            for (auto w = words_[k] & ~minus.words_[k]; w; w &= w - 1)
                f(static_cast<std::uint32_t>(k * 64 + std::countr_zero(w)));
    }
    template <class F> void for_each(F&& f) const {
        for (std::size_t k = 0; k < words_.size(); ++k)
            for (auto w = words_[k]; w; w &= w - 1) f(static_cast<std::uint32_t>(k * 64 + std::countr_zero(w)));
    }
    const std::vector<std::uint64_t>& words() const { return words_; }

private:
    std::vector<std::uint64_t> words_;
};

/// Timing of the link layer and the size of each fault's effect on a link.
struct NetOptions {
    Micros latency_min = 500;          ///< one-way link latency, per pair, uniform in [min, max]
    Micros latency_max = 3 * ms;
    int handshake_trips = 4;           ///< a link is up this many one-way latencies after the dial
    Micros handshake_timeout = 5 * sec;
    Micros reconnect = 1 * sec;        ///< Mesh's reconnect_interval
    int regossip_ticks = 10;           ///< Mesh::regossip_ticks
    int settle_ticks = 3;              ///< Mesh::settle_ticks
    long trace = -1;                   ///< prints every frame to, from or about this node (-1: none)
    Micros delay_max = 400 * ms;       ///< "delay": extra latency on a node's links, up to this
    Micros delay_jitter = 20 * ms;
    double loss = 0.2;                 ///< "drop": chance a frame's segment is lost, per try
    Micros rto = 200 * ms;             ///< "drop": the first retransmission waits this, then doubles
    int max_retransmits = 3;           ///< at most this many losses of one frame (then it gets through)
    Micros reorder_jitter = 30 * ms;   ///< "reorder": extra per-frame delay, up to this
    // Gray links, on every link all the time (0: off).
    Micros link_jitter = 0;  ///< per-frame extra delay, uniform up to this × the link's own share (0…1)
    double link_loss = 0;    ///< chance a frame's segment is lost, per try (retransmitted as under "drop")
    double bandwidth = 0;    ///< bytes per second each way: a frame waits for the ones before it to go out
};

enum class Health : std::uint8_t { down, up, stalled };

class World {
public:
    World(std::uint32_t n, std::uint32_t seed_nodes, DetectorOptions det, NetOptions net, std::uint64_t seed)
        : n_(n), seed_nodes_(std::max<std::uint32_t>(1, std::min(seed_nodes, n))), det_(det), net_(net), rng_(seed),
          nodes_(n), link_(std::size_t{n} * n, 0), last_(std::size_t{n} * n, 0), peer_gen_(std::size_t{n} * n, 0),
          salt_(rng_()) {
        for (std::uint32_t i = 0; i < n; ++i) {
            auto& node = nodes_[i];
            node.name = "n" + std::to_string(i);
            node.linked = Bits(n);
            node.known = Bits(n);
            node.knowers = Bits(n);
            node.dialing = Bits(n);
        }
    }

    // ---- what the driver reads -------------------------------------------------------
    std::uint32_t size() const { return n_; }
    Micros now() const { return now_; }
    std::mt19937_64& rng() { return rng_; }
    const NetOptions& net() const { return net_; }
    Health health(std::uint32_t i) const { return nodes_[i].health; }
    bool live(std::uint32_t i) const { return nodes_[i].health != Health::down; }
    bool is_seed(std::uint32_t i) const { return i < seed_nodes_; }
    std::uint32_t incarnation(std::uint32_t i) const { return nodes_[i].gen; }
    const Bits& linked(std::uint32_t i) const { return nodes_[i].linked; }
    std::size_t linked_count(std::uint32_t i) const { return nodes_[i].linked_count; }
    std::uint32_t linked_incarnation(std::uint32_t i, std::uint32_t j) const { return peer_gen_[idx(i, j)]; }
    const FailureDetector* detector(std::uint32_t i) const { return nodes_[i].fd.get(); }
    /// Node i's groups (null while it is down); its joins and leaves reach its peers.
    rpclb::Groups* groups(std::uint32_t i) const { return nodes_[i].groups.get(); }
    const std::string& name(std::uint32_t i) const { return nodes_[i].name; }
    std::uint64_t events() const { return events_; }
    /// Links dropped because the detector found them broken (Actions::broken).
    std::uint64_t broken() const { return broken_; }
    std::string debug_pair(std::uint32_t a, std::uint32_t b) const {
        return "known " + std::to_string(nodes_[a].known.test(b)) + "/" + std::to_string(nodes_[b].known.test(a)) +
               " dialing " + std::to_string(nodes_[a].dialing.test(b)) + "/" + std::to_string(nodes_[b].dialing.test(a)) +
               " link " + std::to_string(link_[idx(a, b)]) + "/" + std::to_string(link_[idx(b, a)]) + " gen " +
               std::to_string(nodes_[a].gen) + "/" + std::to_string(nodes_[b].gen) + " health " +
               std::to_string(int(nodes_[a].health)) + "/" + std::to_string(int(nodes_[b].health));
    }
    bool reachable(std::uint32_t from, std::uint32_t to) const { return !blocked(from, to); }

    /// Called for each node removed from a view (viewer, member) and each link formed.
    std::function<void(std::uint32_t, std::uint32_t)> on_unlinked;
    std::function<void(std::uint32_t, std::uint32_t)> on_linked;
    /// Called for each member a detector found dead: (viewer, member, incarnation the viewer
    /// linked, the node that said so or the viewer itself).
    std::function<void(std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t)> on_dead;
    /// Called for each suspicion a detector raises or confirms itself: (suspecter, member).
    std::function<void(std::uint32_t, std::uint32_t)> on_suspect;
    /// Called for each link a detector found broken (Actions::broken): (viewer, member).
    std::function<void(std::uint32_t, std::uint32_t)> on_broken;
    /// Called when a group frame from `from` (incarnation `gen`, sent at `sent`) made node
    /// `viewer` add `from` to `group`.
    std::function<void(std::uint32_t viewer, std::uint32_t from, std::uint32_t gen, Micros sent, const std::string& group)>
        on_group_added;
    /// Called when node i has started, before it dials (the driver joins its groups).
    std::function<void(std::uint32_t)> on_started;

    // ---- faults and life cycle ------------------------------------------------------
    /// Starts node i (a new incarnation when it ran before): dials its seeds.
    void start(std::uint32_t i) {
        auto& node = nodes_[i];
        node.health = Health::up;
        ++node.gen;
        node.fd = std::make_unique<FailureDetector>(node.name, inc_name(node.gen), det_, rng_());
        node.groups = std::make_unique<rpclb::Groups>(node.name);
        node.groups->set_broadcast([this, i](std::string frame) { broadcast_group(i, std::move(frame)); });
        node.groups->set_observer([this, i](const std::string& group, rpclb::NodeChange change,
                                            const std::vector<std::string>& names) {
            if (change != rpclb::NodeChange::joined || !applying_ || !on_group_added) return;
            for (const auto& name : names)
                if (name != nodes_[i].name) on_group_added(i, parse_id(name), applying_->gen, applying_->sent, group);
        });
        if (on_started) on_started(i);
        node.ticks = node.settling_until = node.lists_sent = 0;
        node.view_changed = false;
        node.timer_token++;
        node.timer_at = -1;
        for (std::uint32_t s = 0; s < seed_nodes_; ++s)
            if (s != i) dial(i, s);
        push({now_ + std::uniform_int_distribution<Micros>(1, net_.reconnect)(rng_), Kind::tick, i, i, node.gen});
    }
    /// The process dies: every link closes, the other side sees it one latency later (FIN).
    void crash(std::uint32_t i) {
        auto& node = nodes_[i];
        if (node.health == Health::down) return;
        node.health = Health::down;
        node.linked.for_each([&](std::uint32_t j) { close_link(i, j); });
        node.fd.reset();
        node.groups.reset();
        node.parked.clear();
        node.dialing.clear();
        // A new process knows nobody but its seeds.
        node.known.for_each([&](std::uint32_t j) { nodes_[j].knowers.reset(i); });
        node.known.clear();
        node.timer_token++;
    }
    void stall(std::uint32_t i) {
        if (nodes_[i].health == Health::up) nodes_[i].health = Health::stalled;
    }
    /// SIGCONT: what arrived and fell due meanwhile runs now, in arrival order.
    void resume(std::uint32_t i) {
        auto& node = nodes_[i];
        if (node.health != Health::stalled) return;
        node.health = Health::up;
        auto parked = std::move(node.parked);
        node.parked.clear();
        for (auto& e : parked) {
            e.t = now_;
            push(e);
        }
    }
    enum class Cut : std::uint8_t { none, both_ways, one_way };
    /// side[i] true: node i is on side A. one_way: A's frames to B are held, B's to A pass.
    void partition(std::vector<bool> side, Cut cut) {
        side_ = std::move(side);
        cut_ = cut;
    }
    /// Ends the partition: the held frames are retransmitted now, in order.
    void heal_partition() {
        cut_ = Cut::none;
        auto held = std::move(held_);
        held_.clear();
        for (auto& e : held) transmit(e, 0);
    }
    bool partitioned() const { return cut_ != Cut::none; }
    void set_delay(std::uint32_t i, Micros extra, Micros until) { nodes_[i].delay = extra, nodes_[i].delay_until = until; }
    void set_loss(std::uint32_t i, Micros until) { nodes_[i].loss_until = until; }
    void set_reorder(std::uint32_t i, Micros until) { nodes_[i].reorder_until = until; }

    /// Runs every event before `until` (the callback `at` at its instants too) and sets the clock to it.
    void run_until(Micros until) {
        while (!queue_.empty() && queue_.top().t <= until) {
            auto e = queue_.top();
            queue_.pop();
            now_ = std::max(now_, e.t);
            ++events_;
            dispatch(e);
        }
        now_ = until;
    }
    /// Calls f at `at` (a fault's start or end), in time order with the frames.
    void at(Micros t, std::function<void()> f) {
        calls_.push_back(std::move(f));
        push({t, Kind::call, 0, 0, static_cast<std::uint32_t>(calls_.size() - 1)});
    }

private:
    enum class Kind : std::uint8_t { timer, tick, handshake, probe, member, close, nodes, group, call };
    struct Event {
        Micros t = 0;
        Kind kind = Kind::timer;
        std::uint32_t to = 0;
        std::uint32_t from = 0;
        std::uint32_t tag = 0;      // link id (frames), incarnation (timer, tick, handshake), call index
        std::uint64_t value = 0;    // seq or version; dial time of a handshake; a group frame's id
        std::uint32_t subject = 0;  // node a ping_req or member frame is about
        std::uint32_t subject_gen = 0;
        std::uint8_t sub = 0;       // ProbeKind or MemberHealth
        std::uint64_t order = 0;
    };
    struct Later {
        bool operator()(const Event& a, const Event& b) const { return a.t != b.t ? a.t > b.t : a.order > b.order; }
    };
    struct Node {
        std::string name;
        std::unique_ptr<FailureDetector> fd;
        std::unique_ptr<rpclb::Groups> groups;
        Health health = Health::down;
        std::uint32_t gen = 0;
        Bits linked, known, knowers, dialing;  // knowers: who knows this node's name (a column of `known`)
        std::size_t linked_count = 0;
        std::vector<Event> parked;  // arrived while stalled
        Micros timer_at = -1;
        std::uint32_t timer_token = 0;
        std::uint32_t ticks = 0;
        std::uint32_t settling_until = 0;  // a list every tick up to this tick
        std::uint32_t lists_sent = 0;
        bool view_changed = false;         // a link came up or went since the last tick
        Micros delay = 0, delay_until = 0, loss_until = 0, reorder_until = 0;
    };

    static std::string inc_name(std::uint32_t gen) { return "i" + std::to_string(gen); }
    static std::uint32_t parse_id(std::string_view s) {
        std::uint32_t v = 0;
        std::from_chars(s.data() + 1, s.data() + s.size(), v);
        return v;
    }
    std::size_t idx(std::uint32_t a, std::uint32_t b) const { return std::size_t{a} * n_ + b; }
    void push(Event e) {
        e.order = next_order_++;
        queue_.push(e);
    }
    bool blocked(std::uint32_t from, std::uint32_t to) const {
        switch (cut_) {
        case Cut::none: return false;
        case Cut::both_ways: return side_[from] != side_[to];
        case Cut::one_way: return side_[from] && !side_[to];
        }
        return false;
    }
    // A fixed draw per pair (both directions), from the run's salt.
    std::uint64_t pair_hash(std::uint32_t a, std::uint32_t b, std::uint64_t salt) const {
        std::uint64_t x = std::uint64_t{std::min(a, b)} << 32 | std::max(a, b);
        x ^= salt;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
    }
    Micros latency(std::uint32_t a, std::uint32_t b) const {
        return net_.latency_min +
               static_cast<Micros>(pair_hash(a, b, salt_) % static_cast<std::uint64_t>(net_.latency_max - net_.latency_min + 1));
    }
    // A gray link's extra delay for one frame: its jitter, and TCP's retransmissions of
    // lost segments.
    Micros gray(std::uint32_t a, std::uint32_t b) {
        Micros d = 0;
        if (net_.link_jitter > 0) {
            const auto share = static_cast<Micros>(pair_hash(a, b, ~salt_) % 1001);
            d += std::uniform_int_distribution<Micros>(0, net_.link_jitter * share / 1000)(rng_);
        }
        if (net_.link_loss > 0) {
            Micros rto = net_.rto;
            for (int k = 0; k < net_.max_retransmits && std::bernoulli_distribution(net_.link_loss)(rng_); ++k, rto *= 2)
                d += rto;
        }
        return d;
    }
    // The bytes a frame puts on its link, for the bandwidth.
    std::size_t frame_bytes(const Event& e) const {
        switch (e.kind) {
        case Kind::probe: return 48;
        case Kind::member: return 96;
        case Kind::nodes: return 16 + 16 * nodes_[e.from].linked_count;
        case Kind::group: {
            const auto it = group_frames_.find(e.value);
            return it == group_frames_.end() ? 64 : it->second.text.size();
        }
        default: return 16;
        }
    }
    // A fault's extra delay for one frame leaving or reaching node i.
    Micros extra(const Node& node) {
        Micros d = 0;
        if (now_ < node.delay_until)
            d += node.delay + std::uniform_int_distribution<Micros>(0, net_.delay_jitter)(rng_);
        if (now_ < node.reorder_until) d += std::uniform_int_distribution<Micros>(0, net_.reorder_jitter)(rng_);
        if (now_ < node.loss_until) {
            // TCP: a lost segment is retransmitted after the RTO, which doubles each time.
            Micros rto = net_.rto;
            for (int k = 0; k < net_.max_retransmits && std::bernoulli_distribution(net_.loss)(rng_); ++k, rto *= 2)
                d += rto;
        }
        return d;
    }
    // Puts a frame on its link: in order after the link's previous frame (TCP).
    void transmit(Event e, Micros extra_delay) {
        auto& last = last_[idx(e.from, e.to)];
        Micros departs = now_;
        if (net_.bandwidth > 0) {
            if (free_.empty()) free_.assign(std::size_t{n_} * n_, 0);
            auto& free = free_[idx(e.from, e.to)];
            departs = std::max(now_, free) + static_cast<Micros>(static_cast<double>(frame_bytes(e)) * sec / net_.bandwidth);
            free = departs;
        }
        e.t = std::max<Micros>(departs + latency(e.from, e.to) + extra_delay, static_cast<Micros>(last) * 10);
        last = static_cast<std::uint32_t>((e.t + 9) / 10);
        e.t = static_cast<Micros>(last) * 10;
        push(e);
    }
    void send_frame(Event e) {
        const auto l = link_[idx(e.from, e.to)];
        if (l == 0) return;  // no link: the driver drops it
        e.tag = l;
        transmit(e, extra(nodes_[e.from]) + extra(nodes_[e.to]) + gray(e.from, e.to));
    }

    void dispatch(Event& e) {
        if (e.kind == Kind::call) {
            // Moved out first: the call may schedule more (at()), which can grow calls_.
            auto call = std::move(calls_[e.tag]);
            calls_[e.tag] = nullptr;
            return call();
        }
        auto& node = nodes_[e.to];
        const bool frame = e.kind == Kind::probe || e.kind == Kind::member || e.kind == Kind::close ||
                           e.kind == Kind::nodes || e.kind == Kind::group;
        if (frame && blocked(e.from, e.to)) {
            held_.push_back(e);  // TCP retransmits until the partition heals
            return;
        }
        if (node.health == Health::stalled && e.kind != Kind::handshake) {
            node.parked.push_back(e);
            return;
        }
        if (e.kind == Kind::group) return read_group(e);
        if (node.health == Health::down) return;
        switch (e.kind) {
        case Kind::timer:
            if (e.tag != node.gen || e.value != node.timer_token) return;
            node.timer_at = -1;
            apply(e.to, node.fd->on_timer(tp(now_)), e.to);
            return;
        case Kind::tick: return tick(e);
        case Kind::handshake: return handshake(e);
        case Kind::close:
            if (link_[idx(e.to, e.from)] == e.tag) drop_link(e.to, e.from);
            return;
        default: break;
        }
        if (link_[idx(e.to, e.from)] != e.tag) return;  // that link is gone on this side
        if (e.kind == Kind::nodes) {
            learn_list(e.to, nodes_[e.from].linked, e.from);
            return;
        }
        const auto& from = nodes_[e.from].name;
        if (trace_ >= 0 && (e.to == std::uint32_t(trace_) || e.from == std::uint32_t(trace_) ||
                            (e.kind == Kind::member && e.subject == std::uint32_t(trace_))))
            std::fprintf(stderr, "trace %.6f %s -> %s %s %u %s gen %u v/seq %llu\n", double(now_) / sec, from.c_str(),
                         node.name.c_str(), e.kind == Kind::probe ? "probe" : "member", unsigned(e.sub),
                         nodes_[e.subject].name.c_str(), e.subject_gen, (unsigned long long)e.value);
        if (e.kind == Kind::probe && e.sub == static_cast<std::uint8_t>(wire::ProbeKind::ping)) {
            // The link's own ping: the peer's link layer answers (a WebSocket pong), and
            // the sender's driver reports the answer as an "ack" from this node.
            Event ack{0, Kind::probe, e.from, e.to};
            ack.sub = static_cast<std::uint8_t>(wire::ProbeKind::ack);
            ack.value = e.value;
            send_frame(ack);
            return;
        }
        if (e.kind == Kind::probe) {
            wire::Probe p{static_cast<wire::ProbeKind>(e.sub), e.value, {}};
            if (p.kind == wire::ProbeKind::ping_req) p.node = nodes_[e.subject].name;
            apply(e.to, node.fd->on_probe(tp(now_), from, p), e.to);
        } else {
            wire::MemberState s{static_cast<wire::MemberHealth>(e.sub), nodes_[e.subject].name, inc_name(e.subject_gen),
                                e.value};
            apply(e.to, node.fd->on_member(tp(now_), from, s), e.from);
        }
    }
    static FailureDetector::Clock::time_point tp(Micros t) {
        return FailureDetector::Clock::time_point{} + std::chrono::microseconds(t);
    }

    // Does what the detector of node i asks: sends, gossip to every linked member, drops.
    void apply(std::uint32_t i, FailureDetector::Actions&& out, std::uint32_t source) {
        auto& node = nodes_[i];
        for (auto& [to, p] : out.sends) {
            Event e{0, Kind::probe, parse_id(to), i};
            e.sub = static_cast<std::uint8_t>(p.kind);
            e.value = p.seq;
            if (p.kind == wire::ProbeKind::ping_req) e.subject = parse_id(p.node);
            send_frame(e);
        }
        for (auto& s : out.gossip) {
            if (s.state == wire::MemberHealth::suspect && on_suspect) on_suspect(i, parse_id(s.node));
            Event e{0, Kind::member, 0, i};
            e.sub = static_cast<std::uint8_t>(s.state);
            e.subject = parse_id(s.node);
            e.subject_gen = parse_id(s.incarnation);
            e.value = s.version;
            node.linked.for_each([&](std::uint32_t j) {
                e.to = j;
                send_frame(e);
            });
        }
        for (auto& [to, s] : out.notices) {
            Event e{0, Kind::member, parse_id(to), i};
            e.sub = static_cast<std::uint8_t>(s.state);
            e.subject = parse_id(s.node);
            e.subject_gen = parse_id(s.incarnation);
            e.value = s.version;
            send_frame(e);
        }
        for (auto& name : out.dead) {
            const auto j = parse_id(name);
            if (link_[idx(i, j)] == 0) continue;
            if (on_dead) on_dead(i, j, peer_gen_[idx(i, j)], source);
            close_link(i, j);
        }
        for (auto& name : out.broken) {
            const auto j = parse_id(name);
            if (link_[idx(i, j)] == 0) continue;
            ++broken_;
            if (on_broken) on_broken(i, j);
            close_link(i, j);
        }
        schedule_timer(i);
    }
    void schedule_timer(std::uint32_t i) {
        auto& node = nodes_[i];
        const auto next = node.fd->next_timer();
        Micros at = -1;
        if (next) at = *next == FailureDetector::Clock::time_point::min()
                           ? now_
                           : std::max(now_, std::chrono::ceil<std::chrono::microseconds>(
                                                next->time_since_epoch()).count());
        if (at == node.timer_at) return;
        node.timer_at = at;
        ++node.timer_token;
        if (at >= 0) push({at, Kind::timer, i, i, node.gen, node.timer_token});
    }

    // ---- links ----------------------------------------------------------------------
    void dial(std::uint32_t a, std::uint32_t b) {
        auto& node = nodes_[a];
        if (node.dialing.test(b) || link_[idx(a, b)] != 0) return;
        if (nodes_[b].health == Health::down && !blocked(a, b) && !blocked(b, a)) return;  // refused at once (RST)
        node.dialing.set(b);
        const Micros hs = net_.handshake_trips * latency(a, b);
        Event e{now_ + hs, Kind::handshake, a, b, node.gen, static_cast<std::uint64_t>(now_)};
        push(e);
    }
    void handshake(Event& e) {
        // e.to dialled e.from at e.value.
        const auto a = e.to, b = e.from;
        auto& na = nodes_[a];
        if (e.tag != na.gen) return;
        auto& nb = nodes_[b];
        if (nb.health == Health::stalled || na.health == Health::stalled) {
            // The peer's process does not answer the upgrade until it resumes; the dialler
            // gives up after the handshake timeout.
            if (now_ - static_cast<Micros>(e.value) < net_.handshake_timeout) {
                e.t = now_ + net_.reconnect / 10;
                push(e);
            } else {
                na.dialing.reset(b);
            }
            return;
        }
        na.dialing.reset(b);
        if (nb.health != Health::up || blocked(a, b) || blocked(b, a)) return;
        // A link either side still holds (the other closed it, or it is another incarnation's)
        // refuses the newcomer; the next tick redials.
        if (link_[idx(a, b)] != 0 || link_[idx(b, a)] != 0) return;
        const auto l = ++next_link_;
        if (trace_ >= 0 && (a == std::uint32_t(trace_) || b == std::uint32_t(trace_)))
            std::fprintf(stderr, "trace %.6f link %s-%s gens %u/%u\n", double(now_) / sec, na.name.c_str(),
                         nb.name.c_str(), na.gen, nb.gen);
        link_[idx(a, b)] = link_[idx(b, a)] = l;
        peer_gen_[idx(a, b)] = nb.gen;
        peer_gen_[idx(b, a)] = na.gen;
        na.linked.set(b), nb.linked.set(a);
        na.view_changed = nb.view_changed = true;
        ++na.linked_count, ++nb.linked_count;
        auto told_b = na.fd->add(nb.name, inc_name(nb.gen));
        auto told_a = nb.fd->add(na.name, inc_name(na.gen));
        apply(a, std::move(told_b), a);  // schedules a's timer
        apply(b, std::move(told_a), b);
        if (on_linked) on_linked(a, b);
        // Mesh::on_established: each side sends the other its list and tells its other
        // peers about the newcomer (both applied now rather than a latency later).
        for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
            learn_list(y, nodes_[x].linked, x);
            announce(x, y);
        }
        // Then each sends the other its groups, in the link's order.
        send_group(a, na.groups->local_sync_frame(), b);
        send_group(b, nb.groups->local_sync_frame(), a);
    }
    // Node x tells its linked peers about y: those that don't know y learn it.
    void announce(std::uint32_t x, std::uint32_t y) {
        nodes_[x].linked.for_each_not_in(nodes_[y].knowers, [&](std::uint32_t z) {
            if (z != y) learn(z, y);
        });
    }
    void learn(std::uint32_t i, std::uint32_t j) {
        auto& node = nodes_[i];
        if (i == j || node.known.test(j)) return;
        node.known.set(j);
        nodes_[j].knowers.set(i);
        if (i < j && node.health == Health::up) dial(i, j);  // Mesh dials the larger name
    }
    // Node i reads the list of `from`'s linked peers (and `from` itself).
    void learn_list(std::uint32_t i, const Bits& list, std::uint32_t from) {
        learn(i, from);
        list.for_each_not_in(nodes_[i].known, [&](std::uint32_t j) { learn(i, j); });
    }
    void tick(Event& e) {
        auto& node = nodes_[e.to];
        if (e.tag != node.gen) return;
        const auto i = e.to;
        for (std::uint32_t s = 0; s < seed_nodes_; ++s)
            if (s != i && link_[idx(i, s)] == 0) dial(i, s);
        node.known.for_each_not_in(node.linked, [&](std::uint32_t j) {
            if (i < j) dial(i, j);
        });
        // Every tick for settle_ticks after this node's links changed, else every
        // regossip_ticks-th; to one peer in turn.
        if (node.view_changed) node.settling_until = node.ticks + net_.settle_ticks;
        node.view_changed = false;
        if ((++node.ticks <= node.settling_until || node.ticks % net_.regossip_ticks == 0) && node.linked_count > 0) {
            std::uint32_t k = node.lists_sent++ % node.linked_count, to = 0;
            node.linked.for_each([&](std::uint32_t j) {
                if (k-- == 0) to = j;
            });
            send_frame({0, Kind::nodes, to, i});
        }
        e.t = now_ + net_.reconnect;
        push(e);
    }
    // Node a drops its link to b; b sees the close one latency later, after what a sent.
    void close_link(std::uint32_t a, std::uint32_t b) {
        const auto l = link_[idx(a, b)];
        if (l == 0) return;
        Event e{0, Kind::close, b, a, l};
        transmit(e, 0);
        drop_link(a, b);
    }
    void drop_link(std::uint32_t a, std::uint32_t b) {
        auto& na = nodes_[a];
        if (trace_ >= 0 && (a == std::uint32_t(trace_) || b == std::uint32_t(trace_)))
            std::fprintf(stderr, "trace %.6f %s drops %s\n", double(now_) / sec, na.name.c_str(), nodes_[b].name.c_str());
        link_[idx(a, b)] = 0;
        na.linked.reset(b);
        na.view_changed = true;
        --na.linked_count;
        if (na.fd) {
            na.fd->remove(nodes_[b].name);
            if (na.health != Health::down) schedule_timer(a);
        }
        if (na.groups) na.groups->remove_node(nodes_[b].name);
        if (on_unlinked) on_unlinked(a, b);
    }

    // ---- groups ---------------------------------------------------------------------
    struct GroupFrame {
        std::string text;
        Micros sent = 0;
        std::uint32_t gen = 0;   // the sender's incarnation
        std::uint32_t refs = 0;  // events in flight that carry it
    };
    struct Applying {
        std::uint32_t gen;
        Micros sent;
    };
    // Sends a group frame of node i to `to`, or to every linked peer.
    void send_group(std::uint32_t i, std::string frame, std::optional<std::uint32_t> to) {
        const auto id = next_frame_++;
        auto& f = group_frames_[id];
        f = GroupFrame{std::move(frame), now_, nodes_[i].gen, 0};
        Event e{0, Kind::group, 0, i};
        e.value = id;
        auto one = [&](std::uint32_t j) {
            if (link_[idx(i, j)] == 0) return;
            ++f.refs;
            e.to = j;
            send_frame(e);
        };
        if (to) one(*to);
        else nodes_[i].linked.for_each(one);
        if (f.refs == 0) group_frames_.erase(id);
    }
    void broadcast_group(std::uint32_t i, std::string frame) { send_group(i, std::move(frame), std::nullopt); }
    // A group frame reaches e.to: applied as Mesh::on_frame does, when its link is still up.
    void read_group(const Event& e) {
        apply_group(e, group_frames_.find(e.value)->second);
        // Found again: applying may have sent frames (a rehash moves no element, but
        // invalidates iterators). The last event that carries the frame frees it.
        if (const auto it = group_frames_.find(e.value); --it->second.refs == 0) group_frames_.erase(it);
    }
    void apply_group(const Event& e, const GroupFrame& f) {
        auto& node = nodes_[e.to];
        if (node.health == Health::down || link_[idx(e.to, e.from)] != e.tag) return;
        auto decoded = wire::decode(f.text);
        if (!decoded) {
            std::fprintf(stderr, "mesh_sim: a group frame did not decode: %s\n", f.text.c_str());
            std::abort();
        }
        const auto& from = nodes_[e.from].name;
        applying_ = Applying{f.gen, f.sent};
        std::visit(
            [&](auto&& m) {
                using T = std::decay_t<decltype(m)>;
                if constexpr (std::is_same_v<T, wire::GroupSync>) node.groups->apply_sync(from, m.groups);
                else if constexpr (std::is_same_v<T, wire::GroupJoin>) node.groups->apply_join(from, m.group, std::move(m.meta));
                else if constexpr (std::is_same_v<T, wire::GroupLeave>) node.groups->apply_leave(from, m.group);
            },
            *decoded);
        applying_.reset();
    }

    const std::uint32_t n_;
    const std::uint32_t seed_nodes_;
    const DetectorOptions det_;
    const NetOptions net_;
    std::mt19937_64 rng_;
    std::vector<Node> nodes_;
    std::vector<std::uint32_t> link_;      // [a*n+b]: the id of a's link to b, 0 for none
    std::vector<std::uint32_t> last_;      // [a*n+b]: when a's last frame to b arrives, in 10 µs
    std::vector<std::uint16_t> peer_gen_;  // [a*n+b]: b's incarnation when a linked it
    std::vector<Micros> free_;             // [a*n+b]: when a's link to b has sent its last frame (bandwidth)
    std::uint64_t salt_;
    std::priority_queue<Event, std::vector<Event>, Later> queue_;
    std::vector<std::function<void()>> calls_;
    std::vector<Event> held_;
    std::vector<bool> side_;
    Cut cut_ = Cut::none;
    Micros now_ = 0;
    std::uint64_t next_order_ = 0;
    std::uint32_t next_link_ = 0;
    std::uint64_t events_ = 0;
    std::uint64_t broken_ = 0;
    std::unordered_map<std::uint64_t, GroupFrame> group_frames_;  // in flight, by id
    std::uint64_t next_frame_ = 0;
    std::optional<Applying> applying_;  // the group frame being applied
    const long trace_ = net_.trace;
};

}  // namespace rpclb::sim
