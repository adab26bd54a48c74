// A big message on a slow link: a 16 MiB call crosses a link limited to 10 Mbit/s (about
// 14 s of transfer) and completes, and no keep-alive trips on the way: the nodes keep each
// other in every group the whole time and neither loses the other.
#define BOOST_TEST_MODULE slow_link
#include "faults/lab_mesh.hpp"

#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

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
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(slow_link, TwoNodes)

BOOST_AUTO_TEST_CASE(sixteen_mib_call_over_10_mbit_completes_without_tripping_keepalive) {
    lab.limit_rate(1, "10mbit");
    // The largest string argument that keeps the request frame within the default 16 MiB
    // max_message_size (the frame's JSON around it takes well under 4 KiB).
    const std::size_t bytes = 16 * 1024 * 1024 - 4096;
    auto call = spawn_in(0, "rpclb-fault-client",
                         {"big", "--seed", lab.address(0) + ":7000", "--node", nodes[1]->name(), "--bytes",
                          std::to_string(bytes), "--timeout", "120000", "--expect-nodes", "2", "--plugins",
                          plugin_dir().string(), "--name", "big@" + lab.address(0)},
                         "big-call");
    // While it travels, every view stays whole.
    bool always_whole = true;
    const bool finished = eventually(
        [&] {
            if (!converged()) always_whole = false;
            return !call->running();
        },
        90s, 200ms);
    BOOST_REQUIRE(finished);
    BOOST_TEST(always_whole);
    const auto line = call->wait_for_line("{", Clock::now() + 1s);
    BOOST_REQUIRE_MESSAGE(line, "the big call printed nothing: " << call->stderr_text());
    const auto result = boost::json::parse(*line).as_object();
    std::cout << "faults: 16 MiB call over 10 Mbit/s: " << *line << std::endl;
    BOOST_TEST(result.at("ok").as_bool(), *line);
    BOOST_TEST((result.contains("node") && result.at("node").as_string() == nodes[1]->name()));
    // It really was slow: at 10 Mbit/s, 16 MiB needs over 13 s.
    BOOST_TEST(result.at("ms").to_number<std::int64_t>() > 12000);
    // Neither node lost the other (the client leaving after its call is the only loss).
    for (auto& n : nodes)
        for (auto& other : nodes)
            BOOST_TEST(n->log().find("lost " + other->name()) == std::string::npos,
                       n->name() << " lost " << other->name() << " during the transfer");
}

BOOST_AUTO_TEST_SUITE_END()
