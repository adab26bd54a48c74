// mesh_sim: the membership simulator. N virtual nodes, each running the real
// FailureDetector and Groups, on a simulated link layer (test/sim/mesh_world.hpp), in
// virtual time, all randomness from one seed. A run starts the nodes, lets them converge, injects a
// random schedule of faults, heals everything and checks the invariants that
// doc/how-to/test-and-fuzz.md#the-membership-simulator lists.
//
//   mesh_sim --nodes N --seeds S [--seed X] [--faults LIST] [--seeds-nodes K]
//   mesh_sim --nodes N --seeds S --gray [--gray-seconds T]
//
// runs seeds X … X+S−1 (X defaults to 1; LIST is comma-separated fault kinds, `all` (the
// default) or `none`) and prints `seeds_run S violations V max_converge_virtual_s T`,
// preceded by one line per failing run with the command that replays it. Exit status 1
// when a run violated an invariant, 2 on a usage error. RPCLB_SIM_THREADS (default: the
// number of cores) runs seeds in parallel; RPCLB_SIM_VERBOSE=1 prints one line per run.
#include "mesh_world.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace rpclb::sim {
namespace {

enum class Fault { drop, delay, reorder, partition, asym, crash, restart, stall, mass_restart, drain };
constexpr const char* fault_names[] = {"drop",  "delay",   "reorder", "partition",    "asym",
                                       "crash", "restart", "stall",   "mass_restart", "drain"};
constexpr int fault_kinds = 10;

// The groups nodes join: about group_nodes nodes in all (every node up to that many), each
// in one group.
constexpr int group_count = 4;
constexpr double group_nodes = 200;

struct Options {
    std::uint32_t nodes = 0;
    std::uint32_t seed_nodes = 1;
    std::uint64_t runs = 0;
    std::uint64_t first_seed = 1;
    std::string fault_list = "all";
    std::uint64_t idle_timeout_ms = 3000;
    std::vector<Fault> faults;
    // What a node runs with at the default idle timeout.
    DetectorOptions detector = DetectorOptions::from_idle_timeout(std::chrono::milliseconds(3000));
    NetOptions net;
    Micros fault_phase = 30 * sec;  // faults start within this
    bool stall_out = false;         // measure instead: one node stalled, until out of every view
    bool relinked = false;          // --stall-out: the stalled node refuted, then most others relinked it
    bool gray = false;              // measure instead: gray links and CPU stalls (Run::gray)
    Micros gray_length = 60 * sec;  // --gray: simulated time per seed after convergence
};

// --gray: what every link loses, how many nodes stall and for how long, and the targets.
constexpr double gray_loss = 0.05;
constexpr double gray_stalling_share = 0.01;
constexpr Micros gray_stall = 2 * sec;
constexpr double gray_false_suspicions_target = 1.0;  // per node per simulated day
constexpr double gray_detect_p99_target_s = 5.0;

// The bounds the invariants check, all derived from the options.
struct Bounds {
    Micros transit;     // longest a frame sent before the heal can take: latency + both ends' fault delays
    Micros handshake;   // dial to link, at most
    Micros probe;       // longest probe interval: stretched by the highest local health
    Micros suspicion;   // longest suspicion: suspicion_max
    Micros converge;    // invariant 1: heal → every view whole, no suspect
    Micros removed;     // invariant 2: a live member out of a live node's view after the heal
    Micros excuse;      // invariant 4: after a fault ends, verdicts involving its nodes are excused this long
    Micros detect;      // invariant 7 (--stall-out): a stalled node out of every view

    explicit Bounds(const Options& o) {
        const auto& n = o.net;
        const Micros retransmits = n.rto * ((Micros{1} << n.max_retransmits) - 1);
        transit = n.latency_max + 2 * (n.delay_max + n.delay_jitter + n.reorder_jitter + retransmits);
        handshake = n.handshake_trips * n.latency_max;
        probe = to_micros(o.detector.probe_interval) * (1 + o.detector.max_local_health);
        suspicion = to_micros(o.detector.suspicion_max);
        // Held and delayed frames land (transit); a probe begun before the heal ends (probe)
        // and its suspicion runs out or is refuted (suspicion, transit); a "dead" verdict's
        // link is redialled at the next tick, once more if the peer still held the old link
        // (2 reconnects, 2 handshakes); the last gossip lands (transit).
        converge = 3 * transit + probe + suspicion + 2 * n.reconnect + 2 * handshake;
        removed = suspicion + n.reconnect + handshake + 2 * transit;
        excuse = transit + probe + suspicion + transit;
        // Someone probes it within a step (two, from the stall's instant), then the
        // indirect probes' wait, the suspicion, and the "dead" gossip's latency.
        detect = 2 * to_micros(o.detector.probe_interval) + 2 * to_micros(o.detector.probe_timeout) + suspicion +
                 n.latency_max;
    }
};

struct RunResult {
    std::uint64_t seed = 0;
    std::vector<std::string> violations;
    double clean_s = -1;  // clean start → converged, from the last node's start
    double heal_s = -1;   // heal → converged
    std::uint64_t events = 0;
    std::size_t faults = 0;
    std::uint64_t false_dead = 0;
    std::uint64_t broken = 0;
    std::uint64_t dead = 0;  // every "dead" verdict, excused or not
    double stall_out_s = -1;  // --stall-out: stall → out of every live view; --gray: the silent crash's
    std::uint64_t false_suspicions = 0;  // --gray: suspicions of a member that answers
    std::uint64_t by_stallers = 0;       // of those, raised by a node that stalls
    std::uint64_t suspicions = 0;        // --gray: every suspicion raised or confirmed
    std::uint64_t false_broken = 0;      // --gray: links between members that answer found broken
    double node_seconds = 0;             // --gray: nodes × simulated seconds watched
};

std::string seconds(Micros t) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(t) / sec);
    return buf;
}

