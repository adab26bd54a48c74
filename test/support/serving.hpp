// A "the cluster keeps serving" check shared by the tests where a stranger (a peer with a
// wrong cookie, the wrong certificate, or no TLS) tries to join: for a while, the members
// of a balancer must not change and every call through it must reach one of them.
#pragma once

#include "support/node.hpp"
#include "support/wait.hpp"
#include <rpclb/error.hpp>

#include <boost/json/array.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace rpclb::test {

/// For `duration`, polling every 50 ms: the members of `balancer` as `client` sees them stay
/// exactly `good` (sorted), `extra` (when given) returns an empty string, and a call to
/// demo.node through `balancer` (2 s timeout) succeeds and answers with one of `good`. A
/// failing poll ends the check at once with a Boost.Test failure naming the problem
/// (`extra`'s non-empty answer is the problem it reports); at least six calls must succeed.
inline void check_keeps_serving(Cluster& client, const std::string& balancer, const std::vector<std::string>& good,
                                std::chrono::milliseconds duration,
                                const std::function<std::string()>& extra = {}) {
    int calls = 0;
    std::string problem;
    const bool held = consistently(
        [&] {
            if (members_of(client, balancer) != good) {
                problem = "the members of " + balancer + " changed";
                return false;
            }
            if (extra) {
                problem = extra();
                if (!problem.empty()) return false;
            }
            CallOptions options;
            options.load_balancer = balancer;
            options.timeout = std::chrono::seconds(2);
            const auto r = client.call("demo", "node", {}, options);
            if (!r) {
                problem = "a call through " + balancer + " failed: " + r.error().message;
                return false;
            }
            if (std::find(good.begin(), good.end(), r->as_string()) == good.end()) {
                problem = "a call through " + balancer + " reached " + std::string(r->as_string());
                return false;
            }
            ++calls;
            return true;
        },
        duration, std::chrono::milliseconds(50));
    BOOST_TEST(held, problem);
    BOOST_TEST(calls > 5);
}

}  // namespace rpclb::test
