// Membership: the node's one timer (the failure detector's instants, the reconnect tick,
// the trim tick), the detector's frames and verdicts, and
// the name rule's messages. The rest of Mesh is in mesh.cpp and mesh_loss.cpp.
#include "membership/mesh.hpp"
#include "transport/block_cache.hpp"

#include <rpclb/detail/log.hpp>

#include <sstream>

namespace rpclb::detail {

namespace {

// How often the links' kept large-frame buffers (and the process's decoded large values)
// are trimmed: a buffer unused for one to two of these is freed.
constexpr std::chrono::seconds trim_interval{2};

}  // namespace

std::optional<std::chrono::microseconds> Mesh::keepalive_rtt(std::string_view node) const {
    std::lock_guard lock(detector_mutex_);
    return detector_.rtt(node);
}

void Mesh::act(FailureDetector::Actions actions) {
    if (actions.empty()) return;
    std::vector<std::pair<std::shared_ptr<Connection>, wire::Probe>> sends;
    std::vector<std::pair<std::shared_ptr<Connection>, wire::MemberState>> notices;
    std::vector<std::pair<std::shared_ptr<Connection>, bool>> ended;  // true: the member is dead
    {
        std::lock_guard lock(mutex_);
        for (auto& [node, probe] : actions.sends)
            if (auto it = peers_.find(node); it != peers_.end()) sends.emplace_back(it->second, std::move(probe));
        for (auto& [node, state] : actions.notices)
            if (auto it = peers_.find(node); it != peers_.end()) notices.emplace_back(it->second, std::move(state));
        for (const auto& node : actions.dead) {
            if (auto it = peers_.find(node); it != peers_.end()) {
                ended.emplace_back(it->second, true);
                remember(declared_dead_, node, it->second->peer().incarnation);
            }
        }
        for (const auto& node : actions.broken)
            if (auto it = peers_.find(node); it != peers_.end()) ended.emplace_back(it->second, false);
    }
    for (auto& [c, probe] : sends) {
        if (probe.kind == wire::ProbeKind::ping)
            c->probe(probe.seq);
        else
            c->send_control(wire::encode(wire::Frame(std::move(probe))));
    }
    for (auto& state : actions.gossip) broadcast(wire::encode(wire::Frame(std::move(state))));
    for (auto& [c, state] : notices) c->send_control(wire::encode(wire::Frame(std::move(state))));
    const auto seconds = [](std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); };
    if (actions.odd_rtt)
        RPCLB_LOG("mesh", warning) << actions.odd_rtt->first << ": a probe's round trip out of range, counted as "
                                   << actions.odd_rtt->second.count() << " µs (said once for this member)";
    if (actions.back)
        RPCLB_LOG("mesh", warning) << "back in touch with the members after " << seconds(*actions.back)
                                   << " s cut off; relinking them";
    if (actions.cut_off)
        RPCLB_LOG("mesh", error) << "cut off from every member for " << seconds(*actions.cut_off)
                                 << " s (no frame from any, no answer to this node's probes): dropping the links to all "
                                 << ended.size() << " of them, which fail their calls at once; redialling the seeds and "
                                 << "known nodes every " << seconds(options_.reconnect_interval) << " s until one answers";
    for (auto& [c, dead] : ended) {
        const LinkClose why{LinkError::timed_out, {},
                            dead               ? "no answer to probes for the suspicion timeout"
                            : actions.cut_off ? "this node is cut off from every member"
                                               : "no answer over this link to two probes in a row that others got answered"};
        if (!actions.cut_off)
            RPCLB_LOG("mesh", warning) << c->peer().node
                                       << (dead ? " did not answer probes and was suspected for the "
                                                  "suspicion timeout; dropping its link"
                                                : " answers other members' probes but not this "
                                                  "node's, twice in a row; dropping the link");
        // A peer that said bye has left its groups already, and a stopping node's links
        // are closing: the link just ends.
        if (c->going_away() || c->peer_quiet() || stopping_)
            c->abort(why.kind, why.detail);
        else
            drop_link(*c, why);
    }
}

void Mesh::on_name_taken(const std::shared_ptr<Connection>& c) {
    ++name_conflicts_;
    const auto& by = c->peer().node;
    const auto now = std::chrono::steady_clock::now();
    bool first = false;
    bool give_up = false;
    {
        std::lock_guard lock(mutex_);
        if (name_lost_) return;
        first = name_refused_.empty();
        const auto since = name_refused_.try_emplace(by, now).first->second;
        give_up = now - since >= name_refusal_window();
    }
    const auto window_s = std::chrono::duration<double>(name_refusal_window()).count();
    // Met directly, an older process of this very name refuses it (Mesh::on_established).
    const auto who = by == options_.name ? "the older process of this name at " + c->describe_peer() : by;
    if (give_up) {
        std::ostringstream why;
        why << who << " refused this node's name for " << window_s << " s: an older live incarnation of "
            << options_.name << " holds it there (stop the other process, or give this one another name)";
        return give_up_name(why.str());
    }
    if (first)
        RPCLB_LOG("mesh", warning) << who << " refused this node: an older live incarnation of " << options_.name
                                   << " holds that name there; trying again for up to " << window_s
                                   << " s in case it has crashed";
}

