#include "cpu_poller.hpp"

#include <rpclb/algorithm_host.hpp>
#include <rpclb/plugin_log.hpp>
#include <rpclb/plugin_pin.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace rpclb::plugins {

namespace {

std::optional<CpuTimes> read_proc_stat() {
    std::ifstream file("/proc/stat");
    std::string line;
    if (!file || !std::getline(file, line)) return std::nullopt;
    return parse_proc_stat(line);
}

// A remote reading: {"cpu": number in [0, 100]}, null (no reading yet), anything else
// is malformed.
enum class Reply { reading, none, malformed };

Reply parse_reply(const boost::json::value& v, double& cpu) {
    if (v.is_null()) return Reply::none;
    const auto* object = v.if_object();
    if (!object) return Reply::malformed;
    const auto* field = object->if_contains("cpu");
    if (!field || !field->is_number()) return Reply::malformed;
    cpu = field->to_number<double>();
    return cpu >= 0.0 && cpu <= 100.0 ? Reply::reading : Reply::malformed;
}

std::int64_t system_time_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace

// One run of the poller, from a start() to its stop(): the timer, the cycle in progress,
// and what completions need. Completions hold it by shared_ptr; every step runs under
// `mutex` and first checks `stopping`, which stop() sets under the same mutex, so once
// stop() has returned no step touches the host or the poller again. Telemetry is emitted
// after the mutex is released (the bus lives as long as the node, which outlives every
// completion run by its executor), so a listener may stop the balancer.
struct CpuPoller::Run : std::enable_shared_from_this<CpuPoller::Run> {
    // Which step a timer wait leads to.
    enum class Step { begin_cycle, finish_sample, end_cycle };

    // Events a step leaves for its caller to emit once the mutex is released.
    struct Outbox {
        std::optional<Event> start;
        std::optional<Event> end;
        std::string reason;  // what end.reason views
    };

    Run(CpuPoller& owner, AlgorithmHost& host)
        : owner(&owner),
          host(&host),
          bus(&host.telemetry()),
          balancer(owner.context_.balancer),
          local_node(owner.context_.local_node),
          settings(owner.settings_),
          local_reading(owner.local_reading_),
          remote_errors(&owner.remote_errors_),
          timer(host.executor()) {}

    std::mutex mutex;
    bool stopping = false;   // guarded; once true, `owner` and `host` are not touched
    CpuPoller* owner;        // guarded by `stopping`
    AlgorithmHost* host;     // guarded by `stopping`
    TelemetryBus* bus;
    const std::string balancer;
    const std::string local_node;
    const LeastCpuSettings settings;
    const std::shared_ptr<NodeReading> local_reading;
    std::atomic<std::int64_t>* remote_errors;  // process-wide, never freed

    // The rest is guarded by `mutex`.
    boost::asio::steady_timer timer;
    std::uint64_t wait_id = 0;     // the timer wait that counts; older ones are ignored
    std::uint64_t cycle = 0;       // which cycle `outstanding` counts for
    std::size_t outstanding = 0;   // replies the current cycle still waits for
    bool in_cycle = false;
    std::chrono::steady_clock::time_point began;
    std::optional<CpuTimes> previous;
    double last_sample = LeastCpu::missing_cpu;
    bool warned = false;

    void emit(Outbox& out) const noexcept {
        if (!bus->active()) return;
        if (out.start) bus->emit(*out.start);
        if (out.end) {
            out.end->reason = out.reason;
            bus->emit(*out.end);
        }
    }

    // Arms the timer: `step` runs after `delay` unless the poller stops or a later arm()
    // replaces this wait first.
    void arm(std::chrono::milliseconds delay, Step step) {
        const std::uint64_t id = ++wait_id;
        timer.expires_after(delay);
        timer.async_wait([self = shared_from_this(), id, step](const boost::system::error_code& ec) {
            if (ec) return;  // cancelled: stop(), or a newer wait replaced this one
            Outbox out;
            {
                std::lock_guard lock(self->mutex);
                if (self->stopping || id != self->wait_id) return;
                self->guarded(out, [&] { self->run_step(out, step); });
            }
            self->emit(out);
        });
    }

