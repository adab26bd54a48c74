// The Router's own parts that no call's state needs: its construction, the blocking
// call over start(), and the timers of waits and hedges (doc/architecture.md "Calls").
#include "routing/router.hpp"

#include <boost/asio/post.hpp>

#include <condition_variable>
#include <mutex>
#include <optional>

namespace rpclb::detail {
namespace asio = boost::asio;

Router::Router(RouterOptions options, asio::io_context& ioc, Mesh& mesh, CallChannels& channels, RpcServer& rpc,
               BalancerRegistry& balancers, TelemetryBus& bus)
    : options_(std::move(options)),
      mesh_(mesh),
      channels_(channels),
      rpc_(rpc),
      balancers_(balancers),
      bus_(bus),
      retry_strand_(ioc.get_executor()) {}

CallResult Router::run_blocking(CallSpec spec, bool on_network_thread) {
    if (on_network_thread)
        return call_failure(Failure::would_deadlock, spec.node.empty() ? options_.name : spec.node, spec.module,
                            spec.function);
    // The outcome comes on this thread (a call channel, a local handler) or on another
    // (the mesh link); a mutex and a condition variable on the stack serve both, with no
    // shared state to allocate as a promise would. The completion notifies under the lock,
    // so this frame outlives its last use of them.
    struct Wait {
        std::mutex mutex;
        std::condition_variable done;
        std::optional<CallResult> result;
    } wait;
    start(
        std::move(spec),
        [&wait](CallResult r) {
            std::lock_guard lock(wait.mutex);
            wait.result = std::move(r);
            wait.done.notify_one();
        },
        true);
    const auto answered = [&] { return wait.result.has_value(); };
    // A call made from a handler ends by that handler's call's deadline, and, cancelled,
    // when that call's caller gives up on it: the operation sees to both.
    std::unique_lock lock(wait.mutex);
    wait.done.wait(lock, answered);
    return std::move(*wait.result);
}

void Router::after(std::chrono::milliseconds delay, std::function<void(bool fired)> then, bool wakeable) {
    asio::dispatch(retry_strand_, [self = self_.lock(), delay, then = std::move(then), wakeable]() mutable {
        if (self->stopping_.load()) return then(false);
        auto timer = std::make_shared<asio::steady_timer>(self->retry_strand_, delay);
        self->retry_timers_.emplace(timer, wakeable);
        timer->async_wait([self, timer, then = std::move(then)](boost::system::error_code ec) {
            const bool woken = self->woken_.erase(timer.get()) > 0;
            self->retry_timers_.erase(timer);
            then((!ec || woken) && !self->stopping_.load());
        });
    });
}

void Router::wake() {
    asio::dispatch(retry_strand_, [self = self_.lock()] {
        for (const auto& [t, wakeable] : self->retry_timers_) {
            if (!wakeable) continue;
            self->woken_.insert(t.get());
            t->cancel();
        }
    });
}

void Router::stop() {
    stopping_ = true;
    asio::dispatch(retry_strand_, [self = self_.lock()] {
        for (const auto& [t, wakeable] : self->retry_timers_) t->cancel();
    });
}

}  // namespace rpclb::detail