class Run {
public:
    Run(const Options& o, std::uint64_t seed)
        : o_(o), b_(o), w_(o.nodes, o.seed_nodes, o.detector, o.net, seed), excused_(o.nodes, 0),
          group_of_(o.nodes, -1), drains_(o.nodes) {
        r_.seed = seed;
        std::bernoulli_distribution in_group(std::min(1.0, group_nodes / o.nodes));
        std::uniform_int_distribution<int> which(0, group_count - 1);
        for (auto& g : group_of_)
            if (in_group(w_.rng())) g = which(w_.rng());
        // A node (a new process too) joins its group when it starts, as its balancer does.
        w_.on_started = [this](std::uint32_t i) {
            if (group_of_[i] >= 0) w_.groups(i)->join(group_name(group_of_[i]), {{"node", i}});
        };
        w_.on_group_added = [this](std::uint32_t viewer, std::uint32_t member, std::uint32_t gen, Micros sent,
                                   const std::string& group) {
            for (const auto& d : drains_[member])
                if (d.gen == gen && sent >= d.from && sent < d.to)
                    violate("6: " + w_.name(viewer) + " added " + w_.name(member) + " to " + group +
                            " from a frame sent at " + seconds(sent) + " s, while it drained (" + seconds(d.from) +
                            " … " + seconds(d.to) + " s)");
        };
        w_.on_dead = [this](std::uint32_t viewer, std::uint32_t member, std::uint32_t inc, std::uint32_t source) {
            judge_dead(viewer, member, inc, source);
        };
        w_.on_unlinked = [this](std::uint32_t viewer, std::uint32_t member) {
            if (tracking_ && w_.live(viewer) && w_.live(member)) removed_.try_emplace(key(viewer, member), w_.now());
            if (member == stalled_ && viewer != stalled_ && !out_of_[viewer]) {
                out_of_[viewer] = true;
                ++outs_;
            }
        };
        w_.on_suspect = [this](std::uint32_t viewer, std::uint32_t member) {
            if (!o_.gray || !watching_) return;
            ++r_.suspicions;
            // True when the member stalls, stalled within a probe's life, or has stopped.
            if (member == stalled_ || w_.health(member) != Health::up || w_.now() < answers_from_[member]) return;
            ++r_.false_suspicions;
            if (staller_[viewer]) ++r_.by_stallers;
        };
        w_.on_broken = [this](std::uint32_t viewer, std::uint32_t member) {
            if (!o_.gray || !watching_) return;
            for (auto i : {viewer, member})
                if (i == stalled_ || w_.now() < answers_from_[i]) return;
            ++r_.false_broken;
        };
        w_.on_linked = [this](std::uint32_t a, std::uint32_t b) {
            if (tracking_) {
                settle(a, b);
                settle(b, a);
            }
        };
    }

    RunResult go() {
        const auto n = o_.nodes;
        auto& rng = w_.rng();
        if (!clean_start()) return finish();
        if (o_.stall_out) return stall_out();
        if (o_.gray) return gray();

        // Faults, drawn now; which nodes they hit is drawn when they start.
        Micros heal = w_.now();
        if (!o_.faults.empty()) {
            const Micros begin = w_.now() + 1 * sec;
            bool mass_done = false;
            for (Micros t = begin; t < begin + o_.fault_phase;
                 t += std::uniform_int_distribution<Micros>(500 * ms, 3 * sec)(rng)) {
                auto kind = o_.faults[std::uniform_int_distribution<std::size_t>(0, o_.faults.size() - 1)(rng)];
                if (kind == Fault::mass_restart) {
                    if (mass_done) continue;
                    mass_done = true;
                }
                const Micros length = std::uniform_int_distribution<Micros>(1 * sec, 8 * sec)(rng);
                // A restart's downtime ends by t + 2 s; the other faults last `length`.
                const bool restarts = kind == Fault::restart || kind == Fault::mass_restart;
                heal = std::max(heal, restarts ? t + 2 * sec : t + length);
                inject(kind, t, length);
                ++r_.faults;
            }
        }
        w_.run_until(heal);
        // Heal everything still broken (every fault ends by `heal` on its own; this is the
        // safety net).
        if (w_.partitioned()) w_.heal_partition();
        for (std::uint32_t i = 0; i < n; ++i) w_.resume(i);

        // Invariant 2 from here: every live member missing from a live view is timed.
        tracking_ = true;
        heal_ = w_.now();
        for (std::uint32_t i = 0; i < n; ++i)
            for (std::uint32_t j = 0; j < n; ++j)
                if (i != j && w_.live(i) && w_.live(j) && !w_.linked(i).test(j)) removed_.emplace(key(i, j), heal_);

        auto converged_at = wait_converged(heal_, heal_ + b_.converge);
        if (!converged_at) {
            violate("1: views not whole " + seconds(b_.converge) + " s after the heal (" + why_not() + ")");
        } else {
            r_.heal_s = static_cast<double>(*converged_at - heal_) / sec;
            // Stays so: nothing left over from the faults undoes it.
            w_.run_until(heal_ + b_.converge + b_.removed);
            if (!whole() || !consistent(true))
                violate("1: views came apart after converging (" + why_not() + ")");
        }
        for (const auto& [k, since] : removed_)
            if (w_.now() - std::max(since, heal_) > b_.removed) {
                violate("2: " + w_.name(static_cast<std::uint32_t>(k >> 32)) + " still without " +
                        w_.name(static_cast<std::uint32_t>(k)) + " at the end");
                break;
            }
        return finish();
    }

private:
    // The seeds start at 0, the others within 2 s; false (a violation) when the views are
    // not whole within 120 s of the last start.
    bool clean_start() {
        Micros last_start = 0;
        for (std::uint32_t i = 0; i < o_.nodes; ++i) {
            const Micros t = w_.is_seed(i) ? 0 : std::uniform_int_distribution<Micros>(0, 2 * sec)(w_.rng());
            last_start = std::max(last_start, t);
            w_.at(t, [this, i] { w_.start(i); });
        }
        const auto converged_at = wait_converged(last_start, last_start + 120 * sec);
        if (!converged_at) {
            violate("1: no convergence from a clean start within 120 s of the last start (" + why_not() + ")");
            return false;
        }
        r_.clean_s = static_cast<double>(*converged_at - last_start) / sec;
        return true;
    }