    // Runs `work` (mutex held, not stopping): a std::exception ends the cycle as failed
    // and the next one is scheduled; anything else ends the polling and is reported.
    template <class Work>
    void guarded(Outbox& out, Work&& work) noexcept {
        try {
            try {
                work();
            } catch (const std::exception& e) {
                plugin_log("balancer", LogSeverity::warning,
                           "least_cpu poller of " + balancer + ": poll cycle failed: " + e.what());
                end_cycle(out, e.what());
            }
        } catch (const std::exception& e) {
            stopping = true;  // no step can run without its timer or its bookkeeping
            owner->fail(std::string("least_cpu poller: ") + e.what());
        } catch (...) {
            stopping = true;
            owner->fail("least_cpu poller: unknown exception");
        }
    }

    void run_step(Outbox& out, Step step) {
        switch (step) {
        case Step::begin_cycle: begin_cycle(out); break;
        case Step::finish_sample: finish_sample(out); break;
        case Step::end_cycle: end_cycle(out, ""); break;
        }
    }

    // The predecessor's poll span (predecessor-compatibility §5.3): start, then stop or exception.
    void begin_cycle(Outbox& out) {
        in_cycle = true;
        began = std::chrono::steady_clock::now();
        Event e{.name = EventName::least_cpu_poll_start};
        e.load_balancer = balancer;
        e.system_time_ns = system_time_ns();
        out.start = e;
        if (!settings.cpu_sampler_fixed && !previous) {
            // The first sample has no previous one: take a baseline, and the sample after
            // a short timer wait.
            if (auto baseline = read_proc_stat()) {
                previous = baseline;
                arm(first_sample_window, Step::finish_sample);
                return;
            }
        }
        finish_sample(out);
    }

    void finish_sample(Outbox& out) {
        store_local(settings.cpu_sampler_fixed ? *settings.cpu_sampler_fixed : sample_local());
        fetch_remote(out);
    }

    double sample_local() {
        const auto current = read_proc_stat();
        if (!current) {
            if (!warned)
                plugin_log("balancer", LogSeverity::warning,
                           "least_cpu poller of " + balancer + ": cannot read /proc/stat; reporting 50");
            warned = true;
            return LeastCpu::missing_cpu;
        }
        if (!previous) {  // the baseline read failed: this one is the baseline
            previous = current;
            return last_sample;
        }
        // No tick since the previous sample: keep that sample as the baseline and report
        // the last value again.
        if (auto percent = cpu_percent(*previous, *current)) {
            previous = current;
            last_sample = *percent;
        }
        return last_sample;
    }

    void store_local(double cpu) {
        // Two separate atomics: a pick may pair the new value with the previous time for
        // an instant, which only matters at the ttl boundary (see NodeReading).
        local_reading->value.store(cpu);
        local_reading->at_ms.store(settings.now_ms());
    }

    void fetch_remote(Outbox& out) {
        const auto members = host->members();
        // The readings picks read (AlgorithmState hands every holder the same object per
        // node): the replies are stored there.
        auto table = std::make_shared<const ReadingTable>(AlgorithmState::instance().readings(members->nodes));
        // Held until the next cycle, across restarts: a snapshot that replaces this one
        // finds the same readings, instead of starting empty once this one is freed.
        owner->held_readings_ = table;
        const std::uint64_t this_cycle = ++cycle;
        outstanding = 0;
        for (std::size_t i = 0; i < members->nodes.size(); ++i) {
            const auto& node = members->nodes[i];
            if (node == local_node) continue;
            ++outstanding;
            // Completions hold the Run and the reading they write; they run on the host's
            // executor, after this step has released the mutex.
            host->async_call(node, reading_module, reading_function, {}, remote_timeout,
                             [self = shared_from_this(), this_cycle, reading = (*table)[i],
                              node](CallResult result) { self->on_reply(this_cycle, *reading, node, result); });
        }
        if (outstanding == 0) return end_cycle(out, "");
        // Every call ends by its deadline; the extra second only guards against a
        // completion that never comes.
        arm(remote_timeout + std::chrono::seconds(1), Step::end_cycle);
    }

