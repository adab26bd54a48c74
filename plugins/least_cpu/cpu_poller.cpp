#include "cpu_poller.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/detail/log.hpp>
#include <rpclb/plugin_pin.hpp>

#include <boost/json/serialize.hpp>

#include <dlfcn.h>

#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace rpclb::plugins {

// What the polling thread and the callbacks of its remote calls share. Callbacks hold it
// by shared_ptr, so one that completes after the poller is gone still finds it.
struct CpuPoller::Shared {
    std::mutex mutex;
    std::condition_variable wake;
    bool stopping = false;
    std::uint64_t cycle = 0;     // which cycle `outstanding` counts for
    std::size_t outstanding = 0; // replies the current cycle still waits for
};

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

}  // namespace

CpuPoller::CpuPoller(std::string balancer, std::string local_node, Cluster* cluster,
                     LeastCpuSettings settings)
    : balancer_(std::move(balancer)),
      local_node_(std::move(local_node)),
      cluster_(cluster),
      settings_(settings),
      local_reading_(AlgorithmState::instance().reading(local_node_)),
      remote_errors_(AlgorithmState::instance().counter(balancer_, "least_cpu.remote_errors")) {}

CpuPoller::~CpuPoller() { stop(); }

std::string CpuPoller::name() const { return balancer_ + "_cpu_poller"; }

void CpuPoller::start() {
    if (cluster_ == nullptr)
        throw std::logic_error("least_cpu poller of " + balancer_ + " needs a cluster");
    if (thread_.joinable()) return;
    if (!pin_this_plugin())
        RPCLB_LOG("balancer", warning) << "least_cpu: could not pin the plugin in memory";
    // Process-wide slot, not this poller: any LeastCpu balancer of the node serves the
    // latest reading, whichever poller wrote it.
    NodeReading* local = &local_reading_;
    cluster_->register_function(reading_module, reading_function,
                                [local](const boost::json::array&) -> CallResult {
                                    if (local->at_ms.load() == 0) return boost::json::value(nullptr);
                                    return boost::json::object{{"cpu", local->value.load()}};
                                });
    shared_ = std::make_shared<Shared>();
    thread_ = std::thread([this] { run(); });
}

void CpuPoller::stop() noexcept {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lock(shared_->mutex);
        shared_->stopping = true;
    }
    shared_->wake.notify_all();
    if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();  // cannot happen through rpclb; never join oneself
        return;
    }
    thread_.join();
}

bool CpuPoller::sleep_for(std::chrono::milliseconds duration) {
    std::unique_lock lock(shared_->mutex);
    return !shared_->wake.wait_for(lock, duration, [&] { return shared_->stopping; });
}

void CpuPoller::run() noexcept {
    // What escapes a cycle (anything but a std::exception, or a failure outside the
    // cycles) ends the thread as a failure: the balancer's supervisor restarts the poller
    // with its balancer, instead of std::terminate taking the node down.
    run_reporting_failure([this] {
        std::chrono::milliseconds delay{0};
        if (settings_.poll_startup_jitter.count() > 0) {
            std::mt19937_64 rng(settings_.seed ? *settings_.seed : std::random_device{}());
            delay = std::chrono::milliseconds(std::uniform_int_distribution<std::int64_t>(
                0, settings_.poll_startup_jitter.count())(rng));
        }
        if (!sleep_for(delay)) return;
        do {
            // The seed's poll span (§5.3): start, then stop or exception.
            auto& bus = cluster_->telemetry();
            Event e{.name = EventName::least_cpu_poll_start};
            e.load_balancer = balancer_;
            e.system_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
            const auto began = std::chrono::steady_clock::now();
            if (bus.active()) bus.emit(e);
            std::string failure;
            try {
                poll_once();
            } catch (const std::exception& ex) {
                failure = ex.what();
                RPCLB_LOG("balancer", warning) << "least_cpu poller of " << balancer_
                                               << ": poll cycle failed: " << failure;
            }
            if (bus.active()) {
                e.name = failure.empty() ? EventName::least_cpu_poll_stop : EventName::least_cpu_poll_exception;
                e.duration = std::chrono::steady_clock::now() - began;
                e.kind = failure.empty() ? "" : "error";
                e.reason = failure;
                bus.emit(e);
            }
        } while (sleep_for(settings_.poll_interval));
    });
}

