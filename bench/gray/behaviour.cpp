#include "behaviour.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace gray {

std::string Behaviour::to_text() const {
    char text[512];
    std::snprintf(text, sizeof text,
                  "service_ms=%g,exponential=%d,extra_ms=%g,pause_every_s=%g,pause_ms=%g,fail_rate=%g,"
                  "capacity=%d,cold_s=%g,cold_factor=%g,stall_rate=%g,stall_ms=%g",
                  service_ms, exponential ? 1 : 0, extra_ms, pause_every_s, pause_ms, fail_rate, capacity,
                  cold_s, cold_factor, stall_rate, stall_ms);
    return text;
}

Behaviour Behaviour::from_text(std::string_view text) {
    Behaviour b;
    while (!text.empty()) {
        const auto comma = text.find(',');
        const auto item = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
        const auto eq = item.find('=');
        if (eq == std::string_view::npos) throw std::runtime_error("behaviour: no '=' in " + std::string(item));
        const std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0') throw std::runtime_error("behaviour: bad number for " + key);
        if (key == "service_ms") b.service_ms = v;
        else if (key == "exponential") b.exponential = v != 0;
        else if (key == "extra_ms") b.extra_ms = v;
        else if (key == "pause_every_s") b.pause_every_s = v;
        else if (key == "pause_ms") b.pause_ms = v;
        else if (key == "fail_rate") b.fail_rate = v;
        else if (key == "capacity") b.capacity = static_cast<int>(v);
        else if (key == "cold_s") b.cold_s = v;
        else if (key == "cold_factor") b.cold_factor = v;
        else if (key == "stall_rate") b.stall_rate = v;
        else if (key == "stall_ms") b.stall_ms = v;
        else throw std::runtime_error("behaviour: unknown key " + key);
    }
    return b;
}

Member::Member(Behaviour behaviour, std::uint64_t seed)
    : b_(behaviour), start_(Clock::now()), free_slots_(behaviour.capacity), settled_at_(start_),
      rng_(seed * 0x9E3779B97F4A7C15ull + 1) {}

void Member::settle() {
    // The level held since the last change, folded into a moving average of time constant
    // load_tau: exp(-dt / tau) of the old average stays.
    const auto now = Clock::now();
    const std::chrono::duration<double> dt = now - settled_at_;
    settled_at_ = now;
    const double level = static_cast<double>(b_.capacity - free_slots_ + static_cast<int>(queue_.size())) / b_.capacity;
    const double keep = std::exp(-dt.count() / std::chrono::duration<double>(load_tau).count());
    average_level_ = keep * average_level_ + (1.0 - keep) * level;
}

bool Member::acquire(Clock::time_point deadline, const std::function<bool()>& cancelled) {
    std::unique_lock lock(mutex_);
    settle();
    if (free_slots_ > 0 && queue_.empty()) {
        --free_slots_;
        return true;
    }
    Waiter me;
    queue_.push_back(&me);
    if (!cancelled) {
        granted_.wait_until(lock, deadline, [&] { return me.granted; });
    } else {
        // Looks at the caller's cancellation every 2 ms (it has no way to wake this wait).
        while (!me.granted && Clock::now() < deadline && !cancelled())
            granted_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(2)),
                                [&] { return me.granted; });
    }
    if (me.granted) return true;
    settle();
    queue_.erase(std::find(queue_.begin(), queue_.end(), &me));
    return false;
}

void Member::release() {
    std::lock_guard lock(mutex_);
    settle();
    if (queue_.empty()) {
        ++free_slots_;
        return;
    }
    queue_.front()->granted = true;
    queue_.pop_front();
    granted_.notify_all();
}

double Member::utilization() {
    if (b_.capacity <= 0) return 0;
    std::lock_guard lock(mutex_);
    settle();
    return average_level_;
}

double Member::draw_uniform() {
    std::lock_guard lock(mutex_);
    std::uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
}

void Member::wait_while_paused() {
    if (b_.pause_every_s <= 0 || b_.pause_ms <= 0) return;
    const auto period = std::chrono::duration<double>(b_.pause_every_s);
    const auto pause = std::chrono::duration<double, std::milli>(b_.pause_ms);
    // Paused during the last `pause_ms` of each period, so a member starts unpaused.
    for (;;) {
        const std::chrono::duration<double> since = Clock::now() - start_;
        const double phase = std::fmod(since.count(), period.count());
        const double pause_start = period.count() - std::chrono::duration<double>(pause).count();
        if (phase < pause_start) return;
        std::this_thread::sleep_for(std::chrono::duration<double>(period.count() - phase));
    }
}

Served Member::serve(Clock::time_point deadline, const std::function<bool()>& cancelled) {
    wait_while_paused();
    if (Clock::now() >= deadline) return {false, true, 0};
    if (b_.fail_rate > 0 && draw_uniform() < b_.fail_rate) return {false, false, 0};

    double ms = b_.exponential ? -std::log(1.0 - draw_uniform()) * b_.service_ms : b_.service_ms;
    if (b_.cold_s > 0 && Clock::now() - start_ < std::chrono::duration<double>(b_.cold_s)) ms *= b_.cold_factor;
    if (b_.stall_rate > 0 && draw_uniform() < b_.stall_rate) ms += b_.stall_ms;

    if (b_.capacity > 0 && !acquire(deadline, cancelled)) return {false, true, 0};
    const auto began = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    const auto service = Clock::now() - began;
    if (b_.capacity > 0) release();
    if (b_.extra_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(b_.extra_ms));
    wait_while_paused();
    return {true, false, std::chrono::duration_cast<std::chrono::microseconds>(service).count()};
}

}  // namespace gray
