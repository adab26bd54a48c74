// Failures cost (doc/reference/algorithms.md, "Failures"): least_connections, power_of_two
// and peak_ewma, loaded from their plugins, score a member's counted failures as expensive,
// so a member that fails fast gets no more than its share. The test plays the balancer: a
// pick counts a call in flight, a release counts it off and tells the algorithm how the
// call ended. The clock is frozen (option `test_now_ms`), so failure loads and costs do not
// decay during a test (decay: test/unit/failure_cost.cpp).
#define BOOST_TEST_MODULE algorithms_failures
#include <boost/test/unit_test.hpp>

#include <rpclb/plugin_registry.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

std::string this_balancer() { return boost::unit_test::framework::current_test_case().p_name; }

// Loads the real plugin through the registry (RPCLB_PLUGIN_PATH).
std::shared_ptr<rpclb::SelectionAlgorithm> load(const std::string& name, boost::json::object options) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create(name);
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init({this_balancer(), "me@host", nullptr}, options);
    return *algorithm;
}

// Deterministic draws and a frozen clock; `extra` adds to them.
boost::json::object options(std::uint64_t seed, std::string_view extra = "{}") {
    boost::json::object o{{"seed", seed}, {"test_now_ms", 1'000'000}};
    const boost::json::value more = boost::json::parse(extra);
    for (const auto& option : more.as_object()) o[option.key()] = option.value();
    return o;
}

rpclb::MemberSnapshot counted(std::vector<std::string> nodes) {
    rpclb::MemberSnapshot members(std::move(nodes), 1);
    members.count_calls();
    return members;
}

rpclb::CallOutcome succeeded(std::chrono::nanoseconds latency) {
    rpclb::CallOutcome outcome;
    outcome.latency = latency;
    return outcome;
}

rpclb::CallOutcome failed(rpclb::ErrorCode code, rpclb::ErrorOrigin origin,
                          std::chrono::nanoseconds latency = 100us) {
    rpclb::CallOutcome outcome;
    outcome.error = code;
    outcome.origin = origin;
    outcome.latency = latency;
    return outcome;
}

// A pick as a balancer makes it: chosen, then counted.
std::size_t pick(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members) {
    auto index = algorithm.choose_from_nodes(members, {});
    BOOST_TEST_REQUIRE(index.has_value(), (index ? "" : index.error().message));
    BOOST_TEST_REQUIRE(*index < members.nodes.size());
    members.calls[*index]->acquire();
    return *index;
}

void release(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members, std::size_t index,
             const rpclb::CallOutcome& outcome) {
    members.calls[index]->release();
    algorithm.release(members, index, outcome);
}

