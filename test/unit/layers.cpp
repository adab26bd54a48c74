// The parts include downward only: transport < membership < rpc < routing < lifecycle <
// admin < bin, with errors, telemetry and the few plain helpers at the base. Every
// #include of an rpclb header in src/ and include/ is checked against the part of the file
// that includes it; since each include goes down or stays in its part, so does every
// include it brings in transitively. A public header or src/ folder that this table does
// not know fails the check: give it a part.
//
// The includes that still go up are listed in still_upward(): a new one fails the check,
// and so does a listed one that is gone (take it off the list), so the list only shrinks.
#define BOOST_TEST_MODULE layers
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

enum Part { base, transport, membership, rpc, routing, lifecycle, admin, bin };

const char* part_name(Part p) {
    static const char* names[] = {"base",    "transport", "membership", "rpc",
                                  "routing", "lifecycle", "admin",      "bin"};
    return names[p];
}

// Public headers (include/rpclb/...) by the part that owns them.
const std::map<std::string, Part>& public_headers() {
    static const std::map<std::string, Part> table = {
        {"error.hpp", base},
        {"error_fwd.hpp", base},
        {"log.hpp", base},
        {"version.hpp", base},
        {"node_load.hpp", base},
        {"telemetry.hpp", base},
        {"trace.hpp", base},
        {"metrics.hpp", base},
        {"retry.hpp", base},
        {"service.hpp", base},
        {"detail/log.hpp", base},
        {"detail/deadline.hpp", base},
        {"detail/option_problem.hpp", base},
        {"detail/thread_rng.hpp", base},
        {"detail/zero_waiter.hpp", base},
        {"detail/wire.hpp", transport},
        {"detail/handshake.hpp", transport},
        {"detail/host_port.hpp", transport},
        {"detail/discovery_url.hpp", membership},
        {"tls.hpp", transport},
        {"groups.hpp", membership},
        {"member_snapshot.hpp", membership},
        {"handler.hpp", rpc},
        {"node_filter.hpp", routing},
        {"selection_algorithm.hpp", routing},
        {"plugin_abi.h", routing},
        {"detail/plugin_glue.hpp", routing},
        {"algorithm_state.hpp", routing},
        {"reported_load.hpp", routing},
        {"plugin_log.hpp", routing},
        {"algorithm_host.hpp", routing},
        {"plugin_registry.hpp", routing},
        {"detail/plugin_path.hpp", routing},
        {"plugin_pin.hpp", routing},
        {"load_balancer.hpp", routing},
        {"call_options.hpp", routing},
        {"pick_options.hpp", routing},
        {"cluster.hpp", lifecycle},
        {"cluster_async.hpp", lifecycle},
        {"cluster_options.hpp", lifecycle},
        {"balancer_handle.hpp", lifecycle},
        {"typed.hpp", lifecycle},
        {"detail/typed.hpp", base},
        {"stop_signal.hpp", lifecycle},
        {"supervisor.hpp", lifecycle},
        {"config.hpp", lifecycle},
        {"admin_options.hpp", lifecycle},
        {"detail/options_check.hpp", lifecycle},
        {"admin.hpp", admin},
    };
    return table;
}

// src/<folder>/... by folder; files directly in src/ are the base's.
const std::map<std::string, Part>& source_folders() {
    static const std::map<std::string, Part> table = {
        {"telemetry", base},   {"transport", transport}, {"membership", membership},
        {"rpc", rpc},          {"routing", routing},     {"lifecycle", lifecycle},
        {"admin", admin},      {"bin", bin},
    };
    return table;
}

fs::path source_dir() {
    const char* dir = std::getenv("RPCLB_SOURCE_DIR");
    BOOST_TEST_REQUIRE(dir != nullptr, "RPCLB_SOURCE_DIR (the checkout) is not set: run through ctest");
    return dir;
}