    // --stall-out: 1 s after convergence one node (not a seed) stalls, as under SIGSTOP;
    // measures the time until every other node has it out of its view (at most 60 s or
    // twice Bounds::detect, whichever is longer), which must be within Bounds::detect.
    // With --relinked, the node first refutes a suspicion and then most others lose it and
    // link it again (relink()).
    RunResult stall_out() {
        w_.run_until(w_.now() + 1 * sec);
        const auto victim = pick([&](std::uint32_t i) { return w_.health(i) == Health::up && !w_.is_seed(i); });
        if (victim == o_.nodes) {
            violate("no node to stall");
            return finish();
        }
        if (o_.relinked && !relink(victim)) return finish();
        stalled_ = victim;
        out_of_.assign(o_.nodes, false);
        std::uint32_t others = 0;
        for (std::uint32_t i = 0; i < o_.nodes; ++i) others += i != stalled_ && w_.live(i);
        const Micros from = w_.now();
        w_.stall(stalled_);
        const Micros limit = std::max(60 * sec, 2 * b_.detect);
        while (outs_ < others && w_.now() < from + limit) w_.run_until(w_.now() + 10 * ms);
        if (outs_ < others)
            violate("7: stalled " + w_.name(stalled_) + " still in " + std::to_string(others - outs_) + " views after " +
                    seconds(limit) + " s");
        else
            r_.stall_out_s = static_cast<double>(w_.now() - from) / sec;
        if (outs_ == others && w_.now() - from > b_.detect)
            violate("7: stalled " + w_.name(stalled_) + " out of every view only after " + seconds(w_.now() - from) +
                    " s (bound " + seconds(b_.detect) + " s)");
        return finish();
    }

