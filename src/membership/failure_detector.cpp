#include "membership/failure_detector.hpp"

#include <algorithm>
#include <cmath>

namespace rpclb::detail {
namespace {

using std::chrono::milliseconds;

// Indirect pings this node relays at once for others; a ping_req beyond it is answered
// with a nack at once, so a peer cannot make this node hold an unbounded table.
constexpr std::size_t max_relays = 256;

// RFC 6298's clock granularity G: the variation term of a retransmission timeout is at least this.
constexpr std::chrono::microseconds rtt_granularity{1000};

}  // namespace

DetectorOptions DetectorOptions::from_idle_timeout(milliseconds idle) {
    DetectorOptions o;
    o.probe_interval = std::clamp(idle / 3, milliseconds(100), milliseconds(1000));
    o.probe_timeout = std::clamp(idle / 12, milliseconds(100), milliseconds(2000));
    o.probe_timeout_max = std::max(idle / 3, o.probe_timeout);
    o.suspicion_min = std::max(idle / 3, o.probe_timeout);
    o.suspicion_max = std::max(idle, o.suspicion_min);
    return o;
}

FailureDetector::FailureDetector(std::string self, std::string incarnation, DetectorOptions options,
                                 std::uint64_t seed)
    : self_(std::move(self)), incarnation_(std::move(incarnation)), options_(options), rng_(seed) {}

FailureDetector::Actions FailureDetector::add(const std::string& node, const std::string& incarnation) {
    Actions out;
    // A member linked anew knows this node at version 0 (what it heard before is gone
    // with the link); a suspicion it raised at that version would be stale to the others.
    if (version_ > 0)
        out.notices.emplace_back(node, wire::MemberState{wire::MemberHealth::alive, self_, incarnation_, version_});
    auto [it, inserted] = members_.try_emplace(node);
    auto& m = it->second;
    clear_suspicion(node);  // a fresh link answered a handshake just now; a new incarnation starts afresh
    if (!inserted && m.incarnation == incarnation) return out;
    m = Member{};
    m.incarnation = incarnation;
    if (inserted) {
        ring_current_ = false;
        retime_all();
    }
    return out;
}

void FailureDetector::remove(std::string_view node) {
    if (auto it = members_.find(node); it != members_.end()) {
        clear_suspicion(it->first);
        members_.erase(it);
        ring_current_ = false;
        retime_all();
    }
    std::erase(next_, node);
    std::erase_if(probes_, [&](const Probe& p) { return p.target == node; });
}

void FailureDetector::probe_next(const std::string& node) {
    if (!members_.contains(node) || probing(node)) return;
    std::erase(next_, node);
    next_.push_back(node);
}

FailureDetector::Probe* FailureDetector::probe_of(std::uint64_t seq) {
    for (auto& p : probes_)
        if (p.seq == seq) return &p;
    return nullptr;
}

bool FailureDetector::probing(std::string_view node) const {
    return std::any_of(probes_.begin(), probes_.end(), [&](const Probe& p) { return p.target == node; });
}

FailureDetector::Clock::duration FailureDetector::scaled(Clock::duration d) const { return d * (1 + health_); }

FailureDetector::Clock::duration FailureDetector::timeout_of(const Member& m) const {
    if (m.srtt_us == no_rtt) return options_.probe_timeout;
    // RFC 6298: RTO = SRTT + max(G, 4 × RTTVAR), here within the configured floor and cap.
    // No back-off after a timeout: the probe's indirect phase already waits as long again,
    // and a back-off would delay finding a link cut one way.
    const auto rto = std::chrono::microseconds(m.srtt_us) +
                     std::max(rtt_granularity, std::chrono::microseconds(4 * std::uint64_t{m.rttvar_us}));
    return std::clamp<Clock::duration>(rto, options_.probe_timeout, options_.probe_timeout_max);
}

FailureDetector::Clock::duration FailureDetector::timeout_of(std::string_view node) const {
    const auto it = members_.find(node);
    return scaled(it == members_.end() ? Clock::duration(options_.probe_timeout) : timeout_of(it->second));
}

void FailureDetector::sample_rtt(const std::string& node, Member& m, Clock::duration rtt, Actions& out) {
    // A round trip outside 0 … 10 × the cap (a clock that jumped, a pong from another
    // ping) is bounded, and told once per member.
    const auto most = std::chrono::duration_cast<std::chrono::microseconds>(options_.probe_timeout_max) * 10;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(rtt);
    if (us < std::chrono::microseconds(0) || us > most) {
        us = std::clamp(us, std::chrono::microseconds(0), most);
        if (!m.odd_rtt_told) out.odd_rtt.emplace(node, us);
        m.odd_rtt_told = true;
    }
    const auto r = static_cast<std::int64_t>(us.count());
    m.rtt_us = static_cast<std::uint32_t>(r);
    if (m.srtt_us == no_rtt) {
        m.srtt_us = static_cast<std::uint32_t>(r);
        m.rttvar_us = static_cast<std::uint32_t>(r / 2);
        return;
    }
    // alpha = 1/8, beta = 1/4 (RFC 6298 section 2).
    const auto srtt = static_cast<std::int64_t>(m.srtt_us);
    m.rttvar_us = static_cast<std::uint32_t>((3 * static_cast<std::int64_t>(m.rttvar_us) + std::abs(srtt - r)) / 4);
    m.srtt_us = static_cast<std::uint32_t>((7 * srtt + r) / 8);
}

void FailureDetector::postpone(Clock::time_point now) {
    for (auto& p : probes_) {
        if (p.acked) continue;
        const auto t = timeout_of(p.target);
        if (!p.indirect_sent) p.indirect_at = std::max(p.indirect_at, now + t);
        p.ends_at = std::max(p.ends_at, (p.indirect_sent ? now : p.indirect_at) + t);
    }
    // Suspicions keep their deadlines: the other members time the same suspicion and drop
    // the suspect then; this node waiting longer would only keep the views apart.
}

FailureDetector::Clock::duration FailureDetector::suspicion_timeout(const Suspicion& s) const {
    // Lifeguard: from the maximum down to the minimum as independent confirmations arrive,
    // on a log scale; k confirmations (the indirect probes' count) reach the minimum.
    // No more confirmations are awaited than there are other members to send them.
    const auto possible = members_.size() - 1;  // members_ holds the suspect
    const auto k = static_cast<double>(std::min(options_.indirect_probes, possible));
    const double confirmations = s.suspecters.empty() ? 0.0 : static_cast<double>(s.suspecters.size() - 1);
    const double fraction = k == 0 ? 1.0 : std::min(1.0, std::log(confirmations + 1.0) / std::log(k + 1.0));
    const auto span = options_.suspicion_max - options_.suspicion_min;
    const auto timeout =
        options_.suspicion_max - std::chrono::duration_cast<milliseconds>(span * fraction);
    return std::max<Clock::duration>(timeout, options_.suspicion_min);
}

void FailureDetector::change_health(int delta) {
    health_ = std::clamp(health_ + delta, 0, options_.max_local_health);
}

bool FailureDetector::confirms() {
    const auto others = members_.size() > 1 ? members_.size() - 1 : 1;  // the suspect's other members
    const double p = std::min(1.0, static_cast<double>(options_.indirect_probes + 1) / static_cast<double>(others));
    return p >= 1.0 || std::bernoulli_distribution(p)(rng_);
}

namespace {
// Floor division (rounds toward minus infinity).
std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }
}  // namespace