// A closed loop of `clients` callers making `calls` calls in all, on virtual time: each
// caller calls again as soon as its call ends. A member in `failing` answers
// `service_unavailable` after 100 µs; the others succeed after 10 ms. Returns the share of
// the calls each member got.
std::map<std::string, double> closed_loop(rpclb::SelectionAlgorithm& algorithm, const rpclb::MemberSnapshot& members,
                                          const std::set<std::string>& failing, int clients = 8,
                                          int calls = 5'000) {
    std::map<std::string, int> picks;
    std::multimap<std::chrono::microseconds, std::size_t> ends;  // end time -> member
    const auto call = [&](std::chrono::microseconds now) {
        const std::size_t index = pick(algorithm, members);
        ++picks[members.nodes[index]];
        ends.emplace(now + (failing.contains(members.nodes[index]) ? 100us : 10'000us), index);
    };
    for (int i = 0; i < clients; ++i) call(0us);
    for (int made = clients; !ends.empty();) {
        const auto [now, index] = *ends.begin();
        ends.erase(ends.begin());
        release(algorithm, members, index,
                failing.contains(members.nodes[index])
                    ? failed(rpclb::ErrorCode::service_unavailable, rpclb::ErrorOrigin::remote, 100us)
                    : succeeded(10ms));
        if (made < calls) {
            call(now);
            ++made;
        }
    }
    std::map<std::string, double> share;
    for (const auto& node : members.nodes) share[node] = static_cast<double>(picks[node]) / calls;
    return share;
}

const std::vector<std::string> load_aware{"least_connections", "power_of_two", "peak_ewma"};

}  // namespace

BOOST_AUTO_TEST_SUITE(failures)

BOOST_AUTO_TEST_CASE(a_member_that_fails_fast_gets_at_most_its_share) {
    // 1 of 5 members fails fast; its fair share is 20 %.
    for (const auto& name : load_aware) {
        BOOST_TEST_CONTEXT(name) {
            auto algorithm = load(name, options(17));
            const auto members = counted({"a", "b", "c", "d", "e"});
            const auto share = closed_loop(*algorithm, members, {"a"});
            BOOST_TEST_MESSAGE(name << ": the failing member's share " << share.at("a"));
            BOOST_TEST(share.at("a") <= 0.22);
        }
    }
}

BOOST_AUTO_TEST_CASE(a_member_that_fails_fast_attracts_calls_when_failures_cost_nothing) {
    // The case above without the penalty: a fast failure looks like an idle, quick member.
    for (const auto& name : load_aware) {
        BOOST_TEST_CONTEXT(name) {
            auto algorithm = load(name, options(17, R"({"failure_penalty": 0})"));
            const auto members = counted({"a", "b", "c", "d", "e"});
            const auto share = closed_loop(*algorithm, members, {"a"});
            BOOST_TEST_MESSAGE(name << ", failure_penalty 0: the failing member's share " << share.at("a"));
            BOOST_TEST(share.at("a") > 0.3);
        }
    }
}

BOOST_AUTO_TEST_CASE(two_of_three_failing_fast_leave_most_calls_to_the_healthy_one) {
    // Two random choices reach the healthy member in 2 draws of 3, so about 2/3 at best.
    for (const auto& name : load_aware) {
        BOOST_TEST_CONTEXT(name) {
            auto algorithm = load(name, options(29));
            const auto members = counted({"a", "b", "c"});
            const auto share = closed_loop(*algorithm, members, {"a", "b"});
            BOOST_TEST_MESSAGE(name << ": the healthy member's share " << share.at("c"));
            BOOST_TEST(share.at("c") >= 0.6);
            // Without the penalty the failing members take most calls.
            auto free = load(name, options(29, R"({"failure_penalty": 0})"));
            const auto again = counted({"a", "b", "c"});
            const double without = closed_loop(*free, again, {"a", "b"}).at("c");
            BOOST_TEST_MESSAGE(name << ", failure_penalty 0: the healthy member's share " << without);
            BOOST_TEST(without < 0.6);
        }
    }
}

// After `outcome` on a and a success on b, both as fast, the share of 2,000 picks over
// [a, b] that goes to a, each pick released at once (as a success, same latency).
double share_after(const std::string& name, const rpclb::CallOutcome& outcome) {
    auto algorithm = load(name, options(5));
    const auto ab = counted({"a", "b"});
    const rpclb::CallOutcome fast = succeeded(100us);
    // Members start with a sample each, so peak_ewma compares costs, not its mean.
    algorithm->release(ab, 0, fast);
    algorithm->release(ab, 1, fast);
    algorithm->release(ab, 0, outcome);
    int on_a = 0;
    for (int i = 0; i < 2'000; ++i) {
        const std::size_t index = pick(*algorithm, ab);
        on_a += index == 0;
        release(*algorithm, ab, index, fast);
    }
    return on_a / 2'000.0;
}

BOOST_AUTO_TEST_CASE(a_members_failure_costs_but_a_callers_mistake_or_a_refusal_does_not) {
    using rpclb::ErrorCode;
    using rpclb::ErrorOrigin;
    const std::vector<std::pair<std::string, rpclb::CallOutcome>> free{
        {"success", succeeded(100us)},
        {"bad_request from the member", failed(ErrorCode::bad_request, ErrorOrigin::remote)},
        {"not_found from the member", failed(ErrorCode::not_found, ErrorOrigin::remote)},
        {"bad_request on the way", failed(ErrorCode::bad_request, ErrorOrigin::local)},
        {"draining refusal", failed(ErrorCode::service_unavailable, ErrorOrigin::none)},
    };
    const std::vector<std::pair<std::string, rpclb::CallOutcome>> costly{
        {"internal_server_error from the member", failed(ErrorCode::internal_server_error, ErrorOrigin::remote)},
        {"service_unavailable from the member", failed(ErrorCode::service_unavailable, ErrorOrigin::remote)},
        {"no connection", failed(ErrorCode::service_unavailable, ErrorOrigin::local)},
        {"deadline passed", failed(ErrorCode::request_timeout, ErrorOrigin::local)},
    };
    for (const auto& name : load_aware) {
        for (const auto& [what, outcome] : free)
            BOOST_TEST_CONTEXT(name << ", " << what) {
                // Ties (and equal costs) split the picks: about half each (sd about 1 %).
                const double share = share_after(name, outcome);
                BOOST_TEST(share >= 0.4);
                BOOST_TEST(share <= 0.6);
            }
        for (const auto& [what, outcome] : costly)
            BOOST_TEST_CONTEXT(name << ", " << what) {
                // One failure weighs like a call in flight for the whole (frozen) test, or
                // costs failure_penalty (1 s) against 100 µs: a is picked far less often.
                BOOST_TEST(share_after(name, outcome) < 0.1);
            }
    }
}

BOOST_AUTO_TEST_CASE(bad_failure_penalty_fails_init_naming_it) {
    for (const auto& name : load_aware) {
        for (const std::string value : {"-1", "1.5", "\"10\"", "86400001", "null"}) {
            BOOST_TEST_CONTEXT(name << " failure_penalty " << value) {
                rpclb::PluginRegistry registry;
                auto algorithm = registry.create(name).value();
                try {
                    algorithm->init({this_balancer(), "me@host", nullptr},
                                    boost::json::parse(R"({"failure_penalty": )" + value + "}").as_object());
                    BOOST_ERROR("init accepted it");
                } catch (const std::invalid_argument& e) {
                    BOOST_TEST(std::string(e.what()).starts_with(name + ": option failure_penalty "), e.what());
                }
            }
        }
        BOOST_TEST_CONTEXT(name << " failure_penalty 0 and 86400000") {
            for (const std::string value : {"0", "86400000"})
                (void)load(name, boost::json::parse(R"({"failure_penalty": )" + value + "}").as_object());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
