#include "power_of_two.hpp"

#include <boost/json/serialize.hpp>

#include <random>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014): a state advanced by a constant and a mixing function. Its state is one
// integer, so a seeded generator can be a single atomic counter.
constexpr std::uint64_t golden_gamma = 0x9e3779b97f4a7c15;

std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
}

// Trivially destructible, so a thread's copy never pins the plugin in memory after the
// algorithm is gone.
std::uint64_t& thread_state() {
    thread_local std::uint64_t state = [] {
        std::random_device device;
        return (std::uint64_t{device()} << 32) | device();
    }();
    return state;
}

// A value in [0, range) from 32 random bits (Lemire's multiply-shift).
std::size_t scale(std::uint64_t bits32, std::size_t range) noexcept {
    return static_cast<std::size_t>((bits32 * range) >> 32);
}

}  // namespace

void PowerOfTwo::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "power_of_two", {"seed"});
    counts_.init(context.balancer);
    if (const auto* seed = options.if_contains("seed")) {
        if (seed->is_uint64()) {
            seeded_state_ = seed->get_uint64();
        } else if (seed->is_int64() && seed->get_int64() >= 0) {
            seeded_state_ = static_cast<std::uint64_t>(seed->get_int64());
        } else {
            throw std::invalid_argument("seed: must be an integer >= 0, got " +
                                        boost::json::serialize(*seed));
        }
        seeded_ = true;
    }
}

// inline: keeps the call on the pick path out of the PLT (a plugin's default-visibility
// member functions are otherwise called through it).
inline std::uint64_t PowerOfTwo::draw() noexcept {
    if (seeded_) return mix(seeded_state_.fetch_add(golden_gamma, std::memory_order_relaxed) + golden_gamma);
    return mix(thread_state() += golden_gamma);
}

Result<std::size_t> PowerOfTwo::choose_from_nodes(const MemberSnapshot& members,
                                                  const PickOptions& options) {
    (void)options;
    return pick_counted(members, [this](const auto& estimate, std::size_t size) -> std::size_t {
        if (size == 1) return 0;
        const std::uint64_t bits = draw();
        const std::size_t a = scale(bits & 0xffffffff, size);
        std::size_t b = scale(bits >> 32, size - 1);
        if (b >= a) ++b;  // b is uniform over the members other than a
        return estimate(a) <= estimate(b) ? a : b;
    });
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(power_of_two, rpclb::plugins::PowerOfTwo)
