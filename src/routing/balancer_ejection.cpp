// A balancer's outlier ejection: what the detector hears of each call, the route without
// the ejected members, the events and the timer that ends ejections.
#include <rpclb/detail/log.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/telemetry.hpp>

#include "routing/balancer_impl.hpp"
#include "routing/outlier_detector.hpp"

#include <boost/asio/post.hpp>

#include <utility>

namespace rpclb {

void LoadBalancer::Impl::report_ejections(const detail::OutlierChange& change) {
    auto& bus = node.telemetry();
    const auto& balancer = options.name;
    for (const auto& ejection : change.ejected) {
        RPCLB_LOG("balancer", warning) << "balancer " << balancer << ": member " << ejection.node << " ejected for "
                                       << ejection.duration.count() << " ms (" << ejection.reason << ")";
        if (bus.active()) {
            Event e{.name = EventName::member_ejected};
            e.load_balancer = balancer;
            e.node = ejection.node;
            e.reason = ejection.reason;
            e.duration = ejection.duration;
            bus.emit(e);
        }
    }
    for (const auto& returned : change.returned) {
        RPCLB_LOG("balancer", info) << "balancer " << balancer << ": member " << returned << " returned";
        if (bus.active()) {
            Event e{.name = EventName::member_returned};
            e.load_balancer = balancer;
            e.node = returned;
            bus.emit(e);
        }
    }
}

void LoadBalancer::Impl::record_outcome(const Picked& picked, const CallOutcome& outcome,
                                        std::chrono::steady_clock::time_point now) noexcept {
    try {
        // The route leaves an ejected member out before this release returns, so the
        // caller's next pick cannot reach it; the log lines, events and expiry timer are
        // left to the worker pool.
        if (auto change = outliers->record(picked.node(), outcome, now); !change.empty()) {
            {
                std::lock_guard lock(publish_mutex);
                republish();
            }
            boost::asio::post(node.workers(), [weak = self.weak_from_this(), change = std::move(change)] {
                auto owner = weak.lock();
                if (!owner) return;
                auto& m = *owner->impl_;
                try {
                    m.report_ejections(change);
                    if (!change.expiries.empty()) m.arm_ejection_timer();
                } catch (const std::exception& e) {
                    RPCLB_LOG("balancer", error) << "balancer " << m.options.name << ": ejection failed: " << e.what();
                }
            });
        }
    } catch (const std::exception& e) {
        RPCLB_LOG("balancer", error) << "balancer " << options.name << ": ejection failed: " << e.what();
    }
}

void LoadBalancer::Impl::apply_ejections(const detail::OutlierChange& change) {
    {
        std::lock_guard lock(publish_mutex);
        republish();
    }
    report_ejections(change);
    if (!change.expiries.empty()) arm_ejection_timer();
}

void LoadBalancer::Impl::arm_ejection_timer() {
    std::lock_guard lock(ejection_mutex);
    const auto next = outliers->next_expiry();
    if (!next) return;
    if (!ejection_timer)
        ejection_timer =
            std::make_unique<detail::EjectionTimer>(detail::EjectionTimer{boost::asio::steady_timer(node.workers())});
    ejection_timer->timer.expires_at(*next);
    ejection_timer->timer.async_wait([weak = self.weak_from_this()](const boost::system::error_code& ec) {
        if (ec) return;
        auto owner = weak.lock();
        if (!owner) return;
        auto& m = *owner->impl_;
        try {
            if (auto back = m.outliers->expire(std::chrono::steady_clock::now()); !back.empty())
                m.apply_ejections(back);
        } catch (const std::exception& e) {
            RPCLB_LOG("balancer", error) << "balancer " << m.options.name << ": ejection failed: " << e.what();
        }
        m.arm_ejection_timer();
    });
}

void LoadBalancer::Impl::cancel_ejection_timer() {
    std::lock_guard lock(ejection_mutex);
    if (ejection_timer) ejection_timer->timer.cancel();
}

std::vector<std::string> LoadBalancer::ejected() const {
    return impl_->outliers ? impl_->outliers->ejected() : std::vector<std::string>{};
}

std::uint64_t LoadBalancer::ejections_refused() const { return impl_->outliers ? impl_->outliers->refused() : 0; }

}  // namespace rpclb