    // --gray (the links already lose gray_loss of their segments, retransmitted as TCP
    // does): for gray_length after convergence, 1 % of the nodes (at least one, never a
    // seed) stall for 2 s again and again, 8–18 s apart, and one other node stops for good
    // between a quarter and a half of the way (silently, as a host that loses power: no
    // FIN). Counts the suspicions of members that answer, and times the stopped node out
    // of every view but the stallers' (which may be stalled).
    RunResult gray() {
        const auto n = o_.nodes;
        auto& rng = w_.rng();
        const Micros begin = w_.now(), end = begin + o_.gray_length;
        // A member that stalled is excused until a probe begun during its stall has ended.
        const Micros grace = 2 * to_micros(o_.detector.probe_timeout_max) + to_micros(o_.detector.probe_interval);
        staller_.assign(n, false);
        answers_from_.assign(n, 0);
        const auto stallers = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(n * gray_stalling_share));
        for (std::uint32_t k = 0; k < stallers; ++k) {
            const auto i = pick([&](std::uint32_t i) { return !w_.is_seed(i) && !staller_[i]; });
            if (i == n) break;
            staller_[i] = true;
            for (Micros t = begin + std::uniform_int_distribution<Micros>(0, 10 * sec)(rng); t < end;
                 t += gray_stall + std::uniform_int_distribution<Micros>(8 * sec, 18 * sec)(rng)) {
                w_.at(t, [this, i, grace] {
                    w_.stall(i);
                    excuse(i, w_.now() + gray_stall);
                    answers_from_[i] = w_.now() + gray_stall + grace;
                    w_.at(w_.now() + gray_stall, [this, i] { w_.resume(i); });
                });
            }
        }
        const auto victim = pick([&](std::uint32_t i) { return !w_.is_seed(i) && !staller_[i]; });
        if (victim == n) {
            violate("no node to stop");
            return finish();
        }
        std::uint32_t others = 0;
        for (std::uint32_t i = 0; i < n; ++i) others += i != victim && !staller_[i];
        Micros stopped_at = 0;
        w_.at(begin + std::uniform_int_distribution<Micros>(o_.gray_length / 4, o_.gray_length / 2)(rng),
              [this, victim, &stopped_at] {
                  stopped_at = w_.now();
                  out_of_.assign(o_.nodes, false);
                  for (std::uint32_t i = 0; i < o_.nodes; ++i) out_of_[i] = staller_[i];  // not counted
                  stalled_ = victim;
                  w_.stall(victim);
                  excuse(victim, std::numeric_limits<Micros>::max() / 4);
              });
        watching_ = true;
        while (w_.now() < end) {
            w_.run_until(std::min(end, w_.now() + 10 * ms));
            if (stopped_at > 0 && outs_ == others && r_.stall_out_s < 0)
                r_.stall_out_s = static_cast<double>(w_.now() - stopped_at) / sec;
        }
        r_.node_seconds = static_cast<double>(n) * static_cast<double>(o_.gray_length) / sec;
        if (r_.stall_out_s < 0)
            violate("gray: stopped " + w_.name(victim) + " still in " + std::to_string(others - outs_) + " views at the end");
        return finish();
    }

    // Node v refutes a suspicion (its links slowed past the probe timeout for 1.5 s), then
    // 90 % of the other nodes are cut off from it (and from the other 10 %) for 6 s: they
    // drop it and link it again after the heal, when they only know it from the new link.
    // False (a violation) when it never refuted or the views did not converge again.
    bool relink(std::uint32_t v) {
        for (int tries = 0; tries < 5 && w_.detector(v)->version() == 0; ++tries) {
            const Micros end = w_.now() + 1500 * ms;
            w_.set_delay(v, o_.net.delay_max, end);
            excuse(v, end);
            w_.run_until(w_.now() + 5 * sec);
        }
        if (w_.detector(v)->version() == 0) {
            violate("relink: " + w_.name(v) + " was never suspected");
            return false;
        }
        std::vector<bool> side(o_.nodes);
        side[v] = true;
        std::bernoulli_distribution stays(0.1);
        for (std::uint32_t i = 0; i < o_.nodes; ++i)
            if (i != v) side[i] = stays(w_.rng());
        const Micros end = w_.now() + 6 * sec;
        for (std::uint32_t i = 0; i < o_.nodes; ++i)
            if (side[i]) excuse(i, end);
        w_.partition(std::move(side), World::Cut::both_ways);
        w_.run_until(end);
        w_.heal_partition();
        if (!wait_converged(end, end + b_.converge)) {
            violate("relink: views not whole " + seconds(b_.converge) + " s after the cut (" + why_not() + ")");
            return false;
        }
        w_.run_until(w_.now() + 1 * sec);
        return true;
    }

    static std::uint64_t key(std::uint32_t a, std::uint32_t b) { return std::uint64_t{a} << 32 | b; }
    static std::string group_name(int g) { return "g" + std::to_string(g); }

    void violate(std::string what) {
        if (r_.violations.size() < 8) r_.violations.push_back(std::move(what));
    }
    RunResult finish() {
        r_.events = w_.events();
        r_.broken = w_.broken();
        return std::move(r_);
    }

    void settle(std::uint32_t viewer, std::uint32_t member) {
        auto it = removed_.find(key(viewer, member));
        if (it == removed_.end()) return;
        const auto out = w_.now() - std::max(it->second, heal_);
        if (out > b_.removed && !removed_reported_) {
            removed_reported_ = true;
            violate("2: " + w_.name(member) + " out of " + w_.name(viewer) + "'s view for " + seconds(out) +
                    " s after the heal (bound " + seconds(b_.removed) + " s)");
        }
        removed_.erase(it);
    }

    // Invariant 4: a "dead" verdict on a node that is up, unstalled and reachable, the
    // incarnation the viewer linked, with no fault touching the viewer, the member or the
    // node that said so in the last `excuse`.
    void judge_dead(std::uint32_t viewer, std::uint32_t member, std::uint32_t inc, std::uint32_t source) {
        const auto now = w_.now();
        ++r_.dead;
        if (w_.health(member) != Health::up || w_.incarnation(member) != inc) return;
        if (w_.health(viewer) != Health::up) return;
        if (!w_.reachable(viewer, member) || !w_.reachable(member, viewer)) return;
        if (now < excused_[viewer] || now < excused_[member] || now < excused_[source]) return;
        if (r_.false_dead++ == 0)
            violate("4: " + w_.name(viewer) + " found " + w_.name(member) + " (live, reachable) dead at " +
                    seconds(now) + " s" + (source == viewer ? "" : ", told by " + w_.name(source)) +
                    (std::max({excused_[viewer], excused_[member], excused_[source]}) == 0
                         ? "; no fault touched them"
                         : "; faults touching them ended by " +
                               seconds(std::max({excused_[viewer], excused_[member], excused_[source]}) - b_.excuse) +
                               " s"));
    }

    void excuse(std::uint32_t i, Micros end) {
        excused_[i] = std::max(excused_[i], end + b_.excuse);
    }
    std::uint32_t pick(auto&& ok) {
        auto& rng = w_.rng();
        for (int tries = 0; tries < 64; ++tries) {
            const auto i = std::uniform_int_distribution<std::uint32_t>(0, o_.nodes - 1)(rng);
            if (ok(i)) return i;
        }
        return o_.nodes;  // none found
    }
    std::vector<std::uint32_t> some_nodes() {
        const auto count = std::uniform_int_distribution<std::uint32_t>(1, std::max<std::uint32_t>(1, o_.nodes / 20))(w_.rng());
        std::vector<std::uint32_t> v;
        for (std::uint32_t k = 0; k < count; ++k)
            if (auto i = pick([&](std::uint32_t i) { return w_.live(i); }); i < o_.nodes) v.push_back(i);
        return v;
    }

    void inject(Fault kind, Micros t, Micros length) {
        const Micros end = t + length;
        switch (kind) {
        case Fault::drop:
        case Fault::delay:
        case Fault::reorder:
            w_.at(t, [this, kind, end] {
                for (auto i : some_nodes()) {
                    if (kind == Fault::drop) w_.set_loss(i, end);
                    if (kind == Fault::reorder) w_.set_reorder(i, end);
                    if (kind == Fault::delay)
                        w_.set_delay(i, std::uniform_int_distribution<Micros>(50 * ms, o_.net.delay_max)(w_.rng()), end);
                    excuse(i, end);
                }
            });
            break;
        case Fault::partition:
        case Fault::asym:
            w_.at(t, [this, kind, end] {
                if (w_.partitioned()) return;  // one partition at a time
                std::vector<bool> side(o_.nodes);
                const double share = std::uniform_real_distribution<double>(0.1, 0.5)(w_.rng());
                for (std::uint32_t i = 0; i < o_.nodes; ++i) side[i] = std::bernoulli_distribution(share)(w_.rng());
                // The nodes of side A are excused: a verdict between two nodes of side B
                // (or about a node cut off from the viewer) is not.
                for (std::uint32_t i = 0; i < o_.nodes; ++i)
                    if (side[i]) excuse(i, end);
                w_.partition(std::move(side), kind == Fault::asym ? World::Cut::one_way : World::Cut::both_ways);
                w_.at(end, [this] { w_.heal_partition(); });
            });
            break;
        case Fault::crash:
            w_.at(t, [this, end] {
                // Permanently; never a seed (a node that restarts later needs one), and at
                // most a tenth of the nodes (one, below ten).
                if (crashed_ >= std::max<std::uint32_t>(1, o_.nodes / 10)) return;
                const auto i = pick([&](std::uint32_t i) { return w_.health(i) == Health::up && !w_.is_seed(i); });
                if (i == o_.nodes) return;
                ++crashed_;
                w_.crash(i);
                excuse(i, end);
            });
            break;
        case Fault::restart:
            w_.at(t, [this, t] {
                const auto i = pick([&](std::uint32_t i) { return w_.health(i) == Health::up; });
                if (i == o_.nodes) return;
                const Micros back = t + std::uniform_int_distribution<Micros>(200 * ms, 2 * sec)(w_.rng());
                w_.crash(i);
                excuse(i, back);
                w_.at(back, [this, i] { w_.start(i); });
            });
            break;
        case Fault::stall:
            w_.at(t, [this, end] {
                const auto i = pick([&](std::uint32_t i) { return w_.health(i) == Health::up; });
                if (i == o_.nodes) return;
                w_.stall(i);
                excuse(i, end);
                w_.at(end, [this, i] { w_.resume(i); });
            });
            break;
        case Fault::drain:
            w_.at(t, [this, end] {
                // A node drains: it leaves its group (as a balancer does on stop) and, once
                // the drain ends, joins it again.
                const auto i = pick([&](std::uint32_t i) { return w_.health(i) == Health::up && group_of_[i] >= 0; });
                if (i == o_.nodes) return;
                const auto gen = w_.incarnation(i);
                if (!drains_[i].empty() && drains_[i].back().gen == gen && drains_[i].back().to > w_.now()) return;
                drains_[i].push_back({gen, w_.now(), end});
                w_.groups(i)->leave(group_name(group_of_[i]));
                w_.at(end, [this, i, gen] {
                    if (w_.health(i) != Health::down && w_.incarnation(i) == gen)
                        w_.groups(i)->join(group_name(group_of_[i]), {{"node", i}});
                });
            });
            break;
        case Fault::mass_restart:
            w_.at(t, [this, t] {
                std::vector<std::uint32_t> up;
                for (std::uint32_t i = 0; i < o_.nodes; ++i)
                    if (w_.health(i) == Health::up) up.push_back(i);
                std::shuffle(up.begin(), up.end(), w_.rng());
                up.resize(up.size() / 2);
                for (auto i : up) {
                    const Micros back = t + std::uniform_int_distribution<Micros>(0, 2 * sec)(w_.rng());
                    w_.crash(i);
                    excuse(i, back);
                    w_.at(back, [this, i] { w_.start(i); });
                }
            });
            break;
        }
    }

    // Every live node linked to every other live node.
    bool whole() const {
        std::size_t live = 0;
        for (std::uint32_t i = 0; i < o_.nodes; ++i) live += w_.live(i);
        for (std::uint32_t i = 0; i < o_.nodes; ++i)
            if (w_.live(i) && w_.linked_count(i) != live - 1) return false;
        return true;
    }
    // Each link carries the member's current incarnation (invariant 3), the detector probes
    // exactly the linked members, and, with `suspects`, suspects none of them; every live
    // node's snapshot of each group holds exactly the live nodes in it (invariant 5).
    bool consistent(bool suspects) {
        if (!groups_agree()) return false;
        for (std::uint32_t i = 0; i < o_.nodes; ++i) {
            if (!w_.live(i)) continue;
            const auto* fd = w_.detector(i);
            if (fd->size() != w_.linked_count(i)) {
                problem_ = w_.name(i) + "'s detector probes " + std::to_string(fd->size()) + " members, linked to " +
                           std::to_string(w_.linked_count(i));
                return false;
            }
            bool ok = true;
            w_.linked(i).for_each([&](std::uint32_t j) {
                if (!ok) return;
                if (!w_.live(j) || w_.linked_incarnation(i, j) != w_.incarnation(j)) {
                    problem_ = "3: " + w_.name(i) + " still links " + w_.name(j) + " incarnation " +
                               std::to_string(w_.linked_incarnation(i, j)) + ", current " +
                               std::to_string(w_.incarnation(j)) + (w_.live(j) ? "" : " (down)");
                    ok = false;
                } else if (suspects && fd->suspected(w_.name(j))) {
                    problem_ = w_.name(i) + " suspects " + w_.name(j);
                    ok = false;
                }
            });
            if (!ok) return false;
        }
        return true;
    }
    bool groups_agree() {
        std::vector<std::vector<std::string>> expected(group_count);
        for (std::uint32_t i = 0; i < o_.nodes; ++i)
            if (w_.live(i))
                for (const auto& g : w_.groups(i)->local_groups()) expected[std::stoi(g.substr(1))].push_back(w_.name(i));
        for (auto& names : expected) std::sort(names.begin(), names.end());
        for (std::uint32_t i = 0; i < o_.nodes; ++i) {
            if (!w_.live(i)) continue;
            for (int g = 0; g < group_count; ++g)
                if (const auto snapshot = w_.groups(i)->members(group_name(g)); snapshot->nodes != expected[g]) {
                    problem_ = "5: " + w_.name(i) + " has " + std::to_string(snapshot->nodes.size()) + " members in " +
                               group_name(g) + ", " + std::to_string(expected[g].size()) + " live nodes are in it";
                    return false;
                }
        }
        return true;
    }
    std::string why_not() {
        std::size_t live = 0;
        for (std::uint32_t i = 0; i < o_.nodes; ++i) live += w_.live(i);
        for (std::uint32_t i = 0; i < o_.nodes; ++i)
            if (w_.live(i) && w_.linked_count(i) != live - 1) {
                std::string missing;
                int shown = 0;
                for (std::uint32_t j = 0; j < o_.nodes && shown < 3; ++j)
                    if (j != i && w_.live(j) && !w_.linked(i).test(j)) {
                        missing += (shown++ ? "," : "") + w_.name(j);
                    }
                std::uint32_t j0 = 0;
                while (j0 == i || !w_.live(j0) || w_.linked(i).test(j0)) ++j0;
                return w_.name(i) + " links " + std::to_string(w_.linked_count(i)) + " of " + std::to_string(live - 1) +
                       " live nodes, missing " + missing + " [" + w_.debug_pair(i, j0) + "]";
            }
        consistent(true);
        return problem_;
    }
    // Steps of 100 ms until every view is whole and consistent, or `limit`.
    std::optional<Micros> wait_converged(Micros from, Micros limit) {
        w_.run_until(std::max(w_.now(), from));
        Micros next_full = 0;
        while (true) {
            if (whole() && w_.now() >= next_full) {
                if (consistent(true)) return w_.now();
                next_full = w_.now() + 500 * ms;  // the full check is O(N²): not every step
            }
            if (w_.now() >= limit) return std::nullopt;
            w_.run_until(std::min(limit, w_.now() + 100 * ms));
        }
    }

    const Options& o_;
    const Bounds b_;
    World w_;
    RunResult r_;
    std::vector<Micros> excused_;
    std::uint32_t crashed_ = 0;
    bool tracking_ = false;
    bool removed_reported_ = false;
    Micros heal_ = 0;
    std::uint32_t stalled_ = std::numeric_limits<std::uint32_t>::max();
    std::vector<bool> out_of_;
    bool watching_ = false;             // --gray: counting suspicions
    std::vector<bool> staller_;         // --gray: the nodes that stall again and again
    std::vector<Micros> answers_from_;  // --gray: a member that stalled is excused until then
    std::uint32_t outs_ = 0;
    std::unordered_map<std::uint64_t, Micros> removed_;
    std::vector<int> group_of_;  // the group each node joins, or -1
    struct Drain {
        std::uint32_t gen;  // the incarnation that drained
        Micros from, to;
    };
    std::vector<std::vector<Drain>> drains_;
    std::string problem_;
};