void CpuPoller::poll_once() {
    const auto cpu = settings_.cpu_sampler_fixed ? settings_.cpu_sampler_fixed : sample_local();
    if (!cpu) return;  // stopping during the first sample's window
    // Two separate atomics: a pick may pair the new value with the previous time for an
    // instant, which only matters at the ttl boundary (see NodeReading).
    local_reading_.value.store(*cpu);
    local_reading_.at_ms.store(settings_.now_ms());
    fetch_remote();
}

std::optional<double> CpuPoller::sample_local() {
    auto current = read_proc_stat();
    if (current && !previous_) {
        previous_ = current;
        if (!sleep_for(first_sample_window)) return std::nullopt;
        current = read_proc_stat();
    }
    if (!current) {
        if (!warned_)
            RPCLB_LOG("balancer", warning) << "least_cpu poller of " << balancer_
                                           << ": cannot read /proc/stat; reporting "
                                           << LeastCpu::missing_cpu;
        warned_ = true;
        return LeastCpu::missing_cpu;
    }
    // No tick since the previous sample: keep that sample as the baseline and report the
    // last value again.
    if (auto percent = cpu_percent(*previous_, *current)) {
        previous_ = current;
        last_sample_ = *percent;
    }
    return last_sample_;
}

void CpuPoller::fetch_remote() {
    const auto members = cluster_->groups().members(balancer_);
    std::vector<std::string> remote;
    for (const auto& node : members->nodes)
        if (node != local_node_) remote.push_back(node);
    if (remote.empty()) return;

    std::uint64_t cycle = 0;
    {
        std::lock_guard lock(shared_->mutex);
        if (shared_->stopping) return;
        cycle = ++shared_->cycle;
        shared_->outstanding = remote.size();
    }
    for (auto& node : remote) {
        NodeReading* slot = &AlgorithmState::instance().reading(node);
        CallOptions options;
        options.timeout = remote_timeout;
        // Only values and process-wide objects: the callback may run after this poller
        // is gone (its code stays mapped, see pin_this_plugin).
        cluster_->async_call(
            node, reading_module, reading_function, {}, std::move(options),
            [shared = shared_, cycle, slot, node, balancer = balancer_, errors = &remote_errors_,
             settings = settings_, bus = &cluster_->telemetry()](CallResult result) {
                double cpu = 0.0;
                const Reply reply = result ? parse_reply(*result, cpu) : Reply::malformed;
                {
                    std::lock_guard lock(shared->mutex);
                    if (shared->stopping) return;
                    if (reply == Reply::reading) {
                        slot->value.store(cpu);
                        slot->at_ms.store(settings.now_ms());
                    }
                    if (shared->cycle == cycle && shared->outstanding > 0 && --shared->outstanding == 0)
                        shared->wake.notify_all();
                }
                if (reply != Reply::malformed) return;
                errors->fetch_add(1);
                if (bus->active()) {
                    Event e{.name = EventName::least_cpu_poll_remote_error};
                    e.load_balancer = balancer;
                    e.node = node;
                    e.kind = result ? "error" : "exit";  // a bad reply, or no reply at all
                    e.reason = result ? std::string_view("malformed reading") : std::string_view(result.error().message);
                    bus->emit(e);
                }
                if (result)
                    RPCLB_LOG("balancer", debug) << "least_cpu poller of " << balancer
                                                 << ": malformed cpu reading from " << node << ": "
                                                 << boost::json::serialize(*result);
                else
                    RPCLB_LOG("balancer", debug) << "least_cpu poller of " << balancer << ": cpu reading of "
                                                 << node << " failed: " << to_string(result.error().code)
                                                 << " " << result.error().message;
            });
    }
    // Every call ends by its deadline; the extra second only guards against a callback
    // that never comes.
    std::unique_lock lock(shared_->mutex);
    shared_->wake.wait_for(lock, remote_timeout + std::chrono::seconds(1), [&] {
        return shared_->stopping || shared_->outstanding == 0;
    });
}

}  // namespace rpclb::plugins
