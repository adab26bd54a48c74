// The hooks by which the calls a handler made end when its caller gives up
// (rpc/abandon_signal.hpp).
#define BOOST_TEST_MODULE abandon_signal
#include <boost/test/unit_test.hpp>

#include "rpc/abandon_signal.hpp"

#include <memory>

using rpclb::detail::AbandonSignal;
using rpclb::detail::AbandonTie;

BOOST_AUTO_TEST_CASE(fire_runs_each_hook_once_and_refuses_later_ones) {
    auto signal = std::make_shared<AbandonSignal>();
    int a = 0, b = 0;
    BOOST_TEST(signal->add([&] { ++a; }) != 0u);
    BOOST_TEST(signal->add([&] { ++b; }) != 0u);
    BOOST_TEST(!signal->fired());
    BOOST_TEST(signal->fire());
    BOOST_TEST(signal->fired());
    BOOST_TEST(!signal->fire());
    BOOST_TEST(a == 1);
    BOOST_TEST(b == 1);
    BOOST_TEST(signal->hooks() == 0u);
    BOOST_TEST(signal->add([&] { ++a; }) == 0u);
    BOOST_TEST(a == 1);
}

BOOST_AUTO_TEST_CASE(a_removed_hook_never_runs_and_leaves_no_entry) {
    auto signal = std::make_shared<AbandonSignal>();
    int runs = 0;
    for (int i = 0; i < 1000; ++i) signal->remove(signal->add([&] { ++runs; }));
    const auto kept = signal->add([&] { runs += 10; });
    const auto gone = signal->add([&] { ++runs; });
    signal->remove(gone);
    signal->remove(gone);  // twice: ignored
    signal->remove(12345);  // unknown: ignored
    BOOST_TEST(signal->hooks() == 1u);
    signal->fire();
    BOOST_TEST(runs == 10);
    signal->remove(kept);  // after it ran: ignored
}

BOOST_AUTO_TEST_CASE(a_hook_may_add_and_remove_while_fired) {
    auto signal = std::make_shared<AbandonSignal>();
    AbandonSignal::HookId second = 0;
    bool refused = false;
    int runs = 0;
    signal->add([&] {
        refused = signal->add([] {}) == 0;  // no lock is held: no deadlock
        signal->remove(second);  // taken by fire() already: still runs
        ++runs;
    });
    second = signal->add([&] { ++runs; });
    signal->fire();
    BOOST_TEST(refused);
    BOOST_TEST(runs == 2);
}

BOOST_AUTO_TEST_CASE(a_tie_removes_its_hook_when_untied_or_destroyed) {
    auto signal = std::make_shared<AbandonSignal>();
    int runs = 0;
    {
        AbandonTie tie;
        BOOST_TEST(tie.tie(*signal, [&] { ++runs; }));
        BOOST_TEST(signal->hooks() == 1u);
        tie.untie();
        BOOST_TEST(signal->hooks() == 0u);
        tie.untie();  // again: nothing
    }
    {
        AbandonTie tie;
        BOOST_TEST(tie.tie(*signal, [&] { ++runs; }));
    }
    BOOST_TEST(signal->hooks() == 0u);
    signal->fire();
    BOOST_TEST(runs == 0);
}

BOOST_AUTO_TEST_CASE(a_tie_after_untie_leaves_no_hook) {
    auto signal = std::make_shared<AbandonSignal>();
    AbandonTie tie;
    tie.untie();  // the call completed before its tie() got to the signal
    BOOST_TEST(tie.tie(*signal, [] {}));
    BOOST_TEST(signal->hooks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_tie_to_a_fired_signal_is_refused) {
    auto signal = std::make_shared<AbandonSignal>();
    signal->fire();
    AbandonTie tie;
    int runs = 0;
    BOOST_TEST(!tie.tie(*signal, [&] { ++runs; }));
    BOOST_TEST(runs == 0);
}

BOOST_AUTO_TEST_CASE(a_tied_hook_runs_when_fired_and_untie_after_is_harmless) {
    auto signal = std::make_shared<AbandonSignal>();
    AbandonTie tie;
    int runs = 0;
    BOOST_TEST(tie.tie(*signal, [&] {
        ++runs;
        tie.untie();  // a cancelled call completes inside its hook
    }));
    signal->fire();
    BOOST_TEST(runs == 1);
    tie.untie();
}
