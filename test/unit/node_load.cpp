// NodeLoads (the process's load records by node) and the header-only helpers algorithms
// read them with (reported_load.hpp): sharing, staleness, forgetting, the weight.
#define BOOST_TEST_MODULE node_load
#include <boost/test/unit_test.hpp>

#include <rpclb/member_snapshot.hpp>
#include <rpclb/node_load.hpp>
#include <rpclb/reported_load.hpp>

#include <string>

BOOST_AUTO_TEST_SUITE(node_load)

BOOST_AUTO_TEST_CASE(records_are_shared_by_name_and_freed_with_their_last_holder) {
    auto& loads = rpclb::NodeLoads::instance();
    const auto before = loads.entries();
    auto a = loads.of("nl_a@h");
    BOOST_TEST((loads.of("nl_a@h") == a));
    a->store(500, 2, 0.0, 1000);
    BOOST_TEST(loads.entries() == before + 1);
    a.reset();
    BOOST_TEST(loads.entries() == before);
    BOOST_TEST(!loads.of("nl_a@h")->read(1000, 10).has_value());  // a new record: no report
}

BOOST_AUTO_TEST_CASE(a_report_counts_until_it_is_older_than_the_max_age_or_forgotten) {
    rpclb::NodeLoad load;
    BOOST_TEST(!load.read(5000, 1000).has_value());
    load.store(250, 3, 0.0, 5000);
    const auto report = load.read(6000, 1000);  // exactly max_age old: still fresh
    BOOST_TEST_REQUIRE(report.has_value());
    BOOST_TEST(report->busy == 0.25);
    BOOST_TEST(report->queue == 3u);
    BOOST_TEST(report->utilization() == 3.25);
    BOOST_TEST(!load.read(6001, 1000).has_value());
    load.store(250, 0, 0.6, 7000);
    BOOST_TEST(load.read(7000, 1000)->utilization() == 0.6);  // the application's number wins
    load.forget();
    BOOST_TEST(!load.read(7000, 1000).has_value());
}

BOOST_AUTO_TEST_CASE(reported_load_reads_a_snapshots_members_by_index) {
    const rpclb::MemberSnapshot members{{"nl_x@h", "nl_y@h"}, 1};
    auto y = rpclb::NodeLoads::instance().of("nl_y@h");
    y->store(1000, 0, 0.0, 100);
    BOOST_TEST(!rpclb::reported_load(members, 0, 100).has_value());
    BOOST_TEST_REQUIRE(rpclb::reported_load(members, 1, 100).has_value());
    BOOST_TEST(rpclb::reported_load(members, 1, 100)->busy == 1.0);
    BOOST_TEST(!rpclb::reported_load(members, 2, 100).has_value());  // out of range
    // The snapshot holds the records: a later report shows through the same table.
    y->store(0, 0, 0.0, 200);
    BOOST_TEST(rpclb::reported_load(members, 1, 200)->busy == 0.0);
    BOOST_TEST(!rpclb::reported_load(members, 1, 200 + rpclb::default_load_max_age_ms + 1).has_value());
}

BOOST_AUTO_TEST_CASE(load_weight_is_one_over_utilization_held_at_a_floor) {
    BOOST_TEST(rpclb::load_weight({.busy = 0.5}) == 2.0);
    BOOST_TEST(rpclb::load_weight({.busy = 1.0, .queue = 1}) == 0.5);
    BOOST_TEST(rpclb::load_weight({.busy = 0.0}) == 100.0);  // idle: the floor, not infinity
    BOOST_TEST(rpclb::load_weight({.busy = 0.5}, 0.5, 1.0) == 1.0);  // an error rate adds
    BOOST_TEST(rpclb::load_weight({.busy = 0.9, .application = 0.25}) == 4.0);
}

BOOST_AUTO_TEST_SUITE_END()
