// The failure detector driven without sockets: frames handed over by the test, a virtual
// clock (time points chosen here; nothing reads a clock), a fixed seed.
#define BOOST_TEST_MODULE failure_detector
#include "membership/failure_detector.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using rpclb::detail::DetectorOptions;
using rpclb::detail::FailureDetector;
namespace wire = rpclb::detail::wire;
using Actions = FailureDetector::Actions;

namespace {

const FailureDetector::Clock::time_point t0{};

DetectorOptions options() {
    DetectorOptions o;
    o.probe_interval = 100ms;
    o.probe_timeout = 40ms;
    o.indirect_probes = 2;
    o.suspicion_min = 200ms;
    o.suspicion_max = 600ms;
    o.max_local_health = 4;
    return o;
}

// A detector for "a" linked to `members` (incarnation "i-NAME" each).
FailureDetector make(std::initializer_list<std::string> members) {
    FailureDetector d("a", "i-a", options(), 7);
    for (const auto& m : members) (void)d.add(m, "i-" + m);
    return d;
}

// The pings in `out`, as (target, seq).
std::vector<std::pair<std::string, std::uint64_t>> pings(const Actions& out, wire::ProbeKind kind = wire::ProbeKind::ping) {
    std::vector<std::pair<std::string, std::uint64_t>> found;
    for (const auto& [to, p] : out.sends)
        if (p.kind == kind) found.emplace_back(to, p.seq);
    return found;
}

bool gossips(const Actions& out, wire::MemberHealth health, const std::string& node) {
    return std::any_of(out.gossip.begin(), out.gossip.end(),
                       [&](const wire::MemberState& s) { return s.state == health && s.node == node; });
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ping_is_answered_with_an_ack_of_the_same_seq) {
    auto d = make({"b"});
    auto out = d.on_probe(t0, "b", {wire::ProbeKind::ping, 42, {}});
    BOOST_REQUIRE(out.sends.size() == 1u);
    BOOST_TEST(out.sends[0].first == "b");
    BOOST_TEST((out.sends[0].second.kind == wire::ProbeKind::ack));
    BOOST_TEST(out.sends[0].second.seq == 42u);
}

BOOST_AUTO_TEST_CASE(each_round_probes_every_member_once_one_per_interval) {
    auto d = make({"b", "c", "d"});
    std::multiset<std::string> probed;
    auto now = t0;
    for (int i = 0; i < 3; ++i) {
        auto out = d.on_timer(now);
        auto p = pings(out);
        BOOST_REQUIRE(p.size() == 1u);
        probed.insert(p[0].first);
        d.on_probe(now + 1ms, p[0].first, {wire::ProbeKind::ack, p[0].second, {}});
        now += 100ms;
        BOOST_TEST((*d.next_timer() <= now));
    }
    BOOST_TEST((probed == std::multiset<std::string>{"b", "c", "d"}));
    BOOST_TEST(d.rtt("b").has_value());
    BOOST_TEST(!d.rtt("nobody").has_value());
}

BOOST_AUTO_TEST_CASE(a_silent_member_is_pinged_indirectly_then_suspected_then_dead) {
    auto d = make({"b", "c", "d"});
    auto out = d.on_timer(t0);
    const auto target = pings(out).at(0).first;
    // No ack by the probe timeout: two others are asked to ping it.
    out = d.on_timer(t0 + 40ms);
    auto asked = pings(out, wire::ProbeKind::ping_req);
    BOOST_TEST(asked.size() == 2u);
    for (const auto& [via, seq] : asked) BOOST_TEST(via != target);
    // Both answer that they got no ack: nacks, so this node is not the slow one.
    for (const auto& [via, seq] : asked) d.on_probe(t0 + 80ms, via, {wire::ProbeKind::nack, seq, {}});
    // End of the interval without any ack: suspected, and every member is told.
    out = d.on_timer(t0 + 100ms);
    BOOST_TEST(gossips(out, wire::MemberHealth::suspect, target));
    BOOST_TEST(d.suspected(target));
    BOOST_TEST(d.local_health() == 0);
    // Unconfirmed: dead after suspicion_max (600 ms), not before.
    for (auto t = t0 + 110ms; t < t0 + 700ms; t += 10ms) {
        out = d.on_timer(t);
        if (!out.dead.empty()) {
            BOOST_TEST((t >= t0 + 700ms - 10ms));
            break;
        }
        // Acks to this node's later probes keep the others alive.
        for (const auto& [to, seq] : pings(out)) d.on_probe(t, to, {wire::ProbeKind::ack, seq, {}});
    }
    if (out.dead.empty()) out = d.on_timer(t0 + 700ms);
    BOOST_REQUIRE(out.dead.size() == 1u);
    BOOST_TEST(out.dead[0] == target);
    BOOST_TEST(gossips(out, wire::MemberHealth::dead, target));
    BOOST_TEST(d.size() == 2u);
}

BOOST_AUTO_TEST_CASE(an_indirect_ack_keeps_the_member_unsuspected) {
    auto d = make({"b", "c"});
    auto out = d.on_timer(t0);
    const auto [target, seq] = pings(out).at(0);
    out = d.on_timer(t0 + 40ms);
    const auto asked = pings(out, wire::ProbeKind::ping_req);
    BOOST_REQUIRE(asked.size() == 1u);
    d.on_probe(t0 + 60ms, asked[0].first, {wire::ProbeKind::ack, seq, {}});
    out = d.on_timer(t0 + 100ms);
    BOOST_TEST(!gossips(out, wire::MemberHealth::suspect, target));
    BOOST_TEST(!d.suspected(target));
}

BOOST_AUTO_TEST_CASE(confirmations_from_other_members_shorten_the_suspicion) {
    auto d = make({"b", "c", "d", "e"});
    d.on_member(t0, "c", {wire::MemberHealth::suspect, "b", "i-b", 0});
    d.on_member(t0, "d", {wire::MemberHealth::suspect, "b", "i-b", 0});
    d.on_member(t0, "e", {wire::MemberHealth::suspect, "b", "i-b", 0});
    BOOST_TEST(d.suspected("b"));
    // Three suspecters: two confirmations of the first, which is k: the minimum applies.
    Actions out;
    for (auto t = t0; t <= t0 + 200ms && out.dead.empty(); t += 10ms) {
        out = d.on_timer(t);
        for (const auto& [to, seq] : pings(out)) d.on_probe(t, to, {wire::ProbeKind::ack, seq, {}});
    }
    BOOST_REQUIRE(out.dead.size() == 1u);
    BOOST_TEST(out.dead[0] == "b");
}

BOOST_AUTO_TEST_CASE(a_suspected_node_refutes_with_a_higher_version_which_clears_the_suspicion) {
    FailureDetector b("b", "i-b", options(), 1);
    (void)b.add("a", "i-a");
    auto out = b.on_member(t0, "a", {wire::MemberHealth::suspect, "b", "i-b", 0});
    BOOST_REQUIRE(out.gossip.size() == 1u);
    const auto refutation = out.gossip[0];
    BOOST_TEST((refutation.state == wire::MemberHealth::alive));
    BOOST_TEST(refutation.version == 1u);
    BOOST_TEST(b.local_health() == 1);  // refuting: perhaps this node is the slow one
    // Another incarnation's suspicion is not this node's to refute.
    BOOST_TEST(b.on_member(t0, "a", {wire::MemberHealth::suspect, "b", "i-old", 5}).empty());

    auto d = make({"b", "c"});
    d.on_member(t0, "c", {wire::MemberHealth::suspect, "b", "i-b", 0});
    BOOST_TEST(d.suspected("b"));
    d.on_member(t0 + 1ms, "b", refutation);
    BOOST_TEST(!d.suspected("b"));
    // A stale suspicion (version 0 < 1) is ignored; so is a "dead" of an old version.
    d.on_member(t0 + 2ms, "c", {wire::MemberHealth::suspect, "b", "i-b", 0});
    BOOST_TEST(!d.suspected("b"));
    BOOST_TEST(d.on_member(t0 + 3ms, "c", {wire::MemberHealth::dead, "b", "i-b", 0}).dead.empty());
    BOOST_TEST(d.on_member(t0 + 3ms, "c", {wire::MemberHealth::dead, "b", "i-b", 1}).dead.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_member_linked_after_a_refutation_is_told_the_version_so_its_suspicion_counts) {
    // b refutes a suspicion (version 1); c knows that, as every member linked then does.
    FailureDetector b("b", "i-b", options(), 1);
    (void)b.add("c", "i-c");
    const auto refutation = b.on_member(t0, "c", {wire::MemberHealth::suspect, "b", "i-b", 0}).gossip.at(0);
    FailureDetector c("c", "i-c", options(), 2);
    (void)c.add("b", "i-b");
    (void)c.on_member(t0, "b", refutation);

    // a links b only now (a first link, or again after losing it): b tells it version 1.
    FailureDetector a("a", "i-a", options(), 3);
    (void)a.add("c", "i-c");
    const auto told = b.add("a", "i-a");
    BOOST_REQUIRE(told.notices.size() == 1u);
    BOOST_TEST(told.notices[0].first == "a");
    BOOST_TEST(told.notices[0].second.version == 1u);
    BOOST_TEST((told.notices[0].second.state == wire::MemberHealth::alive));
    (void)a.add("b", "i-b");
    (void)a.on_member(t0, "b", told.notices[0].second);

    // b stops answering a's probes: a's suspicion carries version 1, which c takes.
    Actions out;
    for (auto t = t0; t < t0 + 2s && out.gossip.empty(); t += 10ms) {
        out = a.on_timer(t);
        for (const auto& [to, seq] : pings(out))
            if (to == "c") (void)a.on_probe(t, "c", {wire::ProbeKind::ack, seq, {}});
    }
    BOOST_REQUIRE(gossips(out, wire::MemberHealth::suspect, "b"));
    BOOST_TEST(out.gossip[0].version == 1u);
    (void)c.on_member(t0 + 2s, "a", out.gossip[0]);
    BOOST_TEST(c.suspected("b"));
    // A node that has never refuted tells a new member nothing.
    BOOST_TEST(a.add("d", "i-d").empty());
}

BOOST_AUTO_TEST_CASE(a_ping_req_is_relayed_and_answered_with_an_ack_or_a_nack) {
    auto d = make({"b", "c"});
    auto out = d.on_probe(t0, "b", {wire::ProbeKind::ping_req, 9, "c"});
    const auto relayed = pings(out);
    BOOST_REQUIRE(relayed.size() == 1u);
    BOOST_TEST(relayed[0].first == "c");
    out = d.on_probe(t0 + 5ms, "c", {wire::ProbeKind::ack, relayed[0].second, {}});
    BOOST_REQUIRE(pings(out, wire::ProbeKind::ack).size() == 1u);
    BOOST_TEST(pings(out, wire::ProbeKind::ack)[0].first == "b");
    BOOST_TEST(pings(out, wire::ProbeKind::ack)[0].second == 9u);

    // No answer within the probe timeout: a nack, so the requester knows this node is up.
    d.on_probe(t0 + 10ms, "b", {wire::ProbeKind::ping_req, 10, "c"});
    out = d.on_timer(t0 + 60ms);
    const auto nacks = pings(out, wire::ProbeKind::nack);
    BOOST_REQUIRE(nacks.size() == 1u);
    BOOST_TEST(nacks[0].first == "b");
    BOOST_TEST(nacks[0].second == 10u);
    // A target this node has no link to: a nack at once.
    out = d.on_probe(t0, "b", {wire::ProbeKind::ping_req, 11, "zed"});
    BOOST_TEST(pings(out, wire::ProbeKind::nack).size() == 1u);
}

BOOST_AUTO_TEST_CASE(missed_nacks_raise_local_health_which_stretches_the_probe_timeout) {
    auto d = make({"b", "c", "d"});
    auto out = d.on_timer(t0);
    d.on_timer(t0 + 40ms);  // ping_reqs go out; nobody answers them
    d.on_timer(t0 + 100ms);
    BOOST_TEST(d.local_health() == 1);
    // The next probe (sent at 100 ms) waits 2 × 40 ms before asking others.
    out = d.on_timer(t0 + 100ms);
    BOOST_TEST(pings(d.on_timer(t0 + 140ms), wire::ProbeKind::ping_req).empty());
    BOOST_TEST(!pings(d.on_timer(t0 + 180ms), wire::ProbeKind::ping_req).empty());
}

BOOST_AUTO_TEST_CASE(a_removed_member_is_no_longer_probed_and_a_new_incarnation_starts_afresh) {
    auto d = make({"b"});
    d.on_member(t0, "x", {wire::MemberHealth::suspect, "b", "i-b", 3});
    BOOST_TEST(d.suspected("b"));
    (void)d.add("b", "i-b2");
    BOOST_TEST(!d.suspected("b"));
    d.remove("b");
    BOOST_TEST(d.size() == 0u);
    BOOST_TEST(!d.next_timer().has_value());
    BOOST_TEST(pings(d.on_timer(t0 + 1s)).empty());
}

BOOST_AUTO_TEST_CASE(options_from_the_idle_timeout) {
    const auto o = DetectorOptions::from_idle_timeout(3000ms);
    BOOST_TEST(o.probe_interval.count() == 1000);
    BOOST_TEST(o.probe_timeout.count() == 250);
    BOOST_TEST(o.suspicion_min.count() == 1000);
    BOOST_TEST(o.suspicion_max.count() == 3000);
    BOOST_TEST(DetectorOptions::from_idle_timeout(30000ms).probe_interval.count() == 1000);
    BOOST_TEST(DetectorOptions::from_idle_timeout(10ms).probe_interval.count() == 100);
    BOOST_TEST(DetectorOptions::from_idle_timeout(10ms).suspicion_min.count() == 100);
}

BOOST_AUTO_TEST_CASE(an_answered_probe_asks_for_no_wake_up_of_its_own) {
    auto d = make({"b", "c"});
    auto out = d.on_timer(t0);
    const auto [target, seq] = pings(out).at(0);
    // Unanswered, the probe wakes the detector at its probe timeout.
    BOOST_TEST((*d.next_timer() == t0 + 40ms));
    d.on_probe(t0 + 1ms, target, {wire::ProbeKind::ack, seq, {}});
    // Answered, the next wake-up is the next probe's.
    BOOST_TEST((*d.next_timer() == t0 + 100ms));
    out = d.on_timer(t0 + 100ms);
    BOOST_TEST(pings(out).size() == 1u);
    BOOST_TEST(!d.suspected(target));
}

BOOST_AUTO_TEST_CASE(of_many_members_that_hear_a_suspicion_only_about_k_plus_one_probe_the_suspect) {
    // 200 detectors, each linked to the suspect and 99 others, hear one suspicion of "s".
    int confirmers = 0;
    int notices = 0;
    for (std::uint64_t seed = 1; seed <= 200; ++seed) {
        FailureDetector d("a", "i-a", options(), seed);
        (void)d.add("s", "i-s");
        for (int i = 0; i < 99; ++i) (void)d.add("m" + std::to_string(i), "i-m" + std::to_string(i));
        auto out = d.on_member(t0, "m0", {wire::MemberHealth::suspect, "s", "i-s", 0});
        notices += static_cast<int>(out.notices.size());
        BOOST_TEST(d.suspected("s"));
        // A confirmer probes the suspect at once (the round would reach it after ~50
        // probes on average otherwise).
        const auto p = pings(out);
        if (!p.empty() && p[0].first == "s") ++confirmers;
    }
    // Expected: 200 * (k + 1) / 99 ≈ 6 of 200.
    BOOST_TEST(confirmers >= 1);
    BOOST_TEST(confirmers <= 20);
    // Every one of them tells the suspect, which may be cut off from the suspecter.
    BOOST_TEST(notices == 200);
}

BOOST_AUTO_TEST_CASE(a_member_linked_at_any_step_is_probed_within_m_minus_1_intervals) {
    // 20 members and this node: every member within 20 steps; one linked later makes 21.
    auto d = FailureDetector("a", "i-a", options(), 11);
    for (int i = 0; i < 20; ++i) (void)d.add("m" + std::to_string(i), "i");
    auto now = t0;
    auto step = [&] {
        auto p = pings(d.on_timer(now));
        for (const auto& [to, seq] : p) d.on_probe(now + 1ms, to, {wire::ProbeKind::ack, seq, {}});
        now = *d.next_timer();
        return p;
    };
    for (int i = 0; i < 7; ++i) step();
    (void)d.add("late", "i-late");
    bool probed = false;
    for (int i = 0; i < 21 && !probed; ++i)
        for (const auto& [to, seq] : step()) probed = probed || to == "late";
    BOOST_TEST(probed);
}

BOOST_AUTO_TEST_CASE(nodes_with_one_view_probe_every_member_once_per_step_about_an_interval_apart) {
    // Nine nodes, each linked to the eight others, each woken when its own detector asks;
    // every probe answered. Over 40 steps each node is probed once in every step, and two
    // probes of one node are never more than an interval and a half apart (apart from the
    // ring's wrap, once in M - 1 steps, at most two intervals).
    const int n = 9;
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back("n" + std::to_string(i));
    std::vector<FailureDetector> ds;
    for (int i = 0; i < n; ++i) {
        ds.emplace_back(names[i], "i", options(), 100 + static_cast<std::uint64_t>(i));
        for (int j = 0; j < n; ++j)
            if (j != i) (void)ds.back().add(names[j], "i");
    }
    // Every node's first probe is at once; the schedule starts with the second.
    for (int i = 0; i < n; ++i)
        for (const auto& [to, seq] : pings(ds[i].on_timer(t0))) ds[i].on_probe(t0 + 1ms, to, {wire::ProbeKind::ack, seq, {}});
    std::map<std::string, std::vector<FailureDetector::Clock::time_point>> probed_at;
    std::map<std::int64_t, std::multiset<std::string>> by_step;
    const auto end = t0 + 40 * 100ms;
    for (;;) {
        int next = -1;
        for (int i = 0; i < n; ++i)
            if (next < 0 || *ds[i].next_timer() < *ds[next].next_timer()) next = i;
        const auto now = *ds[next].next_timer();
        if (now >= end) break;
        for (const auto& [to, seq] : pings(ds[next].on_timer(now))) {
            ds[next].on_probe(now + 1ms, to, {wire::ProbeKind::ack, seq, {}});
            probed_at[to].push_back(now);
            by_step[(now - t0) / 100ms].insert(to);
        }
    }
    for (std::int64_t step = 1; step < 40; ++step) {
        std::multiset<std::string> all(names.begin(), names.end());
        BOOST_TEST((by_step[step] == all), "step " << step);
    }
    for (const auto& [node, times] : probed_at) {
        int long_gaps = 0;
        for (std::size_t k = 1; k < times.size(); ++k) {
            const auto gap = times[k] - times[k - 1];
            BOOST_TEST((gap <= 200ms), node << " unprobed for " << (gap / 1ms) << " ms");
            if (gap > 150ms) ++long_gaps;
        }
        BOOST_TEST(long_gaps <= 40 / (n - 1) + 1, node << ": " << long_gaps << " gaps over 1.5 intervals");
    }
}

namespace {

// Drives a detector in 5 ms steps: each direct ping is answered after `delay(target)`
// (never when that is negative), each ping_req with a nack at once, and a suspicion of a
// member that answers is refuted by it after its delay. run() returns every action seen
// in its span, merged; answers still due carry over to the next run().
template <class Delay>
struct Driver {
    Driver(FailureDetector& detector, Delay delays) : d(detector), delay(std::move(delays)) {}
    FailureDetector& d;
    Delay delay;
    std::multimap<FailureDetector::Clock::time_point, std::pair<std::string, std::uint64_t>> acks{};
    std::multimap<FailureDetector::Clock::time_point, wire::MemberState> refutations{};

    Actions run(FailureDetector::Clock::time_point from, FailureDetector::Clock::time_point to) {
        Actions all;
        auto merge = [&](Actions out, FailureDetector::Clock::time_point now) {
            for (const auto& [target, seq] : pings(out))
                if (const auto after = delay(target); after >= 0ms) acks.emplace(now + after, std::pair{target, seq});
            for (const auto& [via, seq] : pings(out, wire::ProbeKind::ping_req))
                (void)d.on_probe(now, via, {wire::ProbeKind::nack, seq, {}});
            for (const auto& g : out.gossip)
                if (const auto after = delay(g.node); g.state == wire::MemberHealth::suspect && after >= 0ms)
                    refutations.emplace(now + after, wire::MemberState{wire::MemberHealth::alive, g.node, g.incarnation,
                                                                       g.version + 1});
            for (auto& x : out.sends) all.sends.push_back(std::move(x));
            for (auto& g : out.gossip) all.gossip.push_back(std::move(g));
            for (auto& n : out.dead) all.dead.push_back(std::move(n));
            for (auto& n : out.broken) all.broken.push_back(std::move(n));
            if (out.cut_off) all.cut_off = out.cut_off;
            if (out.back) all.back = out.back;
            if (out.odd_rtt) all.odd_rtt = out.odd_rtt;
        };
        for (auto now = from; now <= to; now += 5ms) {
            while (!acks.empty() && acks.begin()->first <= now) {
                const auto [target, seq] = acks.begin()->second;
                acks.erase(acks.begin());
                merge(d.on_probe(now, target, {wire::ProbeKind::ack, seq, {}}), now);
            }
            while (!refutations.empty() && refutations.begin()->first <= now) {
                const auto state = refutations.begin()->second;
                refutations.erase(refutations.begin());
                merge(d.on_member(now, state.node, state), now);
            }
            merge(d.on_timer(now), now);
        }
        return all;
    }
};

template <class Delay>
Actions drive(FailureDetector& d, FailureDetector::Clock::time_point from, FailureDetector::Clock::time_point to,
              Delay delay) {
    return Driver<Delay>{d, delay}.run(from, to);
}

}  // namespace

BOOST_AUTO_TEST_CASE(probe_timeout_follows_the_measured_round_trip_of_each_link) {
    auto d = make({"b", "c", "d"});
    BOOST_TEST((d.probe_timeout("b") == 40ms));  // no sample yet: the floor
    // b's link answers in 150 ms (over three times the floor), the others in 1 ms.
    Driver link{d, [](const std::string& t) { return t == "b" ? 150ms : 1ms; }};
    const auto out = link.run(t0, t0 + 3s);
    // The first probe of b (before any sample) may time out; once measured, none does.
    const auto first_suspicions = std::count_if(out.gossip.begin(), out.gossip.end(), [](const wire::MemberState& s) {
        return s.state == wire::MemberHealth::suspect;
    });
    BOOST_TEST(first_suspicions <= 1);
    BOOST_TEST(out.dead.empty());
    BOOST_TEST(out.broken.empty());
    // RFC 6298 from a steady 150 ms: SRTT 150 ms, RTTVAR decaying towards 0, so the
    // timeout is above the round trip and below its first value (150 + 4 × 75 ms).
    BOOST_TEST((d.probe_timeout("b") > 150ms));
    BOOST_TEST((d.probe_timeout("b") < 450ms));
    BOOST_TEST((d.probe_timeout("c") == 40ms));  // a fast link keeps the floor
    // From now on b answers every probe within its timeout: never suspected again.
    const auto later = link.run(t0 + 3s + 5ms, t0 + 10s);
    BOOST_TEST(later.gossip.empty());
    BOOST_TEST(pings(later, wire::ProbeKind::ping_req).empty());
    BOOST_TEST(d.size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_round_trip_beyond_the_cap_is_bounded_and_told_once) {
    auto d = make({"b"});
    // The link takes 20 s (past 10 × probe_timeout_max): the sample counts as 10 s, and
    // the timeout stops at probe_timeout_max.
    auto out = d.on_timer(t0);
    const auto [target, seq] = pings(out).at(0);
    out = d.on_probe(t0 + 20s, "b", {wire::ProbeKind::ack, seq, {}});
    BOOST_REQUIRE(out.odd_rtt.has_value());
    BOOST_TEST(out.odd_rtt->first == "b");
    BOOST_TEST((out.odd_rtt->second == 10s));
    BOOST_TEST((*d.rtt("b") == 10s));
    BOOST_TEST((d.probe_timeout("b") == 1000ms));
    // A second one is not told again.
    (void)d.add("b", "i-b");  // same incarnation: its state stays
    out = d.on_timer(t0 + 21s);
    for (const auto& [to, s] : pings(out)) {
        const auto again = d.on_probe(t0 + 41s, to, {wire::ProbeKind::ack, s, {}});
        BOOST_TEST(!again.odd_rtt.has_value());
    }
}

BOOST_AUTO_TEST_CASE(a_pong_after_its_probe_ended_still_measures_the_link) {
    auto d = make({"b", "c"});
    auto out = d.on_timer(t0);
    const auto [target, seq] = pings(out).at(0);
    drive(d, t0 + 5ms, t0 + 95ms, [](const std::string&) { return -1ms; });  // the probe ends unanswered
    BOOST_TEST(d.suspected(target));
    out = d.on_probe(t0 + 300ms, target, {wire::ProbeKind::ack, seq, {}});
    BOOST_TEST((*d.rtt(target) == 300ms));
    BOOST_TEST((d.probe_timeout(target) >= 300ms));
}

BOOST_AUTO_TEST_CASE(a_node_woken_late_ends_no_probe_at_that_wake_up) {
    auto d = make({"b", "c", "d"});
    // A probe of this node's own in flight…
    auto out = d.on_timer(t0);
    const auto probed = pings(out);
    BOOST_REQUIRE(probed.size() == 1u);
    // …then the node is stopped for 2 s (past the probe and its indirect probes): at the
    // wake-up, nothing is suspected or asked, and the node doubts itself.
    out = d.on_timer(t0 + 2s);
    BOOST_TEST(out.gossip.empty());
    BOOST_TEST(pings(out, wire::ProbeKind::ping_req).empty());
    BOOST_TEST(d.local_health() == 1);
    // The ack that waited in its queue is read next: the member stays unsuspected.
    (void)d.on_probe(t0 + 2s, probed[0].first, {wire::ProbeKind::ack, probed[0].second, {}});
    out = drive(d, t0 + 2s + 5ms, t0 + 3s, [](const std::string&) { return 1ms; });
    BOOST_TEST(out.dead.empty());
    BOOST_TEST(!d.suspected(probed[0].first));
    BOOST_TEST(d.size() == 3u);
}

BOOST_AUTO_TEST_CASE(no_new_member_lengthens_a_suspicion) {
    // Alone with b, a suspicion of b awaits no confirmation: the minimum, 200 ms.
    auto d = make({"b"});
    (void)d.on_member(t0, "x", {wire::MemberHealth::suspect, "b", "i-b", 0});
    // Three members link meanwhile; the suspicion runs out when it was due.
    for (auto name : {"c", "e", "f"}) (void)d.add(name, std::string("i-") + name);
    const auto out = drive(d, t0, t0 + 300ms, [](const std::string& t) { return t == "b" ? -1ms : 1ms; });
    BOOST_TEST((std::find(out.dead.begin(), out.dead.end(), "b") != out.dead.end()));
}

BOOST_AUTO_TEST_CASE(a_node_cut_off_from_every_member_says_so_once_and_again_when_back) {
    auto d = make({"b", "c", "d"});
    const auto out = drive(d, t0, t0 + 2s, [](const std::string&) { return -1ms; });
    BOOST_REQUIRE(out.cut_off.has_value());
    BOOST_TEST((*out.cut_off >= 600ms));  // silent for at least the unconfirmed suspicion
    // Each link dropped: broken, or found dead by the suspicion that ran out first.
    BOOST_TEST(out.broken.size() + out.dead.size() == 3u);
    BOOST_TEST(!out.broken.empty());
    BOOST_TEST(d.size() == 0u);
    BOOST_TEST(!out.back.has_value());
    // A link comes back and its member's first frame says the node is back.
    (void)d.add("b", "i-b");
    auto back = d.on_probe(t0 + 5s, "b", {wire::ProbeKind::ping, 1, {}});
    BOOST_REQUIRE(back.back.has_value());
    BOOST_TEST((*back.back >= 4s));
    BOOST_TEST(!d.on_probe(t0 + 5s, "b", {wire::ProbeKind::ping, 2, {}}).back.has_value());
}

namespace {

// Probes `target` of a detector linked to b and c so that only the other member gets an
// answer, twice; `late_pong` answers the first probe's ping directly after it ended.
Actions answered_only_through_the_other_twice(bool late_pong) {
    auto d = make({"b", "c"});
    const auto [target, seq] = pings(d.on_timer(t0)).at(0);
    const std::string other = target == "b" ? "c" : "b";
    Actions last;
    for (auto t = t0 + 5ms; t <= t0 + 170ms; t += 5ms) {
        if (late_pong && t == t0 + 100ms) (void)d.on_probe(t, target, {wire::ProbeKind::ack, seq, {}});
        auto out = d.on_timer(t);
        for (const auto& [via, s] : pings(out, wire::ProbeKind::ping_req))
            (void)d.on_probe(t + 1ms, via, {wire::ProbeKind::ack, s, {}});  // the other got an answer
        for (const auto& [to, s] : pings(out))
            if (to != target) (void)d.on_probe(t + 1ms, to, {wire::ProbeKind::ack, s, {}});
        for (auto& n : out.broken) last.broken.push_back(n);
        if (!last.broken.empty()) break;
    }
    return last;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_link_answered_only_through_others_twice_in_a_row_is_broken) {
    const auto out = answered_only_through_the_other_twice(false);
    BOOST_TEST(out.broken.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_late_pong_shows_a_slow_link_is_not_broken) {
    const auto out = answered_only_through_the_other_twice(true);
    BOOST_TEST(out.broken.empty());
}
