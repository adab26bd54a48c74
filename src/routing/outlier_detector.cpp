#include "routing/outlier_detector.hpp"

#include <algorithm>

namespace rpclb::detail {
namespace {

bool remote_failure(const CallOutcome& outcome) {
    return outcome.origin == ErrorOrigin::remote &&
           (outcome.error == ErrorCode::internal_server_error || outcome.error == ErrorCode::service_unavailable);
}

bool local_failure(const CallOutcome& outcome) {
    return outcome.origin == ErrorOrigin::local &&
           (outcome.error == ErrorCode::request_timeout || outcome.error == ErrorCode::service_unavailable);
}

}  // namespace

void OutlierDetector::fail(const std::string& node, Member& m, const char* reason, Clock::time_point now,
                           Change& change) {
    if (m.failing_until) return;
    const auto time = std::min(options_.base_ejection_time * (m.ejections + 1), options_.max_ejection_time);
    m.failing_until = now + time;
    m.remote_streak = m.local_streak = 0;
    change.changed = true;
    change.expiries.push_back(time);
    std::size_t ejected = 0, present = 0;
    for (const auto& [name, other] : members_) {
        ejected += other.ejected && other.present;
        present += other.present;
    }
    const std::size_t allowed = present * options_.max_ejection_percent / 100;
    if (ejected + 1 > allowed) {
        ++refused_;
        return;
    }
    m.ejected = true;
    ++m.ejections;
    change.ejected.push_back({node, time, reason});
}

OutlierDetector::Change OutlierDetector::record(const std::string& node, const CallOutcome& outcome,
                                                Clock::time_point now) {
    Change change;
    std::lock_guard lock(mutex_);
    const auto it = members_.find(node);
    if (it == members_.end() || !it->second.present) return change;
    Member& m = it->second;
    const bool remote = remote_failure(outcome), local = local_failure(outcome);
    if (options_.failure_percentage > 0) {
        if (now - m.interval_start >= options_.interval) {
            if (m.calls >= options_.minimum_requests &&
                m.failures * 100 >= m.calls * options_.failure_percentage)
                fail(node, m, "failure_percentage", now, change);
            m.calls = m.failures = 0;
            m.interval_start = now;
        }
        ++m.calls;
        m.failures += remote || local;
    }
    if (!remote && !local) {
        if (outcome.ok()) m.remote_streak = m.local_streak = 0;
        return change;
    }
    if (remote && options_.consecutive_remote_failures > 0 &&
        ++m.remote_streak >= options_.consecutive_remote_failures)
        fail(node, m, "consecutive_remote_failures", now, change);
    if (local && options_.consecutive_local_failures > 0 &&
        ++m.local_streak >= options_.consecutive_local_failures)
        fail(node, m, "consecutive_local_failures", now, change);
    return change;
}

OutlierDetector::Change OutlierDetector::set_members(const std::vector<std::string>& members,
                                                     const std::vector<std::string>& incarnations,
                                                     Clock::time_point now) {
    Change change;
    std::lock_guard lock(mutex_);
    for (auto it = members_.begin(); it != members_.end();) {
        Member& m = it->second;
        const bool present = std::binary_search(members.begin(), members.end(), it->first);
        change.changed = change.changed || (present != m.present && m.failing_until);
        m.present = present;
        // A failing member that left is kept until its time is up: it may come back as
        // the same incarnation.
        it = present || m.failing_until ? std::next(it) : members_.erase(it);
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
        const auto& node = members[i];
        const std::string none;
        const std::string& incarnation = i < incarnations.size() ? incarnations[i] : none;
        auto [it, added] = members_.try_emplace(node);
        Member& m = it->second;
        if (added) {
            m.interval_start = now;
        } else if (!incarnation.empty() && !m.incarnation.empty() && incarnation != m.incarnation) {
            // A restart: what the old process earned is not held against the new one.
            if (m.ejected) change.returned.push_back(node);
            change.changed = change.changed || m.failing_until.has_value();
            m = Member{};
            m.interval_start = now;
        }
        if (!incarnation.empty()) m.incarnation = incarnation;
    }
    return change;
}

OutlierDetector::Change OutlierDetector::expire(Clock::time_point now) {
    Change change;
    std::lock_guard lock(mutex_);
    for (auto& [node, m] : members_)
        if (m.failing_until && *m.failing_until <= now) {
            if (m.ejected) change.returned.push_back(node);
            change.changed = true;
            m.failing_until.reset();
            m.ejected = false;
            m.remote_streak = m.local_streak = 0;
        }
    std::erase_if(members_, [](const auto& entry) { return !entry.second.present && !entry.second.failing_until; });
    return change;
}

OutlierDetector::Change OutlierDetector::reconfigure(OutlierDetection options, Clock::time_point now) {
    Change change;
    std::lock_guard lock(mutex_);
    options_ = options;
    for (auto& [node, m] : members_) {
        if (m.failing_until) change.changed = true;
        if (m.ejected) change.returned.push_back(node);
        const bool present = m.present;
        auto incarnation = std::move(m.incarnation);
        m = Member{};
        m.interval_start = now;
        m.present = present;
        m.incarnation = std::move(incarnation);
    }
    std::erase_if(members_, [](const auto& entry) { return !entry.second.present; });
    return change;
}

OutlierDetection OutlierDetector::options() const {
    std::lock_guard lock(mutex_);
    return options_;
}

bool OutlierDetector::panic() const {
    std::size_t failing = 0, present = 0;
    for (const auto& [node, m] : members_) {
        failing += m.present && m.failing_until.has_value();
        present += m.present;
    }
    return (present - failing) * 100 < present * options_.panic_threshold_percent;
}

std::vector<std::string> OutlierDetector::ejected() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    if (panic()) return out;
    for (const auto& [node, m] : members_)
        if (m.ejected && m.present) out.push_back(node);
    return out;
}

std::optional<OutlierDetector::Clock::time_point> OutlierDetector::next_expiry() const {
    std::lock_guard lock(mutex_);
    std::optional<Clock::time_point> next;
    for (const auto& [node, m] : members_)
        if (m.failing_until && (!next || *m.failing_until < *next)) next = m.failing_until;
    return next;
}

std::uint64_t OutlierDetector::refused() const {
    std::lock_guard lock(mutex_);
    return refused_;
}

}  // namespace rpclb::detail
