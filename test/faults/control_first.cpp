// Control traffic first: a link limited to 10 Mbit/s carries several large calls at once,
// and the probes of that link, their answers and the membership frames still cross it in
// about the link's round trip. Every call completes, neither end drops the link, and the
// probe round trip stays under 100 ms plus the round trip TCP measures on the same link
// at the same time (the bottleneck's queue is part of the link).
//
// Each case prints one line: "faults: control-first <case>: {...}" with the client's
// figures and TCP's, for bench/README.md.
#define BOOST_TEST_MODULE control_first
#include "faults/lab_mesh.hpp"

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>

using namespace std::chrono_literals;
using namespace rpclb::test;
using namespace rpclb::test::faults;

namespace {

struct TwoNodes : LabMesh {
    TwoNodes() : LabMesh(2) {
        if (!eventually([&] { return converged(); }, 15s))
            throw std::runtime_error("the two lab nodes did not form a mesh within 15 s");
    }

    /// Runs `count` calls of `bytes` from a client in node 0's namespace to node 1, over a
    /// link limited to 10 Mbit/s, `concurrency` at a time; returns the client's JSON
    /// summary with TCP's round trips added ("tcp_rtt_ms": {"median", "max"}).
    boost::json::object run(int count, std::size_t bytes, int concurrency) {
        lab.limit_rate(1, "10mbit");
        auto client = spawn_in(0, "rpclb-fault-client",
                               {"bigs", "--seed", lab.address(0) + ":7000", "--node", nodes[1]->name(), "--bytes",
                                std::to_string(bytes), "--count", std::to_string(count), "--concurrency",
                                std::to_string(concurrency), "--timeout", "180000", "--expect-nodes", "2",
                                "--plugins", plugin_dir().string(), "--name", "big@" + lab.address(0)},
                               "bigs");
        const auto ss = rpclb::test::faults::detail::system_tool("ss");
        std::vector<double> tcp;
        const bool finished = eventually(
            [&] {
                // rtt:<srtt>/<rttvar> of the client's connection to node 1.
                const auto r = run_command(lab.ip_tool(),
                                           lab.exec_args(0, ss, {"-tin", "dst", lab.address(1) + ":7000"}),
                                           dir() / "ss.log", 5s);
                for (auto at = r.out.find(" rtt:"); at != std::string::npos; at = r.out.find(" rtt:", at + 1))
                    tcp.push_back(std::strtod(r.out.c_str() + at + 5, nullptr));
                return !client->running();
            },
            240s, 200ms);
        BOOST_REQUIRE_MESSAGE(finished, "the calls did not end within 240 s");
        const auto line = client->wait_for_line("{", Clock::now() + 1s);
        BOOST_REQUIRE_MESSAGE(line, "the client printed nothing: " << client->stderr_text());
        auto result = boost::json::parse(*line).as_object();
        std::sort(tcp.begin(), tcp.end());
        boost::json::object t;
        t["samples"] = tcp.size();
        t["median"] = tcp.empty() ? -1.0 : tcp[tcp.size() / 2];
        t["max"] = tcp.empty() ? -1.0 : tcp.back();
        result["tcp_rtt_ms"] = std::move(t);
        return result;
    }

    void check(const boost::json::object& result, const std::string& what) {
        std::cout << "faults: control-first " << what << ": " << boost::json::serialize(result) << std::endl;
        BOOST_TEST(result.at("ok").to_number<int>() == result.at("calls").to_number<int>(),
                   "calls that failed: " << boost::json::serialize(result.at("errors")));
        BOOST_TEST(!result.at("link_lost").as_bool());
        const auto& rtt = result.at("rtt_ms").as_object();
        const double tcp_max = result.at("tcp_rtt_ms").as_object().at("max").to_number<double>();
        BOOST_TEST(rtt.at("samples").to_number<int>() > 0, "no probe was answered during the calls");
        BOOST_TEST(rtt.at("max").to_number<double>() < 100.0 + tcp_max,
                   "probe round trip " << rtt.at("max").to_number<double>() << " ms, TCP's " << tcp_max << " ms");
    }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(control_first, TwoNodes)

BOOST_AUTO_TEST_CASE(six_concurrent_8_mib_calls_over_10_mbit_all_complete_and_the_link_stays) {
    check(run(6, 8u << 20, 6), "6 x 8 MiB at once");
}

BOOST_AUTO_TEST_CASE(eight_2_mib_calls_four_at_a_time_over_10_mbit_all_complete_and_the_link_stays) {
    check(run(8, 2u << 20, 4), "8 x 2 MiB, 4 at a time");
}

BOOST_AUTO_TEST_SUITE_END()
