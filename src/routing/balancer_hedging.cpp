// LoadBalancer: the budget of hedges and retries and their counts (the router sends the
// attempts).
#include "routing/balancer_impl.hpp"
#include <rpclb/load_balancer.hpp>
#include <rpclb/detail/log.hpp>

#include <algorithm>
#include <string_view>
#include <utility>

namespace rpclb {

LoadBalancer::HedgeStats LoadBalancer::hedge_stats() const noexcept {
    const auto& i = *impl_;
    return {i.hedged_calls.load(), i.hedges.load(), i.hedge_wins.load(), i.budget_refusals.load(),
            i.late_replies.load(), i.retries.load()};
}

std::optional<std::chrono::microseconds> LoadBalancer::recent_p95() const noexcept {
    return impl_->latencies.quantile(0.95);
}

void LoadBalancer::budget_call_started(bool hedged) noexcept {
    if (hedged) impl_->hedged_calls.fetch_add(1, std::memory_order_relaxed);
    impl_->hedge_budget.deposit(std::chrono::steady_clock::now());
}

bool LoadBalancer::take_budget_token(bool retry) noexcept {
    if (impl_->hedge_budget.take(std::chrono::steady_clock::now())) {
        (retry ? impl_->retries : impl_->hedges).fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    impl_->budget_refusals.fetch_add(1, std::memory_order_relaxed);
    return false;
}

std::optional<Hedging> LoadBalancer::call_hedging() const noexcept { return impl_->route.load()->call_hedging; }

bool LoadBalancer::marks_idempotent(std::string_view module, std::string_view function) const noexcept {
    // Most balancers list none: no load of the route on their calls.
    if (!impl_->lists_idempotent_functions.load(std::memory_order_relaxed)) return false;
    const auto route = impl_->route.load();
    const auto& names = *route->idempotent_functions;
    const auto at = std::lower_bound(names.begin(), names.end(), std::pair(module, function),
                                     [](const auto& a, const auto& b) {
                                         return std::pair<std::string_view, std::string_view>(a.first, a.second) < b;
                                     });
    return at != names.end() && at->first == module && at->second == function;
}

void LoadBalancer::Impl::adopt_hedging(const HedgingPolicy& policy) {
    hedging = policy;
    hedge_budget.configure(hedging.budget_percent, hedging.budget_min_per_second);
    FunctionNames names;
    names.reserve(policy.idempotent_functions.size());
    for (const auto& name : policy.idempotent_functions) {
        const auto dot = name.rfind('.');  // checked: there is one, inside the name
        names.emplace_back(name.substr(0, dot), name.substr(dot + 1));
    }
    std::sort(names.begin(), names.end());
    lists_idempotent_functions.store(!names.empty(), std::memory_order_relaxed);
    idempotent_functions = std::make_shared<const FunctionNames>(std::move(names));
}

void LoadBalancer::count_hedge_win() noexcept { impl_->hedge_wins.fetch_add(1, std::memory_order_relaxed); }

void LoadBalancer::attempts_clamped(int max_attempts, std::size_t members) noexcept {
    if (impl_->clamp_warned.exchange(true)) return;
    try {
        RPCLB_LOG("balancer", warning) << "balancer " << impl_->options.name << ": hedging.max_attempts " << max_attempts
                                       << " is more than its " << members
                                       << " members; such calls get one attempt per member (said once)";
    } catch (...) {
    }
}

void LoadBalancer::count_late_reply() noexcept { impl_->late_replies.fetch_add(1, std::memory_order_relaxed); }

}  // namespace rpclb
