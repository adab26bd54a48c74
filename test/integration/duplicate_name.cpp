// One name, one live node: a second process started under a live node's name is refused
// by its peers, keeps trying for twice the idle timeout, then gives up and exits 1 naming
// the conflict (its StopSignal wait ended without a handler); a restart whose predecessor
// froze unseen gets the name.
#define BOOST_TEST_MODULE duplicate_name
#include "support/node.hpp"

#include <boost/test/unit_test.hpp>

#include <string>

using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

const std::vector<std::string> fast_detection{"--idle-timeout", "600"};  // name given up after 1.2 s

}  // namespace

BOOST_FIXTURE_TEST_SUITE(duplicate_name, Harness)

BOOST_AUTO_TEST_CASE(a_second_live_process_under_a_name_exits_1_naming_the_conflict) {
    auto a = start_node({.name = "a", .extra_args = fast_detection});
    auto x1 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = fast_detection});
    auto client = start_client({a->address()});
    BOOST_REQUIRE(wait_for_connected(*client, {"a@127.0.0.1", "x@127.0.0.1"}));
    auto x2 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = fast_detection});
    const auto status = x2->process().wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE(status.has_value());
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    BOOST_TEST(x2->log_contains("a@127.0.0.1 refused this node's name for 1.2 s: an older live incarnation of "
                                "x@127.0.0.1 holds it there"));
    // Its last word, on stderr: why it exits.
    BOOST_TEST(x2->log_contains("rpclb-node: a@127.0.0.1 refused this node's name for 1.2 s"), x2->log());
    // The refusing peer said so once, at warning level, however often it was dialled.
    BOOST_TEST(a->log_count("refused x@127.0.0.1 incarnation") == 1u);
    // The holder goes on serving its name.
    auto r = client->call("x@127.0.0.1", "demo", "node", {});
    BOOST_TEST(r.has_value());
    BOOST_TEST(x1->process().running());
}

// A holder once declared dead (frozen past the suspicion timeout) that came back is an
// ordinary member again: a later second process under its name is the one refused.
BOOST_AUTO_TEST_CASE(a_holder_that_came_back_after_being_declared_dead_keeps_its_name) {
    auto a = start_node({.name = "a", .extra_args = fast_detection});
    auto x1 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = fast_detection});
    rpclb::ClusterOptions options;
    options.idle_timeout = 600ms;
    auto client = start_client({a->address()}, options);
    BOOST_REQUIRE(wait_for_connected(*client, {"a@127.0.0.1", "x@127.0.0.1"}));
    BOOST_REQUIRE(x1->process().freeze());
    BOOST_REQUIRE(eventually([&] { return a->log_contains("x@127.0.0.1 did not answer probes"); }, 10s));
    BOOST_REQUIRE(x1->process().signal(SIGCONT));
    BOOST_REQUIRE(eventually([&] { return a->log_count("connected to x@127.0.0.1") >= 2u; }, 10s));
    BOOST_REQUIRE(wait_for_connected(*client, {"a@127.0.0.1", "x@127.0.0.1"}));
    auto x2 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = fast_detection});
    const auto status = x2->process().wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE_MESSAGE(status.has_value(), "the second process still runs");
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    BOOST_TEST(x1->process().running());
    BOOST_TEST(!x1->log_contains("giving up"));
}

// The most natural mistake: the second process is seeded with the first's own address.
BOOST_AUTO_TEST_CASE(a_second_process_seeded_with_the_holder_itself_exits_1) {
    auto x1 = start_node({.name = "x", .extra_args = fast_detection});
    auto x2 = start_node({.name = "x", .seeds = {x1->address()}, .extra_args = fast_detection});
    const auto status = x2->process().wait_exit(Process::Clock::now() + 10s);
    BOOST_REQUIRE(status.has_value());
    BOOST_TEST(WIFEXITED(*status));
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    BOOST_TEST(x2->log_contains("the older process of this name at " + x1->address() + " refused this node's name"));
    BOOST_TEST(x1->log_count("refused x@127.0.0.1 incarnation") == 1u);
    BOOST_TEST(x1->process().running());
}

BOOST_AUTO_TEST_CASE(a_restart_gets_the_name_of_a_holder_that_froze_unseen) {
    // Found dead within 1.5 idle timeouts of the freeze, the name given up after 2: a
    // longer idle timeout than the other cases, for a margin of 1 s on a busy machine.
    const std::vector<std::string> detection{"--idle-timeout", "2000"};
    auto a = start_node({.name = "a", .extra_args = detection});
    auto x1 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = detection});
    rpclb::ClusterOptions options;
    options.idle_timeout = 2000ms;
    auto client = start_client({a->address()}, options);
    BOOST_REQUIRE(wait_for_connected(*client, {"a@127.0.0.1", "x@127.0.0.1"}));
    BOOST_REQUIRE(x1->process().freeze());  // its links stay open: nobody knows it is gone
    auto x2 = start_node({.name = "x", .seeds = {a->address()}, .extra_args = detection});
    rpclb::CallOptions quick;
    quick.timeout = 300ms;
    BOOST_TEST(eventually([&] { return client->call("x@127.0.0.1", "demo", "node", {}, quick).has_value(); }, 10s));
    // It keeps the name: past the 4 s after its first refusal it would have given up at, it
    // still runs.
    BOOST_TEST(!x2->process().wait_exit(Process::Clock::now() + 4s).has_value());
    BOOST_TEST(!x2->log_contains("giving up"));

    // The frozen holder resumes: its incarnation was declared dead, so it does not take the
    // name back from its restart; it is told why and exits 1.
    BOOST_REQUIRE(x1->process().signal(SIGCONT));
    const auto status = x1->process().wait_exit(Process::Clock::now() + 15s);
    BOOST_REQUIRE_MESSAGE(status.has_value(), "the resumed holder still runs");
    BOOST_TEST(WEXITSTATUS(*status) == 1);
    BOOST_TEST(x1->log_contains("declared this node's incarnation"));
    BOOST_TEST(x2->process().running());
    BOOST_TEST(!x2->log_contains("giving up"));
    BOOST_TEST(client->call("x@127.0.0.1", "demo", "node", {}, quick).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
