// Random numbers for the built-in plugins: a per-thread splitmix64 generator.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace rpclb::plugins {

/// splitmix64's output function (Steele, Lea and Flood, OOPSLA 2014): mixes a state that
/// advances by `golden_gamma` into 64 random-looking bits.
constexpr std::uint64_t golden_gamma = 0x9e3779b97f4a7c15;
inline std::uint64_t mix64(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
}

/// 64 random bits from the calling thread's generator, seeded from std::random_device on
/// the thread's first draw. Its state is trivially destructible, and the function has
/// internal linkage (an inline function's thread_local would be a GNU unique symbol, which
/// keeps a library loaded for good), so a plugin unloads once its last algorithm is gone.
/// No lock, no allocation.
[[maybe_unused]] static std::uint64_t thread_random() noexcept {
    thread_local std::uint64_t state = [] {
        std::random_device device;
        return (std::uint64_t{device()} << 32) | device();
    }();
    return mix64(state += golden_gamma);
}

/// A value in [0, range) from 32 random bits (Lemire's multiply-shift; the bias,
/// range / 2^32, is far below anything a balancer can observe).
inline std::size_t scale32(std::uint64_t bits32, std::size_t range) noexcept {
    return static_cast<std::size_t>(((bits32 & 0xffffffffu) * range) >> 32);
}

/// A rotation cursor's first value: option `start` (an integer ≥ 0, for tests and for
/// callers that want every instance to start on the first member), else a random one.
/// Throws std::invalid_argument naming `start` when it is not an integer ≥ 0.
[[maybe_unused]] static std::uint64_t cursor_start(const boost::json::object& options) {
    const auto* start = options.if_contains("start");
    if (!start) return thread_random();
    if (start->is_uint64()) return start->get_uint64();
    if (start->is_int64() && start->get_int64() >= 0) return static_cast<std::uint64_t>(start->get_int64());
    throw std::invalid_argument("start: must be an integer >= 0, got " + boost::json::serialize(*start));
}

/// The random bits of one algorithm instance: the calling thread's generator, or, with
/// option `seed` (integer ≥ 0), one deterministic generator shared by the instance's
/// threads (splitmix64 of one atomic counter: lock-free, but every draw writes it; for
/// tests that repeat a sequence of picks).
class Draws {
public:
    /// Reads option `seed` if present. Throws std::invalid_argument naming it when it is
    /// not an integer ≥ 0.
    void init(const boost::json::object& options) {
        seeded_ = false;
        const auto* seed = options.if_contains("seed");
        if (!seed) return;
        if (seed->is_uint64())
            state_ = seed->get_uint64();
        else if (seed->is_int64() && seed->get_int64() >= 0)
            state_ = static_cast<std::uint64_t>(seed->get_int64());
        else
            throw std::invalid_argument("seed: must be an integer >= 0, got " + boost::json::serialize(*seed));
        seeded_ = true;
    }

    /// 64 random bits.
    std::uint64_t next() noexcept {
        if (seeded_) return mix64(state_.fetch_add(golden_gamma, std::memory_order_relaxed) + golden_gamma);
        return thread_random();
    }

    /// Two distinct indices in [0, size), size ≥ 2, from one draw.
    std::pair<std::size_t, std::size_t> two(std::size_t size) noexcept {
        const std::uint64_t bits = next();
        const std::size_t a = scale32(bits, size);
        std::size_t b = scale32(bits >> 32, size - 1);
        if (b >= a) ++b;  // uniform over the members other than a
        return {a, b};
    }

private:
    bool seeded_ = false;
    std::atomic<std::uint64_t> state_{0};
};

}  // namespace rpclb::plugins