// The part of a file given by its path relative to the checkout, or nullopt when the
// table does not know it.
std::optional<Part> part_of(const std::string& relative) {
    if (relative.rfind("include/rpclb/", 0) == 0) {
        const auto it = public_headers().find(relative.substr(14));
        if (it == public_headers().end()) return std::nullopt;
        return it->second;
    }
    if (relative.rfind("src/", 0) == 0) {
        const auto rest = relative.substr(4);
        const auto slash = rest.find('/');
        if (slash == std::string::npos) return base;
        const auto it = source_folders().find(rest.substr(0, slash));
        if (it == source_folders().end()) return std::nullopt;
        return it->second;
    }
    return std::nullopt;
}

// The includes allowed to go up, as "from -> to": none. A part that needs something of a
// higher one gets its own type or an interface that the higher part implements instead
// (MeshOptions, RpcOptions, RouterOptions, ServedBalancers, ClusterLink,
// BalancerSupervisor).
const std::vector<std::string>& still_upward() {
    static const std::vector<std::string> list = {};
    return list;
}

struct Include {
    std::string from;  // relative path of the including file
    std::string to;    // relative path of the included rpclb file
    int line;
};

// Every include of an rpclb file (<rpclb/...> or a quoted path under src/) in src/ and
// include/.
std::vector<Include> rpclb_includes(const fs::path& root) {
    static const std::regex directive(R"(^\s*#\s*include\s*[<"]([^>"]+)[>"])");
    std::vector<Include> found;
    for (const char* top : {"src", "include"}) {
        for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
            const auto ext = entry.path().extension();
            if (!entry.is_regular_file() || (ext != ".hpp" && ext != ".cpp")) continue;
            const auto from = fs::relative(entry.path(), root).generic_string();
            std::ifstream in(entry.path());
            std::string text;
            for (int line = 1; std::getline(in, text); ++line) {
                std::smatch m;
                if (!std::regex_search(text, m, directive)) continue;
                const std::string name = m[1];
                if (name.rfind("rpclb/", 0) == 0)
                    found.push_back({from, "include/" + name, line});
                else if (fs::exists(root / "src" / name))
                    found.push_back({from, "src/" + name, line});
            }
        }
    }
    return found;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layers)

BOOST_AUTO_TEST_CASE(every_include_goes_down_or_stays_in_its_part) {
    const auto root = source_dir();
    const auto includes = rpclb_includes(root);
    BOOST_TEST_REQUIRE(includes.size() > 100u, "found only " << includes.size() << " includes under " << root);
    std::set<std::string> upward_seen;
    for (const auto& i : includes) {
        const auto from = part_of(i.from);
        const auto to = part_of(i.to);
        BOOST_TEST(from.has_value(), i.from << " belongs to no part: add it to test/unit/layers.cpp");
        BOOST_TEST(to.has_value(), i.to << " belongs to no part: add it to test/unit/layers.cpp");
        if (!from || !to || *to <= *from) continue;
        const auto edge = i.from + " -> " + i.to;
        const auto& known = still_upward();
        if (std::find(known.begin(), known.end(), edge) != known.end()) {
            upward_seen.insert(edge);
            continue;
        }
        BOOST_ERROR(i.from << ":" << i.line << " (" << part_name(*from) << ") includes " << i.to << " ("
                           << part_name(*to) << "), a higher part");
    }
    for (const auto& edge : still_upward())
        BOOST_TEST(upward_seen.count(edge) == 1u, edge << " no longer goes up: take it off still_upward()");
}

BOOST_AUTO_TEST_CASE(the_check_sees_an_upward_include) {
    // The table and the comparison themselves: a transport file including cluster.hpp is
    // refused, a lifecycle file including a transport header is not.
    BOOST_TEST(*part_of("include/rpclb/cluster.hpp") > *part_of("src/transport/connection.cpp"));
    BOOST_TEST(*part_of("include/rpclb/detail/wire.hpp") < *part_of("src/lifecycle/cluster.cpp"));
    BOOST_TEST(*part_of("src/error.cpp") == base);
    BOOST_TEST(!part_of("include/rpclb/not_a_header.hpp").has_value());
}

BOOST_AUTO_TEST_SUITE_END()
