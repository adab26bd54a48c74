#include "least_cpu.hpp"

#include "cpu_poller.hpp"

#include "../plugin_random.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string_view>

namespace rpclb::plugins {
namespace {

constexpr std::int64_t max_duration_ms = 86'400'000;  // one day

[[noreturn]] void bad_option(std::string_view key, std::string_view what) {
    throw std::invalid_argument("least_cpu option " + std::string(key) + " " + std::string(what));
}

std::int64_t integer_option(const boost::json::object& options, std::string_view key,
                            std::int64_t fallback, std::int64_t min, std::int64_t max) {
    const auto* v = options.if_contains(key);
    if (!v) return fallback;
    const auto out_of_range = [&] {
        bad_option(key, "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    };
    if (v->is_int64()) {
        const std::int64_t x = v->get_int64();
        if (x < min || x > max) out_of_range();
        return x;
    }
    if (v->is_uint64()) {
        const std::uint64_t x = v->get_uint64();
        if (x > static_cast<std::uint64_t>(max) || static_cast<std::int64_t>(x) < min) out_of_range();
        return static_cast<std::int64_t>(x);
    }
    bad_option(key, "must be an integer");
}

// A number in [0, 100] (both number options are percentages).
std::optional<double> percent_option(const boost::json::object& options, std::string_view key) {
    const auto* v = options.if_contains(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad_option(key, "must be a number");
    const double x = v->to_number<double>();
    if (!(x >= 0.0 && x <= 100.0)) bad_option(key, "must be in [0, 100]");
    return x;
}

std::uint64_t splitmix64(std::uint64_t x) noexcept {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

double cpu_of(const NodeReading& reading, std::int64_t now, std::int64_t ttl) noexcept {
    const std::int64_t at = reading.at_ms.load(std::memory_order_relaxed);
    if (at == 0 || now - at > ttl) return LeastCpu::missing_cpu;
    return reading.value.load(std::memory_order_relaxed);
}

// A member's reported load on the percent scale of a CPU reading.
double reported_cpu(const NodeLoad& load, std::int64_t now, std::int64_t ttl) noexcept {
    const auto report = load.read(now, ttl);
    return report ? 100.0 * report->utilization() : LeastCpu::missing_cpu;
}

}  // namespace

LeastCpuSettings LeastCpuSettings::from_json(const boost::json::object& options) {
    reject_unknown_options(options, "least_cpu",
                           {"poll_interval", "poll_startup_jitter", "cpu_cache_ttl", "cpu_threshold",
                            "cpu_sampler_fixed", "test_now_ms", "seed", "source"});
    LeastCpuSettings s;
    s.poll_interval = std::chrono::milliseconds(
        integer_option(options, "poll_interval", s.poll_interval.count(), 1, max_duration_ms));
    s.poll_startup_jitter = std::chrono::milliseconds(integer_option(
        options, "poll_startup_jitter", s.poll_startup_jitter.count(), 0, max_duration_ms));
    s.cpu_cache_ttl = std::chrono::milliseconds(
        integer_option(options, "cpu_cache_ttl", s.cpu_cache_ttl.count(), 0, max_duration_ms));
    s.cpu_threshold = percent_option(options, "cpu_threshold").value_or(s.cpu_threshold);
    s.cpu_sampler_fixed = percent_option(options, "cpu_sampler_fixed");
    // Bounded so that `now − at` can't overflow.
    s.test_now_ms = integer_option(options, "test_now_ms", 0, 1,
                                   std::numeric_limits<std::int64_t>::max() / 2);
    if (const auto* seed = options.if_contains("seed")) {
        if (seed->is_uint64()) s.seed = seed->get_uint64();
        else if (seed->is_int64() && seed->get_int64() >= 0) s.seed = static_cast<std::uint64_t>(seed->get_int64());
        else bad_option("seed", "must be a non-negative integer");
    }
    if (const auto* source = options.if_contains("source")) {
        if (!source->is_string() || (source->get_string() != "poll" && source->get_string() != "reported"))
            bad_option("source", "must be \"poll\" or \"reported\"");
        s.reported = source->get_string() == "reported";
    }
    // Options of the poller, which a reported source does not start: most likely a
    // configuration meant for the other source.
    if (s.reported)
        for (const char* key : {"poll_interval", "poll_startup_jitter", "cpu_sampler_fixed"})
            if (options.contains(key)) bad_option(key, "applies only with \"source\": \"poll\"");
    return s;
}

std::int64_t LeastCpuSettings::now_ms() const noexcept {
    if (test_now_ms != 0) return test_now_ms;
    // The coarse clock is steady_clock's CLOCK_MONOTONIC as of the last tick: a few ms
    // behind at most, against ttls of seconds, and several times cheaper to read, which
    // is most of a pick's cost otherwise.
    timespec ts{};
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
        return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void LeastCpu::init(const AlgorithmContext& context, const boost::json::object& options) {
    settings_ = LeastCpuSettings::from_json(options);
    context_ = context;
    if (settings_.seed) seeded_state_.store(*settings_.seed, std::memory_order_relaxed);
}

std::vector<std::shared_ptr<Service>> LeastCpu::services() {
    if (settings_.reported) return {};
    return {std::make_shared<CpuPoller>(context_, settings_)};
}

std::uint32_t LeastCpu::draw() noexcept {
    if (settings_.seed) {
        const std::uint64_t x =
            seeded_state_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed);
        return static_cast<std::uint32_t>(splitmix64(x + 0x9e3779b97f4a7c15ULL) >> 32);
    }
    return static_cast<std::uint32_t>(thread_random());
}

Result<std::size_t> LeastCpu::choose_from_nodes(const MemberSnapshot& members,
                                                const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(context_.balancer);
    if (size == 1) return std::size_t{0};

    // The snapshot's readings (or load records): looked up by the first pick on it, freed
    // with it.
    const ReadingTable* table = nullptr;
    const NodeLoadTable* loads = nullptr;
    if (settings_.reported) {
        loads = reported_loads(members);
        if (!loads) return state_build_error(context_.balancer);
    } else {
        try {
            table = &members.state<ReadingTable>(snapshot_owner(),
                                                 [&] { return AlgorithmState::instance().readings(members.nodes); });
        } catch (const std::exception&) {
            return state_build_error(context_.balancer);
        }
    }

    const std::int64_t now = settings_.now_ms();
    const std::int64_t ttl = settings_.cpu_cache_ttl.count();
    const auto cpu_at = [&](std::size_t i) {
        return loads ? reported_cpu(*(*loads)[i], now, ttl) : cpu_of(*(*table)[i], now, ttl);
    };
    // Values are read once into the buffer so all passes agree; past its end they are
    // read again, and may have changed, which at worst leaves no candidate (then the
    // minimum of the first pass is picked).
    constexpr std::size_t buffered = 64;
    std::array<double, buffered> buffer;
    double min = std::numeric_limits<double>::infinity();
    std::size_t min_index = 0;
    for (std::size_t i = 0; i < size; ++i) {
        const double v = cpu_at(i);
        if (i < buffered) buffer[i] = v;
        if (v < min) {
            min = v;
            min_index = i;
        }
    }
    const auto value = [&](std::size_t i) {
        return i < buffered ? buffer[i] : cpu_at(i);
    };
    const double limit = min + settings_.cpu_threshold;
    std::size_t candidates = 0;
    for (std::size_t i = 0; i < size; ++i) candidates += value(i) <= limit;
    if (candidates <= 1) return min_index;
    // Multiply-shift maps a 32-bit draw onto [0, candidates); the bias, candidates / 2^32,
    // is far below anything a balancer can observe.
    std::size_t nth = static_cast<std::size_t>(
        (static_cast<std::uint64_t>(draw()) * candidates) >> 32);
    for (std::size_t i = 0; i < size; ++i)
        if (value(i) <= limit && nth-- == 0) return i;
    return min_index;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(least_cpu, rpclb::plugins::LeastCpu)