    void end_cycle(Outbox& out, std::string_view failure) {
        if (in_cycle) {
            in_cycle = false;
            Event e{.name = failure.empty() ? EventName::least_cpu_poll_stop : EventName::least_cpu_poll_exception};
            e.load_balancer = balancer;
            e.duration = std::chrono::steady_clock::now() - began;
            e.kind = failure.empty() ? "" : "error";
            out.end = e;
            out.reason = failure;
        }
        ++cycle;  // replies still to come belong to a finished cycle
        outstanding = 0;
        arm(settings.poll_interval, Step::begin_cycle);
    }

    void on_reply(std::uint64_t of_cycle, NodeReading& reading, const std::string& node, const CallResult& result) {
        double cpu = 0.0;
        const Reply reply = result ? parse_reply(*result, cpu) : Reply::malformed;
        Outbox out;
        {
            std::lock_guard lock(mutex);
            if (stopping) return;
            if (reply == Reply::reading) {
                reading.value.store(cpu);
                reading.at_ms.store(settings.now_ms());
            }
            if (of_cycle == cycle && outstanding > 0 && --outstanding == 0)
                guarded(out, [&] { end_cycle(out, ""); });
        }
        emit(out);
        if (reply != Reply::malformed) return;
        remote_errors->fetch_add(1);
        if (bus->active()) {
            Event e{.name = EventName::least_cpu_poll_remote_error};
            e.load_balancer = balancer;
            e.node = node;
            e.kind = result ? "error" : "exit";  // a bad reply, or no reply at all
            e.reason = result ? std::string_view("malformed reading") : std::string_view(result.error().message);
            bus->emit(e);
        }
        if (result)
            plugin_log("balancer", LogSeverity::debug,
                       "least_cpu poller of " + balancer + ": malformed cpu reading from " + node + ": " +
                           boost::json::serialize(*result));
        else
            plugin_log("balancer", LogSeverity::debug,
                       "least_cpu poller of " + balancer + ": cpu reading of " + node + " failed: " +
                           std::string(to_string(result.error().code)) + " " + result.error().message);
    }
};

CpuPoller::CpuPoller(AlgorithmContext context, LeastCpuSettings settings)
    : context_(std::move(context)),
      settings_(settings),
      local_reading_(AlgorithmState::instance().reading(context_.local_node)),
      remote_errors_(AlgorithmState::instance().counter(context_.balancer, "least_cpu.remote_errors")) {}

CpuPoller::~CpuPoller() { stop(); }

std::string CpuPoller::name() const { return context_.balancer + "_cpu_poller"; }

void CpuPoller::start() {
    if (context_.host == nullptr)
        throw std::logic_error("least_cpu poller of " + context_.balancer + " needs a host");
    if (run_) return;
    if (!pin_this_plugin())
        plugin_log("balancer", LogSeverity::warning, "least_cpu: could not pin the plugin in memory");
    // Process-wide reading, not this poller's: any LeastCpu balancer of the node serves
    // the latest reading, whichever poller wrote it. The served function holds it.
    context_.host->serve(reading_module, reading_function,
                         [local = local_reading_](const boost::json::array&) -> CallResult {
                             if (local->at_ms.load() == 0) return boost::json::value(nullptr);
                             return boost::json::object{{"cpu", local->value.load()}};
                         });
    auto run = std::make_shared<Run>(*this, *context_.host);
    std::chrono::milliseconds delay{0};
    if (settings_.poll_startup_jitter.count() > 0) {
        std::mt19937_64 rng(settings_.seed ? *settings_.seed : std::random_device{}());
        delay = std::chrono::milliseconds(
            std::uniform_int_distribution<std::int64_t>(0, settings_.poll_startup_jitter.count())(rng));
    }
    {
        std::lock_guard lock(run->mutex);
        run->arm(delay, Run::Step::begin_cycle);
    }
    run_ = std::move(run);
}

void CpuPoller::stop() noexcept {
    if (!run_) return;
    {
        std::lock_guard lock(run_->mutex);
        run_->stopping = true;
        run_->timer.cancel();
    }
    run_.reset();
}

}  // namespace rpclb::plugins