[[noreturn]] void usage(const std::string& why, int status = 2) {
    (status == 0 ? std::cout : std::cerr) << (why.empty() ? "" : "mesh_sim: " + why + "\n")
              << "usage: mesh_sim --nodes N --seeds S [--seed X] [--faults LIST] [--seeds-nodes K]\n"
                 "                [--idle-timeout-ms T] [--stall-out [--relinked]] [--gray [--gray-seconds S]]\n"
                 "  --seeds S        number of runs, with seeds X, X+1, ..., X+S-1 (X defaults to 1)\n"
                 "  --seeds-nodes K  nodes 0..K-1 are the seed nodes every node joins through (default 1)\n"
                 "  --faults    comma-separated, from: all none drop delay reorder partition asym crash restart "
                 "stall mass_restart drain (default all)\n"
                 "  --idle-timeout-ms T  the detector's timing as a node with this idle timeout runs it\n"
                 "                   (default 3000, the node's default)\n"
                 "  --stall-out      no faults: after convergence one node stalls (as under SIGSTOP);\n"
                 "                   prints the time until it is out of every view, over the seeds;\n"
                 "                   a run fails when that exceeds the detection bound\n"
                 "  --relinked       before the stall, the node refutes a suspicion, then 90 % of the\n"
                 "                   others lose it and link it again\n"
                 "  --gray           no faults: every link loses 5 % of its segments (TCP retransmits them),\n"
                 "                   1 % of the nodes stall for 2 s every 10-20 s, one node stops for good;\n"
                 "                   prints false suspicions per node per simulated day and the stopped\n"
                 "                   node's detection time; fails above 1 per node-day, a p99 of 5 s,\n"
                 "                   or any suspicion a stalling node raised of a member that answers\n"
                 "  --gray-seconds S simulated seconds per seed after convergence (default 60)\n"
                 "environment:\n"
                 "  RPCLB_SIM_THREADS=T  seeds run on T threads (default: the cores), same results\n"
                 "  RPCLB_SIM_VERBOSE=1  one line per run: faults, convergence, verdicts, events, time\n"
                 "  RPCLB_SIM_TRACE=ID   every frame to, from or about node ID, on stderr\n";
    std::exit(status);
}

