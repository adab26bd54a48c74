// `rpclb-call --traceparent` and rpclb-node's demo.trace across real processes: the
// trace rpclb-call sets reaches node a's handler, and, through a call a's handler makes,
// node b's; a malformed traceparent starts a new trace.
#define BOOST_TEST_MODULE integration_trace_context
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"

#include <boost/json/parse.hpp>

#include <string>
#include <vector>

using namespace rpclb::test;
using namespace std::chrono;
namespace json = boost::json;

namespace {

const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
const std::string parent_id = "00f067aa0ba902b7";

// Nodes a and b (b seeded with a), connected to each other: a's demo.trace reaches b.
struct Pair : Harness {
    Pair() {
        a = start_node({.name = "a"});
        b = start_node({.name = "b", .seeds = {a->address()}});
        auto client = start_client({a->address()});
        BOOST_REQUIRE(eventually([&] {
            return client->call(a->name(), "demo", "trace", {json::value(b->name())}).has_value();
        }, 10s));
        client->stop();
    }

    // Runs rpclb-call against a with `extra` flags and JSON-ARGS `args`; returns its
    // stdout's JSON object (and its stderr in `err`).
    json::object call(std::vector<std::string> extra, const std::string& args, std::string* err = nullptr) {
        std::vector<std::string> argv{"--seed", a->address(), "--node", a->name()};
        argv.insert(argv.end(), extra.begin(), extra.end());
        argv.insert(argv.end(), {"demo", "trace", args});
        Process p(bin_dir() / "rpclb-call", argv, {{"RPCLB_COOKIE", test_cookie}}, dir() / ("call" + std::to_string(++calls) + ".log"));
        const auto line = p.wait_for_line("{", Process::Clock::now() + 20s);
        const auto status = p.wait_exit(Process::Clock::now() + 20s);
        BOOST_REQUIRE_MESSAGE(line, "rpclb-call printed no result; stderr:\n" + p.stderr_text());
        BOOST_REQUIRE(status.has_value());
        BOOST_TEST(WEXITSTATUS(*status) == 0, describe_status(*status));
        if (err) *err = p.stderr_text();
        return json::parse(*line).as_object();
    }

    std::unique_ptr<Node> a, b;
    int calls = 0;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(traceparent_reaches_the_handler_and_the_node_it_calls, Pair) {
    const auto tp = "00-" + trace_id + "-" + parent_id + "-01";
    // a's handler: the given trace, sampled, a span of its own under rpclb-call's attempt.
    auto direct = call({"--traceparent", tp}, "[]").at("result").as_object();
    BOOST_TEST(direct.at("trace_id").as_string() == trace_id);
    BOOST_TEST(direct.at("sampled").as_bool());
    BOOST_TEST(direct.at("span_id").as_string().size() == 16u);
    BOOST_TEST(direct.at("span_id").as_string() != parent_id);
    BOOST_TEST(direct.at("parent_span_id").is_string());
    BOOST_TEST(direct.at("parent_span_id").as_string() != parent_id);  // the attempt's, under the call's
    // b's handler, called from a's: the same trace, a parent and a span of its own.
    auto nested = call({"--traceparent", tp}, "[\"" + b->name() + "\"]").at("result").as_object();
    BOOST_TEST(nested.at("trace_id").as_string() == trace_id);
    BOOST_TEST(nested.at("sampled").as_bool());
    BOOST_TEST(nested.at("parent_span_id").is_string());
    BOOST_TEST(nested.at("parent_span_id").as_string() != parent_id);
    BOOST_TEST(nested.at("span_id").as_string() != direct.at("span_id").as_string());
    // The sampled flag travels as given.
    auto unsampled = call({"--traceparent", "00-" + trace_id + "-" + parent_id + "-00"}, "[\"" + b->name() + "\"]");
    BOOST_TEST(!unsampled.at("result").at("sampled").as_bool());
    BOOST_TEST(unsampled.at("result").at("trace_id").as_string() == trace_id);
}

BOOST_FIXTURE_TEST_CASE(malformed_traceparent_starts_a_new_trace, Pair) {
    std::string err;
    auto r = call({"--traceparent", "00-" + trace_id + "-" + parent_id}, "[\"" + b->name() + "\"]", &err);
    BOOST_TEST(err.find("is not a valid traceparent; each call starts a new trace") != std::string::npos, err);
    const auto& nested = r.at("result").as_object();
    BOOST_TEST(nested.at("trace_id").as_string() != trace_id);
    BOOST_TEST(nested.at("trace_id").as_string().size() == 32u);
    // Without --traceparent each call starts its own trace too.
    auto first = call({}, "[]").at("result").at("trace_id").as_string();
    auto second = call({}, "[]").at("result").at("trace_id").as_string();
    BOOST_TEST(first != second);
    // A tracestate with nothing to carry it, or too long, is a command-line error.
    for (const auto& [flags, message] :
         {std::pair{std::vector<std::string>{"--tracestate", "k=v"}, "--tracestate needs --traceparent"},
          std::pair{std::vector<std::string>{"--traceparent", "00-" + trace_id + "-" + parent_id + "-01", "--tracestate",
                                             std::string(513, 'k')},
                    "--tracestate must be at most 512 bytes; got 513"}}) {
        std::vector<std::string> argv{"--seed", a->address(), "--node", a->name()};
        argv.insert(argv.end(), flags.begin(), flags.end());
        argv.insert(argv.end(), {"demo", "trace", "[]"});
        Process p(bin_dir() / "rpclb-call", argv, {{"RPCLB_COOKIE", test_cookie}},
                  dir() / ("bad-tracestate" + std::to_string(++calls) + ".log"));
        const auto status = p.wait_exit(Process::Clock::now() + 20s);
        BOOST_REQUIRE(status.has_value());
        BOOST_TEST(WEXITSTATUS(*status) == 2, describe_status(*status));
        BOOST_TEST(p.stderr_text().find(message) != std::string::npos, p.stderr_text());
    }
}
