#include "membership/failure_detector.hpp"

#include <algorithm>
#include <cmath>

namespace rpclb::detail {
namespace {

using std::chrono::milliseconds;

// Indirect pings this node relays at once for others; a ping_req beyond it is answered
// with a nack at once, so a peer cannot make this node hold an unbounded table.
constexpr std::size_t max_relays = 256;

}  // namespace

DetectorOptions DetectorOptions::from_idle_timeout(milliseconds idle) {
    DetectorOptions o;
    o.probe_interval = std::clamp(idle / 6, milliseconds(100), milliseconds(1000));
    o.probe_timeout = o.probe_interval / 2;
    o.suspicion_min = std::max(idle / 2, o.probe_interval);
    o.suspicion_max = std::max(idle * 3 / 2, o.suspicion_min);
    return o;
}

FailureDetector::FailureDetector(std::string self, std::string incarnation, DetectorOptions options,
                                 std::uint64_t seed)
    : self_(std::move(self)), incarnation_(std::move(incarnation)), options_(options), rng_(seed) {}

void FailureDetector::add(const std::string& node, const std::string& incarnation) {
    auto [it, inserted] = members_.try_emplace(node);
    auto& m = it->second;
    if (!inserted && m.incarnation == incarnation) {
        m.suspect = false;  // a fresh link: it answered a handshake just now
        m.suspecters.clear();
        return;
    }
    m = Member{incarnation};
}

void FailureDetector::remove(std::string_view node) {
    if (auto it = members_.find(node); it != members_.end()) members_.erase(it);
    std::erase(round_, node);
    if (probe_ && probe_->target == node) probe_.reset();
}

FailureDetector::Clock::duration FailureDetector::scaled(milliseconds d) const { return d * (1 + health_); }

FailureDetector::Clock::duration FailureDetector::suspicion_timeout(const Member& m) const {
    // Lifeguard: from the maximum down to the minimum as independent confirmations arrive,
    // on a log scale; k confirmations (the indirect probes' count) reach the minimum.
    const double k = static_cast<double>(std::max<std::size_t>(options_.indirect_probes, 1));
    const double confirmations = m.suspecters.empty() ? 0.0 : static_cast<double>(m.suspecters.size() - 1);
    const double fraction = std::min(1.0, std::log(confirmations + 1.0) / std::log(k + 1.0));
    const auto span = options_.suspicion_max - options_.suspicion_min;
    const auto timeout =
        options_.suspicion_max - std::chrono::duration_cast<milliseconds>(span * fraction);
    return std::max<Clock::duration>(timeout, options_.suspicion_min);
}

void FailureDetector::change_health(int delta) {
    health_ = std::clamp(health_ + delta, 0, options_.max_local_health);
}

std::string FailureDetector::next_target() {
    if (round_.empty()) {
        for (const auto& [name, m] : members_) round_.push_back(name);
        std::shuffle(round_.begin(), round_.end(), rng_);
    }
    if (round_.empty()) return {};
    auto target = std::move(round_.back());
    round_.pop_back();
    return target;
}

void FailureDetector::start_probe(Clock::time_point now, Actions& out) {
    next_probe_at_ = now + scaled(options_.probe_interval);
    const auto target = next_target();
    if (target.empty()) {
        next_probe_at_.reset();  // nothing to probe until a member is added
        return;
    }
    Probe p{target, next_seq_++, now};
    p.indirect_at = now + scaled(options_.probe_timeout);
    p.ends_at = *next_probe_at_;
    out.sends.emplace_back(target, wire::Probe{wire::ProbeKind::ping, p.seq, {}});
    probe_ = std::move(p);
}

void FailureDetector::end_probe(Clock::time_point now, Actions& out) {
    auto p = std::move(*probe_);
    probe_.reset();
    if (p.acked) return;
    // Lifeguard: missed nacks mean this node, not the target, may be the slow one.
    if (p.nacks < p.asked) change_health(+1);
    auto it = members_.find(p.target);
    if (it == members_.end() || it->second.suspect) return;
    suspect(now, p.target, it->second, self_, out);
    out.gossip.push_back(wire::MemberState{wire::MemberHealth::suspect, p.target, it->second.incarnation,
                                           it->second.version});
}

void FailureDetector::suspect(Clock::time_point now, const std::string&, Member& m, const std::string& by,
                              Actions&) {
    if (!m.suspect) {
        m.suspect = true;
        m.suspected_at = now;
        m.suspecters.clear();
    }
    m.suspecters.insert(by);
}

void FailureDetector::refute(std::uint64_t above, Actions& out) {
    version_ = std::max(version_, above) + 1;
    change_health(+1);
    out.gossip.push_back(wire::MemberState{wire::MemberHealth::alive, self_, incarnation_, version_});
}

FailureDetector::Actions FailureDetector::on_probe(Clock::time_point now, const std::string& from,
                                                   const wire::Probe& probe) {
    Actions out;
    switch (probe.kind) {
    case wire::ProbeKind::ping:
        out.sends.emplace_back(from, wire::Probe{wire::ProbeKind::ack, probe.seq, {}});
        break;
    case wire::ProbeKind::ping_req:
        if (!members_.contains(probe.node) || relays_.size() >= max_relays) {
            out.sends.emplace_back(from, wire::Probe{wire::ProbeKind::nack, probe.seq, {}});
        } else {
            const auto seq = next_seq_++;
            relays_[seq] = Relay{from, probe.seq, now + scaled(options_.probe_timeout)};
            out.sends.emplace_back(probe.node, wire::Probe{wire::ProbeKind::ping, seq, {}});
        }
        break;
    case wire::ProbeKind::ack:
        if (probe_ && probe_->seq == probe.seq && !probe_->acked) {
            probe_->acked = true;
            change_health(-1);
            if (from == probe_->target) {
                if (auto it = members_.find(from); it != members_.end())
                    it->second.rtt = std::chrono::duration_cast<std::chrono::microseconds>(now - probe_->sent_at);
            }
        } else if (auto it = relays_.find(probe.seq); it != relays_.end()) {
            out.sends.emplace_back(it->second.requester, wire::Probe{wire::ProbeKind::ack, it->second.requester_seq, {}});
            relays_.erase(it);
        }
        break;
    case wire::ProbeKind::nack:
        if (probe_ && probe_->seq == probe.seq) ++probe_->nacks;
        break;
    }
    return out;
}

FailureDetector::Actions FailureDetector::on_member(Clock::time_point now, const std::string& from,
                                                    const wire::MemberState& state) {
    Actions out;
    if (state.node == self_) {
        if (state.incarnation == incarnation_ && state.state != wire::MemberHealth::alive && state.version >= version_)
            refute(state.version, out);
        return out;
    }
    auto it = members_.find(state.node);
    if (it == members_.end() || it->second.incarnation != state.incarnation) return out;
    auto& m = it->second;
    switch (state.state) {
    case wire::MemberHealth::alive:
        if (state.version > m.version) {
            m.version = state.version;
            m.suspect = false;
            m.suspecters.clear();
        }
        break;
    case wire::MemberHealth::suspect:
        if (state.version >= m.version) {
            m.version = state.version;
            suspect(now, state.node, m, from, out);
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
    if (probe_ && !probe_->acked && !probe_->indirect_sent && now >= probe_->indirect_at) {
        probe_->indirect_sent = true;
        std::vector<std::string> others;
        for (const auto& [name, m] : members_)
            if (name != probe_->target && !m.suspect) others.push_back(name);
        std::shuffle(others.begin(), others.end(), rng_);
        others.resize(std::min(others.size(), options_.indirect_probes));
        for (auto& via : others)
            out.sends.emplace_back(std::move(via), wire::Probe{wire::ProbeKind::ping_req, probe_->seq, probe_->target});
        probe_->asked = others.size();
    }
    if (probe_ && now >= probe_->ends_at) end_probe(now, out);
    if (!probe_ && (!next_probe_at_ || now >= *next_probe_at_)) start_probe(now, out);
    for (auto it = relays_.begin(); it != relays_.end();) {
        if (now < it->second.expires_at) {
            ++it;
            continue;
        }
        out.sends.emplace_back(it->second.requester, wire::Probe{wire::ProbeKind::nack, it->second.requester_seq, {}});
        it = relays_.erase(it);
    }
    std::vector<std::string> expired;
    for (const auto& [name, m] : members_)
        if (m.suspect && now >= m.suspected_at + suspicion_timeout(m)) expired.push_back(name);
    for (const auto& name : expired) {
        const auto& m = members_.find(name)->second;
        out.gossip.push_back(wire::MemberState{wire::MemberHealth::dead, name, m.incarnation, m.version});
        out.dead.push_back(name);
        remove(name);
    }
    return out;
}

std::optional<FailureDetector::Clock::time_point> FailureDetector::next_timer() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
        if (!next || t < *next) next = t;
    };
    if (probe_) {
        if (!probe_->acked && !probe_->indirect_sent) consider(probe_->indirect_at);
        consider(probe_->ends_at);
    } else if (next_probe_at_) {
        consider(*next_probe_at_);
    } else if (!members_.empty()) {
        consider(Clock::time_point::min());  // probe at once
    }
    for (const auto& [seq, r] : relays_) consider(r.expires_at);
    for (const auto& [name, m] : members_)
        if (m.suspect) consider(m.suspected_at + suspicion_timeout(m));
    return next;
}

std::optional<std::chrono::microseconds> FailureDetector::rtt(std::string_view node) const {
    const auto it = members_.find(node);
    return it == members_.end() ? std::nullopt : it->second.rtt;
}

bool FailureDetector::suspected(std::string_view node) const {
    const auto it = members_.find(node);
    return it != members_.end() && it->second.suspect;
}

}  // namespace rpclb::detail