Options parse(int argc, char** argv) {
    Options o;
    bool faults_given = false;
    auto number = [&](int& k) -> std::uint64_t {
        if (k + 1 >= argc) usage(std::string(argv[k]) + " needs a value");
        char* end = nullptr;
        const char* text = argv[++k];
        errno = 0;
        const auto v = std::strtoull(text, &end, 10);
        if (!end || *end || !(*text >= '0' && *text <= '9') || errno == ERANGE)
            usage(std::string("not a number: ") + text);
        return v;
    };
    for (int k = 1; k < argc; ++k) {
        const std::string a = argv[k];
        if (a == "--help" || a == "-h") usage("", 0);
        else if (a == "--nodes") o.nodes = static_cast<std::uint32_t>(std::min<std::uint64_t>(number(k), 1u << 30));
        else if (a == "--seeds") o.runs = number(k);
        else if (a == "--seed") o.first_seed = number(k);
        else if (a == "--seeds-nodes") o.seed_nodes = static_cast<std::uint32_t>(std::min<std::uint64_t>(number(k), 1u << 30));
        else if (a == "--faults") {
            if (k + 1 >= argc) usage("--faults needs a value");
            o.fault_list = argv[++k];
            faults_given = true;
        } else if (a == "--idle-timeout-ms") {
            const auto t = number(k);
            if (t < 1 || t > 3600000) usage("--idle-timeout-ms must be 1 … 3600000");
            o.detector = DetectorOptions::from_idle_timeout(std::chrono::milliseconds(t));
            o.idle_timeout_ms = t;
        } else if (a == "--stall-out") {
            o.stall_out = true;
        } else if (a == "--relinked") {
            o.relinked = true;
        } else if (a == "--gray") {
            o.gray = true;
        } else if (a == "--gray-seconds") {
            const auto t = number(k);
            if (t < 20 || t > 86400) usage("--gray-seconds must be 20 … 86400");
            o.gray_length = static_cast<Micros>(t) * sec;
        } else usage("unknown argument " + a);
    }
    if (o.nodes < 2 || o.nodes > 10000) usage("--nodes must be 2 … 10000");
    if (o.runs == 0 || o.runs > 1000000) usage("--seeds must be 1 … 1000000");
    if (o.fault_list.empty()) usage("--faults needs at least one kind (or none)");
    if (o.fault_list.back() == ',') usage("empty fault name in --faults");
    if (o.stall_out && faults_given) usage("--stall-out injects no faults: leave --faults out");
    if (o.relinked && !o.stall_out) usage("--relinked goes with --stall-out");
    if (o.gray && (faults_given || o.stall_out)) usage("--gray injects its own faults: leave --faults and --stall-out out");
    if (o.gray && o.seed_nodes + 2 > o.nodes) usage("--gray needs two nodes that are not seed nodes");
    // Its set-up (a 400 ms slow-down to be suspected, a 6 s cut to be dropped) is made for
    // the default timings.
    if (o.relinked && o.idle_timeout_ms != 3000) usage("--relinked runs with the default idle timeout only");
    if (o.first_seed > 0 && o.first_seed - 1 > std::numeric_limits<std::uint64_t>::max() - o.runs) usage("--seed X + S - 1 would wrap");
    if (o.seed_nodes < 1 || o.seed_nodes > o.nodes) usage("--seeds-nodes must be 1 … N");
    if (o.stall_out && o.seed_nodes >= o.nodes) usage("--stall-out stalls a node that is not a seed node: --seeds-nodes must be below N");
    std::stringstream list(o.fault_list);
    for (std::string f; std::getline(list, f, ',');) {
        if (f == "all") {
            for (int i = 0; i < fault_kinds; ++i) o.faults.push_back(static_cast<Fault>(i));
        } else if (f != "none") {
            int i = 0;
            while (i < fault_kinds && f != fault_names[i]) ++i;
            if (i == fault_kinds) usage(f.empty() ? "empty fault name in --faults" : "unknown fault " + f);
            o.faults.push_back(static_cast<Fault>(i));
        }
    }
    if (o.stall_out || o.gray) o.faults.clear();  // none: the longest convergence is then the clean start's
    if (o.gray) o.net.link_loss = gray_loss;
    if (o.seed_nodes >= o.nodes && std::find(o.faults.begin(), o.faults.end(), Fault::crash) != o.faults.end())
        std::cerr << "mesh_sim: warning: every node is a seed node, and a crash never takes one: no crash is injected\n";
    return o;
}

}  // namespace
}  // namespace rpclb::sim

