// An algorithm whose init takes `sleep_ms` (algorithm option) and says, in AlgorithmState
// under its balancer's name, when it entered and left init ("slow_init.entered",
// "slow_init.done"): the lock tests check that nothing a call needs waits for it.
#include <rpclb/algorithm_state.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <chrono>
#include <thread>

namespace {

class SlowInit final : public rpclb::SelectionAlgorithm {
public:
    void init(const rpclb::AlgorithmContext& context, const boost::json::object& options) override {
        balancer_ = context.balancer;
        auto& state = rpclb::AlgorithmState::instance();
        state.counter(balancer_, "slow_init.entered").fetch_add(1);
        std::int64_t ms = 0;
        if (const auto* sleep = options.if_contains("sleep_ms")) ms = sleep->to_number<std::int64_t>();
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // the slow init under test
        state.counter(balancer_, "slow_init.done").fetch_add(1);
    }

    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot& members,
                                                 const rpclb::PickOptions&) override {
        if (members.nodes.empty()) return rpclb::empty_members_error(balancer_);
        return std::size_t{0};
    }

private:
    std::string balancer_;
};

}  // namespace

RPCLB_PLUGIN(slow_init, SlowInit)
