// Waits for a balancer's group to reach a number of members (Cluster::wait_for_members).
#pragma once

#include "membership/mesh.hpp"

#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// Runs `handler(result)` later (never in place) on the handler's associated executor,
/// else `fallback`, with that executor's outstanding work counted until it has run.
template <class Handler, class R>
void post_completion(Handler handler, boost::asio::any_completion_executor fallback, R result) {
    namespace asio = boost::asio;
    auto work = asio::prefer(asio::get_associated_executor(handler, fallback), asio::execution::outstanding_work.tracked);
    auto later = asio::prefer(work, asio::execution::blocking.never);
    later.execute([work = std::move(work), h = std::move(handler), r = std::move(result)]() mutable {
        std::move(h)(std::move(r));
    });
}

/// The ErrorMessage of `failure` for a wait on `balancer`: details {"node", "load_balancer"}.
ErrorMessage wait_failure(Failure failure, std::string_view node, std::string_view balancer);

/// The error of a wait on `balancer` that no member can end: this node is locked out
/// (`why`). A cookie refusal is cookie_refused_error()'s, a TLS one Failure::tls_refused
/// "TLS handshake with ADDRESS failed: REASON" with details {"tls_peer"}; both add
/// {"load_balancer"} to {"node"}.
ErrorMessage locked_out_failure(const LockedOut& why, std::string_view node, std::string_view balancer);

/// The error of a wait on `balancer` once this node gave up its name (`why`, as logged):
/// Failure::name_taken.
ErrorMessage name_taken_failure(const std::string& why, std::string_view node, std::string_view balancer);

/// One pending wait: a monitor of the group, a deadline timer on the network loop and the
/// handler's cancellation slot race to finish() it, and the first wins. Its completion is
/// posted to the handler's executor with that executor's work counted until it runs.
///
/// Thread safety: finish() from any thread, once or more (only the first counts).
class MemberWait : public std::enable_shared_from_this<MemberWait> {
public:
    using Completion = boost::asio::any_completion_handler<void(Result<void>)>;

    MemberWait(Groups& groups, boost::asio::io_context& network, std::string node, std::string balancer,
               std::size_t count);

    /// Monitors the group, arms the timer and the slot, and finishes at once when the
    /// group is big enough already. `executor` runs the completion.
    void start(std::chrono::milliseconds timeout, Completion handler, boost::asio::any_completion_executor executor);

    /// Completes the wait with `result` unless it has completed already.
    void finish(Result<void> result);

    const std::string& balancer() const noexcept { return balancer_; }

    /// The error of a wait that ended by its deadline; it adds that this node reached no
    /// other node when `isolated` says so.
    ErrorMessage timeout_error(std::chrono::milliseconds timeout) const;

    /// True when this node is connected to no other node; set before start(), may be empty.
    std::function<bool()> isolated;

private:
    friend class MemberWaits;
    void check();

    Groups& groups_;
    std::string node_;
    std::string balancer_;
    std::size_t count_;
    std::mutex mutex_;  // guards what follows; never held while demonitor() waits
    boost::asio::steady_timer timer_;
    Completion handler_;
    boost::asio::any_completion_executor work_;
    boost::asio::cancellation_slot slot_;
    std::uint64_t monitor_ = 0;
    bool done_ = false;
};

/// The node's pending waits, so that stop() ends them ("node stopping") before the
/// network loop that holds their timers goes. Thread safety: any thread.
class MemberWaits {
public:
    /// Adds `wait`; false (and nothing added) once stop() has run.
    bool add(const std::shared_ptr<MemberWait>& wait);
    /// Finishes every pending wait with "node stopping"; later add() calls fail.
    void stop();
    /// Finishes every pending wait with `error(balancer)`, for a reason no member can end
    /// (Cluster::wait_for_members). Later waits are not affected.
    void fail_all(const std::function<ErrorMessage(const std::string& balancer)>& error);

private:
    std::mutex mutex_;
    std::vector<std::weak_ptr<MemberWait>> waits_;
    bool stopped_ = false;
};

}  // namespace rpclb::detail