int main(int argc, char** argv) {
    using namespace rpclb::sim;
    auto o = parse(argc, argv);
    if (const char* t = std::getenv("RPCLB_SIM_TRACE")) {
        const std::string_view id(t);
        if (id.empty() || id.size() > 9 || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
            std::stoul(std::string(id)) >= o.nodes)
            usage("RPCLB_SIM_TRACE must be a node number below --nodes, not \"" + std::string(id) + "\"");
        o.net.trace = std::stol(std::string(id));
    }
    const Bounds b(o);
    const char* verbose_env = std::getenv("RPCLB_SIM_VERBOSE");
    const bool verbose = verbose_env && *verbose_env && std::string_view(verbose_env) != "0";
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    if (const char* t = std::getenv("RPCLB_SIM_THREADS")) threads = std::clamp(std::atoi(t), 1, 256);
    threads = static_cast<unsigned>(std::min<std::uint64_t>(threads, o.runs));
    if (verbose)
        std::cout << "bounds: converge " << seconds(b.converge) << " s, removed " << seconds(b.removed)
                  << " s, excuse " << seconds(b.excuse) << " s (transit " << seconds(b.transit) << ", probe "
                  << seconds(b.probe) << ", suspicion " << seconds(b.suspicion) << ")" << std::endl;

    std::vector<RunResult> results(o.runs);
    std::atomic<std::uint64_t> next{0};
    std::mutex print;
    auto worker = [&] {
        for (std::uint64_t k; (k = next++) < o.runs;) {
            const auto started = std::chrono::steady_clock::now();
            results[k] = Run(o, o.first_seed + k).go();
            if (verbose) {
                const auto& r = results[k];
                rusage ru{};
                getrusage(RUSAGE_SELF, &ru);
                std::lock_guard lock(print);
                std::cout << "seed " << r.seed << " faults " << r.faults << " clean_converge_virtual_s " << r.clean_s
                          << " heal_converge_virtual_s " << r.heal_s << " false_dead " << r.false_dead << " dead_verdicts " << r.dead << " broken " << r.broken << " events "
                          << r.events << " wall_s "
                          << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
                          << " max_rss_mib " << ru.ru_maxrss / 1024 << std::endl;
            }
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();

    std::uint64_t violations = 0;
    double max_converge = 0;
    for (const auto& r : results) {
        max_converge = std::max({max_converge, r.heal_s, o.faults.empty() ? r.clean_s : 0.0});
        if (r.violations.empty()) continue;
        ++violations;
        std::cout << "FAIL replay: mesh_sim --nodes " << o.nodes << " --seeds 1 --seed " << r.seed
                  << (o.stall_out ? std::string() : " --faults " + o.fault_list)
                  << (o.seed_nodes != 1 ? " --seeds-nodes " + std::to_string(o.seed_nodes) : std::string())
                  << (o.idle_timeout_ms != 3000 ? " --idle-timeout-ms " + std::to_string(o.idle_timeout_ms) : std::string())
                  << (o.stall_out ? " --stall-out" : "") << (o.relinked ? " --relinked" : "")
                  << (o.gray ? " --gray --gray-seconds " + std::to_string(o.gray_length / sec) : std::string()) << "\n";
        for (const auto& v : r.violations) std::cout << "  violated " << v << "\n";
    }
    std::cout << "seeds_run " << o.runs << " violations " << violations << " max_converge_virtual_s " << max_converge
              << std::endl;
    if (o.stall_out) {
        std::vector<double> outs;
        for (const auto& r : results)
            if (r.stall_out_s >= 0) outs.push_back(r.stall_out_s);
        std::sort(outs.begin(), outs.end());
        auto at = [&](double q) { return outs.empty() ? -1.0 : outs[static_cast<std::size_t>(q * (outs.size() - 1))]; };
        std::cout << "stall_out_virtual_s median " << at(0.5) << " p90 " << at(0.9) << " p99 " << at(0.99) << " max "
                  << at(1.0) << std::endl;
    }
    bool missed = false;
    if (o.gray) {
        std::vector<double> detect;
        std::uint64_t false_suspicions = 0, by_stallers = 0, dead = 0, broken = 0, false_dead = 0, suspicions = 0,
                      false_broken = 0;
        double node_days = 0;
        for (const auto& r : results) {
            if (r.stall_out_s >= 0) detect.push_back(r.stall_out_s);
            false_suspicions += r.false_suspicions;
            by_stallers += r.by_stallers;
            false_dead += r.false_dead;
            suspicions += r.suspicions;
            false_broken += r.false_broken;
            broken += r.broken;
            dead += r.dead;
            node_days += r.node_seconds / 86400;
        }
        std::sort(detect.begin(), detect.end());
        auto at = [&](double q) { return detect.empty() ? -1.0 : detect[static_cast<std::size_t>(q * (detect.size() - 1))]; };
        const double rate = node_days > 0 ? static_cast<double>(false_suspicions) / node_days : 0;
        const double drop_rate = node_days > 0 ? static_cast<double>(false_broken + false_dead) / node_days : 0;
        std::cout << "gray: " << o.nodes << " nodes, " << gray_loss * 100 << " % loss on every link, "
                  << gray_stall / sec << " s stalls on " << gray_stalling_share * 100 << " % of the nodes, "
                  << o.gray_length / sec << " simulated s per seed, " << node_days << " node-days\n"
                  << "gray: false_suspicions " << false_suspicions << " (" << by_stallers << " by stalling nodes) = "
                  << rate << " per node per simulated day (target <= " << gray_false_suspicions_target << ")\n"
                  << "gray: false_dead " << false_dead << " false_broken_links " << false_broken << " (of " << broken
                  << " broken) = " << drop_rate << " healthy links dropped per node per simulated day (target <= "
                  << gray_false_suspicions_target << "); dead_verdicts " << dead << " suspicions " << suspicions << "\n"
                  << "gray: silent_stop_out_of_every_view_virtual_s median " << at(0.5) << " p90 " << at(0.9) << " p99 "
                  << at(0.99) << " max " << at(1.0) << " (target p99 <= " << gray_detect_p99_target_s << ")" << std::endl;
        // A node whose own stall made it suspect others should have doubted itself first.
        missed = rate > gray_false_suspicions_target || by_stallers > 0 || drop_rate > gray_false_suspicions_target || at(0.99) > gray_detect_p99_target_s || detect.empty();
        if (missed) std::cout << "gray: a target was missed" << std::endl;
    }
    return violations > 0 || missed ? 1 : 0;
}
