#include "load.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace gray {

namespace {

/// What the loops share with their completions.
struct Book {
    std::mutex mutex;
    std::condition_variable idle;
    std::vector<Sample> samples;
    long in_flight = 0;

    void record(Sample s) {
        std::lock_guard lock(mutex);
        samples.push_back(s);
        if (--in_flight == 0) idle.notify_all();
    }
    void wait_idle() {
        std::unique_lock lock(mutex);
        idle.wait(lock, [&] { return in_flight == 0; });
    }
};

double seconds_since(Clock::time_point start, Clock::time_point t) {
    return std::chrono::duration<double>(t - start).count();
}

std::int64_t us(Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }

}  // namespace

std::vector<Sample> closed_loop(Target& target, int concurrency, std::chrono::milliseconds duration,
                                std::chrono::milliseconds timeout) {
    auto book = std::make_shared<Book>();
    const auto start = Clock::now();
    const auto deadline = start + duration;
    book->samples.reserve(100000);
    // Each chain issues a call, and its completion issues the next until the deadline.
    struct Chain {
        static void issue(Target& target, std::shared_ptr<Book> book, Clock::time_point start,
                          Clock::time_point deadline, std::chrono::milliseconds timeout) {
            const auto sent = Clock::now();
            target.call(timeout, [&target, book, start, deadline, timeout, sent](Reply r) {
                const auto now = Clock::now();
                const bool again = now < deadline;
                if (again) {
                    std::lock_guard lock(book->mutex);
                    ++book->in_flight;
                }
                book->record({seconds_since(start, sent), us(now - sent), r});
                if (again) issue(target, book, start, deadline, timeout);
            });
        }
    };
    {
        std::lock_guard lock(book->mutex);
        book->in_flight = concurrency;
    }
    for (int i = 0; i < concurrency; ++i) Chain::issue(target, book, start, deadline, timeout);
    book->wait_idle();
    return std::move(book->samples);
}

std::vector<Sample> open_loop(Target& target, double rate, std::chrono::milliseconds duration,
                              std::chrono::milliseconds timeout) {
    auto book = std::make_shared<Book>();
    book->samples.reserve(static_cast<std::size_t>(rate * std::chrono::duration<double>(duration).count()) + 16);
    const auto start = Clock::now();
    const auto period = std::chrono::duration<double>(1.0 / rate);
    const long total = std::lround(rate * std::chrono::duration<double>(duration).count());
    for (long k = 0; k < total; ++k) {
        const auto intended = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(k));
        const double at_s = seconds_since(start, intended);
        std::this_thread::sleep_until(intended);
        {
            std::lock_guard lock(book->mutex);
            ++book->in_flight;
        }
        target.call(timeout, [book, intended, at_s](Reply r) {
            book->record({at_s, us(Clock::now() - intended), r});
        });
    }
    book->wait_idle();
    return std::move(book->samples);
}

Stats stats_of(const std::vector<Sample>& samples, double from, double to) {
    std::vector<double> lat;
    Stats s;
    double sum = 0;
    for (const auto& x : samples) {
        if (x.at_s < from || x.at_s >= to) continue;
        lat.push_back(static_cast<double>(x.latency_us));
        sum += static_cast<double>(x.latency_us);
        if (!x.reply.ok) ++s.errors;
    }
    s.calls = lat.size();
    if (lat.empty()) return s;
    std::sort(lat.begin(), lat.end());
    // Nearest rank: the value at or below which q of the calls lie.
    auto q = [&](double p) {
        const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(lat.size())));
        return lat[std::min(lat.size() - 1, rank == 0 ? 0 : rank - 1)];
    };
    s.p50 = q(0.50);
    s.p99 = q(0.99);
    s.p999 = q(0.999);
    s.max = lat.back();
    s.mean = sum / static_cast<double>(lat.size());
    return s;
}

}  // namespace gray