const std::vector<const std::string*>& FailureDetector::ring() const {
    if (!ring_current_) {
        if (ring_.capacity() > 2 * members_.size() + 64) ring_ = {};
        ring_.clear();
        ring_.reserve(members_.size());
        for (const auto& [name, m] : members_) ring_.push_back(&name);
        std::sort(ring_.begin(), ring_.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
        ring_current_ = true;
    }
    return ring_;
}

std::size_t FailureDetector::place() const {
    const auto& names = ring();
    return static_cast<std::size_t>(
        std::lower_bound(names.begin(), names.end(), self_, [](const std::string* a, const std::string& b) { return *a < b; }) -
        names.begin());
}

FailureDetector::Clock::duration FailureDetector::phase() const {
    return Clock::duration(Clock::duration(options_.probe_interval).count() * static_cast<std::int64_t>(place()) /
                           static_cast<std::int64_t>(members_.size() + 1));
}

std::int64_t FailureDetector::step(Clock::time_point at) const {
    return floor_div((at - epoch_ - phase()).count(), Clock::duration(options_.probe_interval).count());
}

FailureDetector::Clock::time_point FailureDetector::next_slot(Clock::time_point after) const {
    return epoch_ + phase() + (step(after) + 1) * Clock::duration(options_.probe_interval);
}

std::string FailureDetector::next_target(Clock::time_point now) {
    if (!next_.empty()) {
        auto target = std::move(next_.front());
        next_.erase(next_.begin());
        return target;
    }
    const auto& names = ring();
    if (names.empty()) return {};
    const auto members = static_cast<std::int64_t>(names.size());  // M - 1
    const auto at = static_cast<std::int64_t>(place());
    const auto offset = 1 + ((step(now) % members) + members) % members;  // 1 … M - 1
    const auto slot = (at + offset) % (members + 1);                  // never this node's
    return *names[static_cast<std::size_t>(slot < at ? slot : slot - 1)];
}

void FailureDetector::start_probe(Clock::time_point now, Actions& out) {
    next_probe_at_ = next_slot(now + scaled(options_.probe_interval) - options_.probe_interval);
    auto target = next_target(now);
    if (target.empty() || probing(target)) {
        if (members_.empty()) next_probe_at_.reset();  // nothing to probe until a member is added
        return;
    }
    if (!last_heard_) last_heard_ = now;  // silence is counted from the first probe
    probe(now, target, out);
}

void FailureDetector::probe(Clock::time_point now, const std::string& target, Actions& out) {
    Probe p{target, next_seq_++};
    auto& m = members_.find(target)->second;
    const auto timeout = scaled(timeout_of(m));
    p.indirect_at = now + timeout;
    p.ends_at = p.indirect_at + timeout;
    out.sends.emplace_back(target, wire::Probe{wire::ProbeKind::ping, p.seq, {}});
    m.last_seq = p.seq;
    m.last_sent = now;
    probes_.push_back(std::move(p));
}

void FailureDetector::end_probe(Clock::time_point now, Probe p, Actions& out) {
    if (p.acked) {
        auto it = members_.find(p.target);
        if (it == members_.end()) return;
        if (p.direct) {
            it->second.direct_failures = 0;
        } else if (++it->second.direct_failures == 1) {
            it->second.failing_seq = p.seq;
            probe(now, p.target, out);  // again at once, to tell a slow answer from a broken link
        } else {
            out.broken.push_back(p.target);
            remove(p.target);
        }
        return;
    }
    ++unanswered_;
    // Lifeguard: missed nacks mean this node, not the target, may be the slow one.
    if (p.nacks < p.asked) change_health(+1);
    auto it = members_.find(p.target);
    if (it == members_.end()) return;
    auto& m = it->second;
    // A new suspicion, or (suspected by others already) a confirmation: told to every
    // member, where a confirmation shortens the suspicion timeout.
    if (suspect(now, p.target, self_))
        out.gossip.push_back(wire::MemberState{wire::MemberHealth::suspect, p.target, m.incarnation, m.version});
}

bool FailureDetector::suspect(Clock::time_point now, const std::string& node, const std::string& by) {
    auto [it, fresh] = suspicions_.try_emplace(node, Suspicion{now, now, {}});
    auto& s = it->second;
    const bool counted = s.suspecters.size() <= options_.indirect_probes &&
                         std::find(s.suspecters.begin(), s.suspecters.end(), by) == s.suspecters.end();
    if (counted) s.suspecters.push_back(by);
    if (fresh) {
        s.due = s.since + suspicion_timeout(s);
        deadlines_.emplace(s.due, node);
    } else if (counted) {
        retime(node, s);
    }
    return counted;
}

void FailureDetector::retime(const std::string& node, Suspicion& s) {
    if (const auto due = s.since + suspicion_timeout(s); due < s.due) file(node, s, due);
}

void FailureDetector::file(const std::string& node, Suspicion& s, Clock::time_point due) {
    if (due == s.due) return;
    auto entry = deadlines_.extract(std::pair{s.due, node});
    entry.value().first = s.due = due;
    deadlines_.insert(std::move(entry));
}

void FailureDetector::retime_all() {
    if (members_.size() > options_.indirect_probes + 1) return;  // the count bounds nothing
    for (auto& [name, s] : suspicions_) retime(name, s);
}

void FailureDetector::clear_suspicion(const std::string& node) {
    const auto it = suspicions_.find(node);
    if (it == suspicions_.end()) return;
    deadlines_.erase(deadlines_.find(std::pair{it->second.due, node}));
    suspicions_.erase(it);
}

void FailureDetector::refute(std::uint64_t above, Actions& out) {
    version_ = std::max(version_, above) + 1;
    change_health(+1);
    out.gossip.push_back(wire::MemberState{wire::MemberHealth::alive, self_, incarnation_, version_});
}

FailureDetector::Actions FailureDetector::on_probe(Clock::time_point now, const std::string& from,
                                                   const wire::Probe& probe) {
    Actions out;
    heard(now, out);
    switch (probe.kind) {
    case wire::ProbeKind::ping:
        out.sends.emplace_back(from, wire::Probe{wire::ProbeKind::ack, probe.seq, {}});
        break;
    case wire::ProbeKind::ping_req:
        if (!members_.contains(probe.node) || relays_.size() >= max_relays) {
            out.sends.emplace_back(from, wire::Probe{wire::ProbeKind::nack, probe.seq, {}});
        } else {
            const auto seq = next_seq_++;
            relays_[seq] = Relay{from, probe.seq, now + timeout_of(probe.node)};
            out.sends.emplace_back(probe.node, wire::Probe{wire::ProbeKind::ping, seq, {}});
        }
        break;
    case wire::ProbeKind::ack:
        // The link answers, if slowly: an answer over it to any ping sent since the first
        // probe that only others got answered clears that probe's count (seqs only grow).
        if (auto it = members_.find(from); it != members_.end() && probe.seq >= it->second.failing_seq)
            it->second.direct_failures = 0;
        if (auto it = members_.find(from); it != members_.end() && it->second.last_seq == probe.seq) {
            // A pong after its probe ended is a sample too (each ping has its own seq, so
            // unlike TCP's retransmissions it is not ambiguous).
            if (it->second.last_sent != Clock::time_point::min())
                sample_rtt(it->first, it->second, now - it->second.last_sent, out);
            it->second.last_sent = Clock::time_point::min();
        }
        if (auto* p = probe_of(probe.seq)) {
            if (!p->acked) change_health(-1);
            p->acked = true;
            if (from == p->target) p->direct = true;
        } else if (auto it = relays_.find(probe.seq); it != relays_.end()) {
            out.sends.emplace_back(it->second.requester, wire::Probe{wire::ProbeKind::ack, it->second.requester_seq, {}});
            relays_.erase(it);
        }
        break;
    case wire::ProbeKind::nack:
        if (auto* p = probe_of(probe.seq)) ++p->nacks;
        break;
    }
    return out;
}

FailureDetector::Actions FailureDetector::on_member(Clock::time_point now, const std::string& from,
                                                    const wire::MemberState& state) {
    Actions out;
    heard(now, out);
    if (state.node == self_) {
        if (state.incarnation != incarnation_ || state.state == wire::MemberHealth::alive) return out;
        if (state.version >= version_)
            refute(state.version, out);
        else  // stale news: the sender (which linked this node again since) learns the version
            out.notices.emplace_back(from, wire::MemberState{wire::MemberHealth::alive, self_, incarnation_, version_});
        return out;
    }
    auto it = members_.find(state.node);
    if (it == members_.end() || it->second.incarnation != state.incarnation) return out;
    auto& m = it->second;
    switch (state.state) {
    case wire::MemberHealth::alive:
        if (state.version > m.version) {
            m.version = state.version;
            clear_suspicion(state.node);
        }
        break;
    case wire::MemberHealth::suspect:
        if (state.version >= m.version) {
            m.version = state.version;
            // About k + 1 of the members that hear it probe the suspect at once, so that
            // the suspicion is confirmed (or refuted) within a probe's time rather than
            // when the schedule comes to it; not every member, which would flood a suspect
            // that is only slow with probes it cannot answer in time.
            if (!suspicions_.contains(state.node)) {
                if (confirms() && !probing(state.node)) probe(now, state.node, out);
                // The suspect may not have heard it (the suspecter's link to it may be
                // going down, or cut): every member that hears it tells the suspect, so
                // that it can refute.
                if (from != state.node) out.notices.emplace_back(state.node, state);
            }
            suspect(now, state.node, from);
        }
        break;
    case wire::MemberHealth::dead:
        if (state.version >= m.version) {
            out.dead.push_back(state.node);
            remove(state.node);
        }
        break;
    }
    return out;
}

FailureDetector::Actions FailureDetector::on_timer(Clock::time_point now) {
    Actions out;
    // Woken more than half a probe interval after the instant asked for: this node is not
    // being scheduled in time, and its probes' silence may be its own. It doubts itself
    // first: slower from now on, and nothing due is judged before it read what came.
    if (const auto due = next_timer(); due && *due != Clock::time_point::min() && now > *due + options_.probe_interval / 2) {
        change_health(+1);
        postpone(now);
    }
    // Silent for the unconfirmed suspicion time and a probe timeout, and at least two of
    // its probes ended unanswered meanwhile (a slow node's sparse probes count, not time).
    if (last_heard_ && !members_.empty() && unanswered_ >= 2 &&
        now >= *last_heard_ + options_.suspicion_max + options_.probe_timeout) {
        // Cut off from every member: no suspicion of ours can be confirmed.
        out.cut_off = std::chrono::duration_cast<milliseconds>(now - *last_heard_);
        cut_off_since_ = *last_heard_;
        for (const auto& [name, m] : members_) out.broken.push_back(name);
        for (const auto& name : out.broken) remove(name);
        last_heard_.reset();
    }
    for (auto& p : probes_) {
        if (p.acked || p.indirect_sent || now < p.indirect_at) continue;
        p.indirect_sent = true;
        auto others = indirect_helpers(p.target);
        for (auto& via : others)
            out.sends.emplace_back(std::move(via), wire::Probe{wire::ProbeKind::ping_req, p.seq, p.target});
        p.asked = others.size();
    }
    for (std::size_t i = 0; i < probes_.size();) {
        if (now < probes_[i].ends_at) {
            ++i;
            continue;
        }
        auto p = std::move(probes_[i]);
        probes_.erase(probes_.begin() + static_cast<std::ptrdiff_t>(i));
        end_probe(now, std::move(p), out);  // p.target has no other probe in flight
    }
    if (!next_probe_at_ || now >= *next_probe_at_) start_probe(now, out);
    for (auto it = relays_.begin(); it != relays_.end();) {
        if (now < it->second.expires_at) {
            ++it;
            continue;
        }
        out.sends.emplace_back(it->second.requester, wire::Probe{wire::ProbeKind::nack, it->second.requester_seq, {}});
        it = relays_.erase(it);
    }
    std::vector<std::string> expired;
    for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) expired.push_back(it->second);
    for (const auto& name : expired) {
        const auto& m = members_.find(name)->second;
        const auto& suspecters = suspicions_.find(name)->second.suspecters;
        // The node that raised the suspicion tells every member; the others, whose timers
        // run out at about the same time, drop the member quietly (no N² verdicts).
        if (!suspecters.empty() && suspecters.front() == self_)
            out.gossip.push_back(wire::MemberState{wire::MemberHealth::dead, name, m.incarnation, m.version});
        out.dead.push_back(name);
        remove(name);
    }
    return out;
}

