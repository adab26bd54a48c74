// A third-party plugin, end to end: install rpclb from this CMake build into a temporary
// prefix, build examples/third_party_plugin against the installed package (as an outside
// project would, with find_package(rpclb)), then route calls through a balancer whose
// algorithm is that plugin.
//
// Needs the CMake build this test belongs to; its CMakeCache.txt names the source tree,
// the cmake and build tool and the compiler. CTest names that build in
// $RPCLB_CMAKE_BUILD_DIR, and then the test runs and fails if the build is unusable. Without
// that variable (a b2 build, which has no CMake package to install) it looks next to
// $RPCLB_BIN_DIR or the executable, and is reported skipped, with the reason, when it finds
// no CMake build there: on stderr, and in Boost.Test's log and short report
// (--log_level=test_suite, --report_level=short).
#define BOOST_TEST_MODULE third_party_plugin
#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/plugin_registry.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

#include "support/wait.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using rpclb::test::eventually;

namespace {

// What the test needs to know about the CMake build it is part of.
struct CMakeBuild {
    fs::path build_dir;
    fs::path source_dir;
    std::string cmake;           // CMAKE_COMMAND
    std::string generator;       // CMAKE_GENERATOR (Ninja in this project's scripts)
    std::string make_program;    // CMAKE_MAKE_PROGRAM
    std::string cxx_compiler;    // CMAKE_CXX_COMPILER: the plugin must use the same one
    std::string build_type;      // CMAKE_BUILD_TYPE
};

// $RPCLB_CMAKE_BUILD_DIR when set (by CTest), else empty.
fs::path declared_build_dir() {
    const char* dir = std::getenv("RPCLB_CMAKE_BUILD_DIR");
    return dir && *dir ? fs::path(dir) : fs::path();
}

// The build directory: $RPCLB_CMAKE_BUILD_DIR, else the parent of $RPCLB_BIN_DIR, else of
// the directory holding this executable (<build>/test/<exe>), so the test also runs by hand.
fs::path build_dir_guess() {
    if (auto declared = declared_build_dir(); !declared.empty()) return declared;
    if (const char* bin = std::getenv("RPCLB_BIN_DIR"); bin && *bin) return fs::path(bin).parent_path();
    std::error_code ec;
    const auto exe = fs::canonical("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path().parent_path();
}

// Reads `KEY:TYPE=VALUE` lines of a CMakeCache.txt.
std::map<std::string, std::string> read_cache(const fs::path& file) {
    std::map<std::string, std::string> entries;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#' || line[0] == '/') continue;
        const auto colon = line.find(':');
        const auto equals = line.find('=');
        if (colon == std::string::npos || equals == std::string::npos || colon > equals) continue;
        entries[line.substr(0, colon)] = line.substr(equals + 1);
    }
    return entries;
}

// The CMake build, or why there is none to use.
std::optional<CMakeBuild> find_cmake_build(std::string& why_not) {
    const auto dir = build_dir_guess();
    const auto cache_file = dir / "CMakeCache.txt";
    if (dir.empty() || !fs::is_regular_file(cache_file)) {
        why_not = "no CMake build found (looked for " + cache_file.string() +
                  "): this test needs the CMake build (cmake --install and find_package)";
        return std::nullopt;
    }
    auto cache = read_cache(cache_file);
    CMakeBuild build{dir,
                     cache["CMAKE_HOME_DIRECTORY"],
                     cache["CMAKE_COMMAND"],
                     cache["CMAKE_GENERATOR"],
                     cache["CMAKE_MAKE_PROGRAM"],
                     cache["CMAKE_CXX_COMPILER"],
                     cache["CMAKE_BUILD_TYPE"]};
    if (build.source_dir.empty() || !fs::is_directory(build.source_dir / "examples" / "third_party_plugin")) {
        why_not = "the source tree named by " + cache_file.string() + " (CMAKE_HOME_DIRECTORY=" +
                  build.source_dir.string() + ") has no examples/third_party_plugin";
        return std::nullopt;
    }
    if (build.cmake.empty() || !fs::exists(build.cmake)) {
        why_not = "cmake (" + build.cmake + ") from " + cache_file.string() + " not found";
        return std::nullopt;
    }
    return build;
}

// Precondition of the test case: a usable CMake build, or no CMake build declared (then
// the case is skipped, and the reason printed). A declared build that is unusable lets the
// case run, to fail on it.
boost::test_tools::assertion_result cmake_build_or_skip(boost::unit_test::test_unit_id) {
    std::string why_not;
    if (find_cmake_build(why_not) || !declared_build_dir().empty()) return true;
    std::cerr << "third_party_plugin: SKIPPED: " << why_not << '\n';
    boost::test_tools::assertion_result skip(false);
    skip.message() << why_not;
    return skip;
}

// A scratch directory, kept with its logs unless remove_on_exit() was called.
class ScratchDir {
public:
    ScratchDir() {
        std::string pattern = (fs::temp_directory_path() / "rpclb-third-party-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        path_ = pattern;
    }
    ~ScratchDir() {
        if (!remove_) {
            std::cerr << "third_party_plugin: kept " << path_ << " for inspection\n";
            return;
        }
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    const fs::path& path() const { return path_; }
    void remove_on_exit() { remove_ = true; }

private:
    fs::path path_;
    bool remove_ = false;
};

std::string tail_of(const fs::path& file, std::size_t max_chars = 3000) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    auto text = out.str();
    return text.size() > max_chars ? "..." + text.substr(text.size() - max_chars) : text;
}

// Runs `argv` (looked up on PATH) with stdout and stderr appended to `log`; kills it
// after `limit`. Returns an empty string on exit status 0, else what went wrong followed
// by the log's tail.
std::string run(const std::vector<std::string>& argv, const fs::path& log, std::chrono::seconds limit) {
    {
        std::ofstream header(log, std::ios::app);
        header << "$";
        for (const auto& a : argv) header << ' ' << a;
        header << '\n';
    }
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    const auto log_name = log.string();
    posix_spawn_file_actions_addopen(&actions, 1, log_name.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    // The in-process nodes of other tests may have blocked signals in this thread.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t empty;
    sigemptyset(&empty);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    pid_t pid = 0;
    const int rc = ::posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return "cannot start " + argv[0] + ": " + std::generic_category().message(rc);

    int status = 0;
    bool wait_failed = false;
    const bool ended = eventually([&] {
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        wait_failed = done < 0 && errno != EINTR;
        return done == pid || wait_failed;
    }, limit, 50ms);
    if (wait_failed) return "waitpid failed for " + argv[0];
    if (!ended) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        return "killed after " + std::to_string(limit.count()) + " s; log " + log.string() + ":\n" +
               tail_of(log);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
    const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                              : "killed by signal " + std::to_string(WTERMSIG(status));
    return how + "; log " + log.string() + ":\n" + tail_of(log);
}

rpclb::ClusterOptions node_options(std::string name, const fs::path& plugin_dir) {
    rpclb::ClusterOptions o;
    o.name = std::move(name);
    o.cookie = "third-party-plugin-cookie";
    o.reconnect_interval = 100ms;
    o.plugin_path = {plugin_dir};
    return o;
}

rpclb::LoadBalancerOptions first_member_balancer(std::string name, boost::json::object options = {}) {
    rpclb::LoadBalancerOptions o;
    o.name = std::move(name);
    o.algorithm = "first_member";
    o.algorithm_opts = std::move(options);
    return o;
}

// Distinct files mapped into this process whose name starts with "librpclb.so".
std::set<std::string> mapped_librpclb() {
    std::set<std::string> files;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        const auto slash = line.find('/');
        if (slash == std::string::npos) continue;
        const fs::path file = line.substr(slash);
        if (file.filename().string().rfind("librpclb.so", 0) == 0) files.insert(file.string());
    }
    return files;
}

std::string address(const rpclb::Cluster& c) { return "127.0.0.1:" + std::to_string(c.listen_endpoint()->port()); }

// clang++-14 on PATH, or empty.
std::string find_clang14() {
    const char* path = std::getenv("PATH");
    std::string_view rest = path ? path : "";
    while (!rest.empty()) {
        const auto colon = rest.find(':');
        const fs::path candidate = fs::path(rest.substr(0, colon)) / "clang++-14";
        if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
        if (colon == std::string_view::npos) break;
        rest.remove_prefix(colon + 1);
    }
    return {};
}

boost::test_tools::assertion_result clang14_or_skip(boost::unit_test::test_unit_id id) {
    if (find_clang14().empty()) {
        const char* why = "clang++-14 not found on PATH (scripts/install-clang.sh installs it)";
        std::cerr << "third_party_plugin: SKIPPED: " << why << '\n';
        boost::test_tools::assertion_result skip(false);
        skip.message() << why;
        return skip;
    }
    return cmake_build_or_skip(id);
}

// Installs this build, builds examples/third_party_plugin against the installed package
// with `compiler` (empty: the build's own), and routes calls through it.
void plugin_routes_calls(const std::string& compiler) {
    std::string why_not;
    const auto build = find_cmake_build(why_not);
    BOOST_TEST_REQUIRE(build.has_value(), "RPCLB_CMAKE_BUILD_DIR=" << declared_build_dir() << ": " << why_not);
    ScratchDir scratch;
    const auto prefix = scratch.path() / "prefix";
    const auto plugin_build = scratch.path() / "plugin-build";
    const auto log = scratch.path() / "build.log";

    // 1. Install this build, as a user would before building a plugin.
    auto failure = run({build->cmake, "--install", build->build_dir.string(), "--prefix", prefix.string()},
                       log, 60s);
    BOOST_TEST_REQUIRE(failure.empty(),
                       "cmake --install (every installed target must be built first, e.g. plain "
                       "`ninja`): " << failure);

    // 2. Configure and build the example outside the tree, finding rpclb only through the
    //    installed package, with no warning from CMake or the compiler.
    std::vector<std::string> configure{build->cmake,
                                       "-S", (build->source_dir / "examples" / "third_party_plugin").string(),
                                       "-B", plugin_build.string(),
                                       "-G", build->generator.empty() ? "Ninja" : build->generator,
                                       "-DCMAKE_PREFIX_PATH=" + prefix.string(),
                                       "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"};
    if (!build->make_program.empty()) configure.push_back("-DCMAKE_MAKE_PROGRAM=" + build->make_program);
    const std::string cxx = compiler.empty() ? build->cxx_compiler : compiler;
    if (!cxx.empty()) configure.push_back("-DCMAKE_CXX_COMPILER=" + cxx);
    if (!build->build_type.empty()) configure.push_back("-DCMAKE_BUILD_TYPE=" + build->build_type);
    failure = run(configure, log, 60s);
    BOOST_TEST_REQUIRE(failure.empty(), "configuring examples/third_party_plugin: " << failure);
    failure = run({build->cmake, "--build", plugin_build.string()}, log, 150s);
    BOOST_TEST_REQUIRE(failure.empty(), "building examples/third_party_plugin: " << failure);
    const auto built_log = tail_of(log, 1'000'000);
    BOOST_TEST(built_log.find("CMake Warning") == std::string::npos, built_log);
    BOOST_TEST(built_log.find("warning:") == std::string::npos, built_log);
    auto plugin_cache = read_cache(plugin_build / "CMakeCache.txt");
    if (!compiler.empty()) BOOST_TEST(plugin_cache["CMAKE_CXX_COMPILER"] == compiler);
    const auto package = plugin_cache["rpclb_DIR"];
    BOOST_TEST(package.rfind(prefix.string(), 0) == 0u,
               "find_package(rpclb) used " << package << ", not the package installed in " << prefix);
    const auto plugin_file = plugin_build / "librpclb_first_member.so";
    BOOST_TEST_REQUIRE(fs::is_regular_file(plugin_file), plugin_file << " was not built");

    // 3. Two in-process nodes. Members are sorted by name, so "a" is the first member and
    //    first_member must send every call from "z" to "a": the rule is observable, and a
    //    local or random pick would show.
    {
        rpclb::Cluster a(node_options("a@127.0.0.1", plugin_build));
        a.start();
        auto z_options = node_options("z@127.0.0.1", plugin_build);
        z_options.seeds = {address(a)};
        rpclb::Cluster z(z_options);
        z.start();
        for (auto* node : {&a, &z}) {
            node->register_function("tp", "whoami", [node](const boost::json::array&) -> rpclb::CallResult {
                return boost::json::value(node->name());
            });
        }

        // The loader takes the out-of-tree build, not something on RPCLB_PLUGIN_PATH.
        const auto found = z.plugins().find("first_member");
        BOOST_TEST_REQUIRE(found.has_value(), (found ? "" : found.error().message));
        BOOST_TEST(fs::equivalent(*found, plugin_file));

        const auto on_a = a.start_balancer(first_member_balancer("tp"));
        const auto on_z = z.start_balancer(first_member_balancer("tp"));
        // The plugin links the installed librpclb.so.0; the dynamic linker must bind it to
        // the librpclb already in the process (same soname), not map the installed copy.
        BOOST_TEST(mapped_librpclb().size() == 1u);
        const std::vector<std::string> both{"a@127.0.0.1", "z@127.0.0.1"};
        // Wait on the balancers' own snapshots (what their picks see): they are updated
        // just after the groups, which Cluster::get_members reads.
        BOOST_TEST_REQUIRE(eventually([&] { return on_a->members()->nodes == both && on_z->members()->nodes == both; },
                                      10s));

        rpclb::CallOptions through;
        through.load_balancer = "tp";
        std::vector<std::string> answered, routed;
        for (int i = 0; i < 10; ++i) {
            std::string peer;
            through.peer = &peer;
            const auto result = z.call("tp", "whoami", {}, through);
            BOOST_TEST_REQUIRE(result.has_value(), (result ? "" : result.error().message));
            answered.emplace_back(result->as_string());
            routed.push_back(peer);
        }
        through.peer = nullptr;
        const std::vector<std::string> all_a(10, "a@127.0.0.1");
        BOOST_TEST(answered == all_a, boost::test_tools::per_element());
        BOOST_TEST(routed == all_a, boost::test_tools::per_element());
        BOOST_TEST(*z.select_node("tp") == "a@127.0.0.1");
        BOOST_TEST(*a.select_node("tp") == "a@127.0.0.1");
        BOOST_TEST(*on_z->select_nodes(5) == both, boost::test_tools::per_element());

        // The rule follows membership: once "a" leaves, "z" is the first member.
        BOOST_TEST_REQUIRE(a.stop_balancer("tp"));
        BOOST_TEST_REQUIRE(eventually([&] { return on_z->members()->nodes.size() == 1; }, 10s));
        const auto after = z.call("tp", "whoami", {}, through);
        BOOST_TEST_REQUIRE(after.has_value(), (after ? "" : after.error().message));
        BOOST_TEST(after->as_string() == "z@127.0.0.1");

        // init's std::invalid_argument fails start_balancer with the plugin's message.
        bool refused = false;
        try {
            z.start_balancer(first_member_balancer("tp2", {{"bogus", 1}}));
        } catch (const std::runtime_error& e) {
            refused = true;
            const std::string what = e.what();
            BOOST_TEST(what.find("tp2") != std::string::npos, what);
            BOOST_TEST(what.find("first_member: unknown option \"bogus\" (takes no options)") != std::string::npos, what);
        }
        BOOST_TEST(refused);
        BOOST_TEST(z.balancer_names() == std::vector<std::string>{"tp"}, boost::test_tools::per_element());

        z.stop();
        a.stop();
    }

    // Clean up only after a clean run; otherwise the logs stay for the reader.
    const auto id = boost::unit_test::framework::current_test_case().p_id;
    if (boost::unit_test::results_collector.results(id).p_assertions_failed == 0u) scratch.remove_on_exit();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(third_party_plugin)

BOOST_AUTO_TEST_CASE(plugin_built_against_installed_package_routes_calls,
                     *boost::unit_test::precondition(cmake_build_or_skip)) {
    plugin_routes_calls({});
}

// Only C data crosses the plugin boundary: a plugin built by clang++-14 (libstdc++) loads
// into this build (g++ in CI) and serves.
BOOST_AUTO_TEST_CASE(plugin_built_with_clang14_loads_into_this_build_and_routes_calls,
                     *boost::unit_test::precondition(clang14_or_skip)) {
    plugin_routes_calls(find_clang14());
}

BOOST_AUTO_TEST_SUITE_END()