void Mesh::on_declared_dead(const std::shared_ptr<Connection>& c) {
    ++name_conflicts_;
    std::ostringstream why;
    why << c->describe_peer() << " declared this node's incarnation " << settings_.local.incarnation
        << " dead (it stopped answering probes, perhaps while frozen or cut off), and a restart of "
        << options_.name << " may hold the name now: this process gives the name up";
    give_up_name(why.str());
}

void Mesh::give_up_name(const std::string& why) {
    std::vector<std::shared_ptr<Connection>> links;
    {
        std::lock_guard lock(mutex_);
        if (name_lost_) return;
        name_lost_ = why;
        for (const auto& [name, c] : peers_) links.push_back(c);
    }
    RPCLB_LOG("mesh", error) << "giving up: " << why;
    for (const auto& c : links) c->close(LinkError::stopping, "this node gave up its name");
    if (on_name_lost_) on_name_lost_(why);
}

void Mesh::accepted_by(const std::string& node) {
    std::lock_guard lock(mutex_);
    name_refused_.erase(node);
}

std::optional<std::string> Mesh::name_lost() const {
    std::lock_guard lock(mutex_);
    return name_lost_;
}

bool Mesh::holds_name(const std::shared_ptr<Connection>& c) const {
    std::lock_guard lock(mutex_);
    const auto it = peers_.find(c->peer().node);
    return it != peers_.end() && it->second->peer().incarnation == c->peer().incarnation;
}

bool Mesh::name_clash_due(const std::string& key) {
    std::lock_guard lock(mutex_);
    if (name_clashes_logged_.size() >= 1024) name_clashes_logged_.clear();
    return name_clashes_logged_.insert(key).second;
}

void Mesh::on_probe_answered(const std::shared_ptr<Connection>& c, std::uint64_t seq) {
    drive([&](auto now) { return detector_.on_probe(now, c->peer().node, {wire::ProbeKind::ack, seq, {}}); });
}

void Mesh::arm_probe_timer() {
    // The reconnect tick may run up to half an interval early or late (on_probe_timer):
    // it wakes the node only when no probe comes within that half interval.
    auto next = detector_.next_timer();
    if (next_reconnect_at_ && !stopping_) {
        const auto latest = *next_reconnect_at_ + options_.reconnect_interval / 2;
        if (!next || latest < *next) next = latest;
    }
    if (!next || (probe_timer_at_ && *probe_timer_at_ == *next) || detector_stopped_) return;
    probe_timer_at_ = *next;
    pause_watch_.armed(*next);
    // Cancels the wait for another instant: an earlier one (a probe answered before its
    // timeout) would wake the node for nothing.
    probe_timer_.expires_at(*next);
    probe_timer_.async_wait([weak = self_](boost::system::error_code ec) {
        if (ec) return;
        if (auto self = weak.lock()) self->on_probe_timer();
    });
}

void Mesh::set_probe_epoch(FailureDetector::Clock::time_point now) {
    // Probe steps are counted from the wall clock's epoch, so that nodes whose clocks agree
    // follow one probe schedule (FailureDetector::set_epoch). Read at every timer, so that
    // a clock set or slewed moves the steps with it.
    const auto since_1970 = std::chrono::system_clock::now().time_since_epoch();
    detector_.set_epoch(now - std::chrono::duration_cast<FailureDetector::Clock::duration>(since_1970));
}

void Mesh::on_probe_timer() {
    bool trim = false;
    bool reconnect = false;
    drive([&](auto now) {
        probe_timer_at_.reset();
        pause_watch_.woke(now);
        pause_watch_.armed({});  // until arm_probe_timer arms it again
        if (now >= next_trim_) {
            next_trim_ = now + trim_interval;
            trim = true;
        }
        // The reconnect tick rides on a probe's wake-up when one comes within half an
        // interval of it: one wake-up a second for both, not two.
        const auto interval = options_.reconnect_interval;
        if (next_reconnect_at_ && now >= *next_reconnect_at_ - interval / 2) {
            next_reconnect_at_ = now + interval;
            reconnect = true;
        }
        set_probe_epoch(now);
        return detector_.on_timer(now);
    });
    if (reconnect && !stopping_) reconnect_tick();
    if (trim) {
        std::vector<std::shared_ptr<Connection>> links;
        {
            std::lock_guard lock(mutex_);
            for (auto& [name, c] : peers_) links.push_back(c);
        }
        for (auto& c : links) c->trim_spares();
        BlockCache::instance().trim();
    }
}

}  // namespace rpclb::detail