std::vector<std::string> FailureDetector::indirect_helpers(const std::string& target) {
    const auto k = options_.indirect_probes;
    std::vector<std::string> helpers;
    auto helps = [&](const std::string& name) {
        return name != target && !suspicions_.contains(name) &&
               std::find(helpers.begin(), helpers.end(), name) == helpers.end();
    };
    // Draws from the ring (sorted, so the choice depends on the random generator alone); with few members,
    // or most of them suspected, from the list of all that can help.
    const auto& names = ring();
    if (names.size() > 4 * k) {
        std::uniform_int_distribution<std::size_t> any(0, names.size() - 1);
        for (std::size_t tries = 0; tries < 4 * k && helpers.size() < k; ++tries)
            if (const auto& name = *names[any(rng_)]; helps(name)) helpers.push_back(name);
        if (helpers.size() == k) return helpers;
        helpers.clear();
    }
    for (const auto* name : names)
        if (helps(*name)) helpers.push_back(*name);
    std::shuffle(helpers.begin(), helpers.end(), rng_);
    helpers.resize(std::min(helpers.size(), k));
    return helpers;
}

std::optional<FailureDetector::Clock::time_point> FailureDetector::next_timer() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
        if (!next || t < *next) next = t;
    };
    // An answered probe asks for no wake-up of its own: it ends at the next one.
    for (const auto& p : probes_) {
        if (p.acked) continue;
        if (!p.indirect_sent) consider(p.indirect_at);
        consider(p.ends_at);
    }
    if (next_probe_at_)
        consider(*next_probe_at_);
    else if (!members_.empty())
        consider(Clock::time_point::min());  // probe at once
    for (const auto& [seq, r] : relays_) consider(r.expires_at);
    if (!deadlines_.empty()) consider(deadlines_.begin()->first);
    return next;
}

void FailureDetector::heard(Clock::time_point now, Actions& out) {
    last_heard_ = now;
    unanswered_ = 0;
    if (cut_off_since_) out.back = std::chrono::duration_cast<milliseconds>(now - *cut_off_since_);
    cut_off_since_.reset();
}

std::chrono::microseconds FailureDetector::probe_timeout(std::string_view node) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(timeout_of(node));
}

std::optional<std::chrono::microseconds> FailureDetector::rtt(std::string_view node) const {
    const auto it = members_.find(node);
    if (it == members_.end() || it->second.rtt_us == no_rtt) return std::nullopt;
    return std::chrono::microseconds(it->second.rtt_us);
}

bool FailureDetector::suspected(std::string_view node) const {
    return suspicions_.contains(node);
}

}  // namespace rpclb::detail
