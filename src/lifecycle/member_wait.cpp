#include "lifecycle/member_wait.hpp"
#include "lifecycle/cluster_impl.hpp"
#include <rpclb/cluster_async.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace rpclb {
namespace asio = boost::asio;

namespace detail {

ErrorMessage wait_failure(Failure failure, std::string_view node, std::string_view balancer) {
    auto e = call_failure(failure, node, "", "");
    e.details.erase("module");
    e.details.erase("function");
    e.details["load_balancer"] = balancer;
    return e;
}

ErrorMessage locked_out_failure(const LockedOut& why, std::string_view node, std::string_view balancer) {
    ErrorMessage e;
    if (why.tls_reason.empty()) {
        e = cookie_refused_error(why.by, node, "", "");
    } else {
        e = call_failure(Failure::tls_refused, node, "", "");
        e.message = "TLS handshake with " + why.by + " failed: " + why.tls_reason;
        e.details["tls_peer"] = why.by;
    }
    e.details.erase("module");
    e.details.erase("function");
    e.details["load_balancer"] = balancer;
    return e;
}

ErrorMessage name_taken_failure(const std::string& why, std::string_view node, std::string_view balancer) {
    auto e = wait_failure(Failure::name_taken, node, balancer);
    e.message = "this node gave up its name: " + why;
    return e;
}

MemberWait::MemberWait(Groups& groups, asio::io_context& network, std::string node, std::string balancer,
                       std::size_t count)
    : groups_(groups), node_(std::move(node)), balancer_(std::move(balancer)), count_(count), timer_(network) {}

void MemberWait::start(std::chrono::milliseconds timeout, Completion handler, asio::any_completion_executor executor) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    {
        std::lock_guard lock(mutex_);
        handler_.swap(handler);  // swap: Boost 1.81's move-assignment wraps the handler in itself
        work_ = asio::prefer(std::move(executor), asio::execution::outstanding_work.tracked);
        slot_ = slot;
        // Assigned before anything can finish the wait, which clears the slot.
        if (slot.is_connected()) {
            slot.assign([weak = weak_from_this()](asio::cancellation_type) {
                if (auto self = weak.lock())
                    self->finish(wait_failure(Failure::cancelled, self->node_, self->balancer_));
            });
        }
        timer_.expires_after(timeout);
        // The pending timer keeps the wait alive; finish() cancels it.
        timer_.async_wait([self = shared_from_this(), timeout](boost::system::error_code ec) {
            if (!ec) self->finish(self->timeout_error(timeout));
        });
    }
    // A change between monitor() and the check below reaches the monitor: none is missed.
    const auto id = groups_.monitor(balancer_, [weak = weak_from_this()](const std::string&, NodeChange,
                                                                         const std::vector<std::string>&) {
        if (auto self = weak.lock()) self->check();
    });
    bool finished;
    {
        std::lock_guard lock(mutex_);
        monitor_ = id;
        finished = done_;
    }
    if (finished) groups_.demonitor(id);
    else check();
}

void MemberWait::check() {
    if (groups_.members(balancer_)->nodes.size() >= count_) finish({});
}

ErrorMessage MemberWait::timeout_error(std::chrono::milliseconds timeout) const {
    const auto members = groups_.members(balancer_)->nodes.size();
    ErrorMessage e;
    e.code = ErrorCode::request_timeout;
    e.reason = Failure::timeout;
    e.message = "balancer \"" + balancer_ + "\" has " + std::to_string(members) + " of the " + std::to_string(count_) +
                " members waited for after " + std::to_string(timeout.count()) + " ms";
    if (isolated && isolated())
        e.message += "; this node is connected to no other node (are its seeds listening, with the same cookie?)";
    e.details = {{"node", node_},
                 {"load_balancer", balancer_},
                 {"members", static_cast<std::int64_t>(members)},
                 {"wanted", static_cast<std::int64_t>(count_)}};
    return e;
}

void MemberWait::finish(Result<void> result) {
    Completion handler;
    asio::any_completion_executor work;
    std::uint64_t monitor;
    asio::cancellation_slot slot;
    {
        std::lock_guard lock(mutex_);
        if (done_) return;
        done_ = true;
        timer_.cancel();
        handler.swap(handler_);
        work = std::move(work_);
        monitor = monitor_;
        slot = slot_;
    }
    // From the monitor's own callback too: demonitor() then lets that run finish.
    if (monitor != 0) groups_.demonitor(monitor);
    auto complete = [slot, h = std::move(handler), r = std::move(result)]() mutable {
        // Cleared on the handler's executor, where its signal is emitted (Asio's rule).
        if (slot.is_connected()) slot.clear();
        std::move(h)(std::move(r));
    };
    asio::prefer(work, asio::execution::blocking.never).execute(std::move(complete));
}

bool MemberWaits::add(const std::shared_ptr<MemberWait>& wait) {
    std::lock_guard lock(mutex_);
    if (stopped_) return false;
    std::erase_if(waits_, [](const auto& w) { return w.expired(); });
    waits_.push_back(wait);
    return true;
}

void MemberWaits::stop() {
    std::vector<std::weak_ptr<MemberWait>> waits;
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
        waits.swap(waits_);
    }
    for (auto& w : waits)
        if (auto wait = w.lock()) wait->finish(wait_failure(Failure::node_stopping, wait->node_, wait->balancer_));
}

void MemberWaits::fail_all(const std::function<ErrorMessage(const std::string& balancer)>& error) {
    std::vector<std::weak_ptr<MemberWait>> waits;
    {
        std::lock_guard lock(mutex_);
        waits = waits_;
    }
    for (auto& w : waits)
        if (auto wait = w.lock()) wait->finish(error(wait->balancer_));
}

}  // namespace detail

void Cluster::initiate_wait_for_members(std::string balancer, std::size_t count, std::chrono::milliseconds timeout,
                                        WaitCompletion handler) {
    auto& impl = *impl_;
    const auto fallback = impl.completion_fallback();
    auto wait = std::make_shared<detail::MemberWait>(impl.node_groups, impl.runtime.network(), name(),
                                                     std::move(balancer), count);
    if (!impl.running || !impl.waits.add(wait)) {
        // Not started, or stopped: nothing would ever apply a change or fire the timer.
        auto error = detail::wait_failure(Failure::node_stopping, name(), wait->balancer());
        if (!impl.running && !impl.stopping) {
            error.message = "node not started";
            error.reason = {};
        }
        detail::post_completion(std::move(handler), fallback, Result<void>(std::move(error)));
        return;
    }
    wait->isolated = [&impl] { return impl.mesh.connected_nodes().empty(); };
    auto executor = asio::get_associated_executor(handler, fallback);
    wait->start(timeout, std::move(handler), std::move(executor));
    // Added before these checks, so a refusal or a name loss after them reaches the wait
    // through fail_all().
    if (auto why = impl.mesh.name_lost())
        wait->finish(detail::name_taken_failure(*why, name(), wait->balancer()));
    else if (auto out = impl.mesh.locked_out())
        wait->finish(detail::locked_out_failure(*out, name(), wait->balancer()));
}

Result<void> Cluster::wait_for_members(std::string_view balancer, std::size_t count,
                                       std::chrono::milliseconds timeout) {
    if (impl_->runtime.on_network_thread()) {
        auto e = detail::wait_failure(Failure::would_deadlock, name(), balancer);
        e.message = "blocking wait_for_members from a network thread would deadlock; use async_wait_for_members";
        return e;
    }
    return async_wait_for_members(std::string(balancer), count, timeout, asio::use_future).get();
}

}  // namespace rpclb
