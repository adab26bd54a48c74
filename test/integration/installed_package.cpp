// The installed package as an application author gets it: this CMake build installed with
// `cmake --install --prefix` into a temporary prefix (not the configured one) and then
// moved, so nothing may depend on either path. The installed rpclb-node, given no plugin
// path, must find the installed plugins beside its librpclb and exit 1 when a balancer's
// plugin is not there; find_package(rpclb) must point rpclb_PLUGIN_DIR at the moved
// plugins.
//
// Needs the CMake build it belongs to (CTest names it in $RPCLB_CMAKE_BUILD_DIR; every
// installed target must be built). Without that variable (a b2 build) it looks next to the
// executable, and is reported skipped, with the reason, when it finds no CMake build.
// Everything it installs is under one temporary directory, removed at the end.
#define BOOST_TEST_MODULE installed_package
#include "support/node.hpp"

#include <boost/test/unit_test.hpp>

#include <fstream>
#include <map>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace rpclb::test;

namespace {

fs::path declared_build_dir() {
    const char* dir = std::getenv("RPCLB_CMAKE_BUILD_DIR");
    return dir && *dir ? fs::path(dir) : fs::path();
}

fs::path build_dir() {
    if (auto declared = declared_build_dir(); !declared.empty()) return declared;
    return detail::executable_dir().parent_path();  // <build>/test/<exe>
}

// `KEY:TYPE=VALUE` lines of the build's CMakeCache.txt.
std::map<std::string, std::string> cmake_cache() {
    std::map<std::string, std::string> entries;
    std::ifstream in(build_dir() / "CMakeCache.txt");
    for (std::string line; std::getline(in, line);) {
        const auto colon = line.find(':');
        const auto equals = line.find('=');
        if (line.empty() || line[0] == '#' || line[0] == '/' || colon == std::string::npos ||
            equals == std::string::npos || colon > equals)
            continue;
        entries[line.substr(0, colon)] = line.substr(equals + 1);
    }
    return entries;
}

// Runs the case when there is a CMake build, or when one is declared (to fail on it).
boost::test_tools::assertion_result cmake_build_or_skip(boost::unit_test::test_unit_id) {
    if (!declared_build_dir().empty() || fs::is_regular_file(build_dir() / "CMakeCache.txt")) return true;
    const std::string why = "no CMake build at " + build_dir().string() + " (cmake --install needs one)";
    std::cerr << "installed_package: SKIPPED: " << why << '\n';
    boost::test_tools::assertion_result skip(false);
    skip.message() << why;
    return skip;
}

// A temporary directory removed with everything in it when the scope ends, pass or fail.
class TempDir {
public:
    TempDir() {
        auto pattern = (fs::temp_directory_path() / "rpclb-install-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const fs::path& path() const noexcept { return path_; }

private:
    fs::path path_;
};

// Runs `program args` to its end within `limit`; "" on exit status 0, else what happened
// and its output. Its stdout is read to the end (a full pipe would stall it).
std::string run(const fs::path& program, const std::vector<std::string>& args, const fs::path& log,
                std::chrono::seconds limit) {
    Process p(program, args, {}, log);
    const auto deadline = Process::Clock::now() + limit;
    p.wait_for_line("\x01", deadline);  // no line starts so: reads until end of output
    const auto status = p.wait_exit(deadline);
    if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return {};
    std::string out;
    for (const auto& line : p.stdout_lines()) out += line + "\n";
    return program.string() + (status ? " " + describe_status(*status) : " still running after the limit") +
           "\n" + out + p.stderr_text();
}

// The installed tree: installed into <scratch>/installed, then moved to <scratch>/moved.
struct MovedInstall {
    TempDir scratch;
    fs::path prefix = scratch.path() / "moved";
    std::string libdir;
    std::string cmake;

    MovedInstall() {
        auto cache = cmake_cache();
        cmake = cache["CMAKE_COMMAND"];
        libdir = cache["CMAKE_INSTALL_LIBDIR"].empty() ? "lib" : cache["CMAKE_INSTALL_LIBDIR"];
        BOOST_TEST_REQUIRE(!cmake.empty(), "no CMAKE_COMMAND in " << build_dir() / "CMakeCache.txt");
        const auto installed = scratch.path() / "installed";
        const auto failure = run(cmake, {"--install", build_dir().string(), "--prefix", installed.string()},
                                 scratch.path() / "install.log", 120s);
        BOOST_TEST_REQUIRE(failure.empty(), "cmake --install (build every target first): " << failure);
        fs::rename(installed, prefix);
    }

    fs::path plugin_dir() const { return prefix / libdir / "rpclb" / "plugins"; }

    // The installed rpclb-node with no plugin path at all: no --plugins, RPCLB_PLUGIN_PATH
    // empty, and no library path that could lead to the build tree.
    std::unique_ptr<Process> node(const std::vector<std::string>& balancers, const fs::path& log) const {
        std::vector<std::string> args{"--name", "a@127.0.0.1", "--listen", "127.0.0.1:0"};
        for (const auto& b : balancers) args.insert(args.end(), {"--balancer", b});
        return std::make_unique<Process>(
            prefix / "bin" / "rpclb-node", args,
            std::vector<std::pair<std::string, std::string>>{
                {"RPCLB_COOKIE", test_cookie}, {"RPCLB_PLUGIN_PATH", ""}, {"LD_LIBRARY_PATH", ""}},
            log);
    }
};

// Files mapped by process `pid` whose name is `file_name`.
std::vector<fs::path> mapped(pid_t pid, const std::string& file_name) {
    std::vector<fs::path> files;
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) {
        const auto slash = line.find('/');
        if (slash == std::string::npos) continue;
        fs::path file = line.substr(slash);
        if (file.filename() == file_name && std::find(files.begin(), files.end(), file) == files.end())
            files.push_back(file);
    }
    return files;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(installed_package, Harness)

BOOST_AUTO_TEST_CASE(installed_node_finds_plugins_beside_its_library,
                     *boost::unit_test::precondition(cmake_build_or_skip)) {
    MovedInstall install;
    auto a = install.node({"ring=hash_ring"}, dir() / "a.log");
    const auto line = a->wait_for_line("listening on ", Process::Clock::now() + 10s);
    BOOST_TEST_REQUIRE(line.has_value(), "the installed rpclb-node did not start; stderr:\n" << a->stderr_text());
    const auto address = parse_listening_line(*line);
    BOOST_TEST_REQUIRE(address.has_value(), *line);

    // The plugin came from the moved prefix, not from the build tree or /usr/local.
    const auto plugin = mapped(a->pid(), "librpclb_hash_ring.so");
    BOOST_TEST_REQUIRE(plugin.size() == 1u, a->stderr_text());
    BOOST_TEST(fs::equivalent(plugin.front(), install.plugin_dir() / "librpclb_hash_ring.so"), plugin.front());

    // And the balancer serves: a keyed call through it reaches the node.
    auto client = start_client({address->text()});
    BOOST_TEST_REQUIRE(wait_for_members(*client, "ring", {"a@127.0.0.1"}, 10s));
    rpclb::CallOptions through;
    through.load_balancer = "ring";
    through.key = "some-key";
    through.timeout = 5s;
    const auto answer = client->call("demo", "node", {}, through);
    BOOST_TEST_REQUIRE(answer.has_value(), (answer ? "" : answer.error().message));
    BOOST_TEST(answer->as_string() == "a@127.0.0.1");
    client->stop();
    BOOST_TEST(a->signal(SIGTERM));
    const auto status = a->wait_exit(Process::Clock::now() + 20s);
    BOOST_TEST_REQUIRE(status.has_value());
    BOOST_TEST(describe_status(*status) == "exited 0");
}

// An application or plugin includes the public headers only; the wire codec and the
// handshake stay the library's own.
BOOST_AUTO_TEST_CASE(installed_headers_leave_out_the_wire_codec_and_the_handshake,
                     *boost::unit_test::precondition(cmake_build_or_skip)) {
    MovedInstall install;
    const auto detail = install.prefix / "include" / "rpclb" / "detail";
    BOOST_TEST(fs::exists(install.prefix / "include" / "rpclb" / "cluster.hpp"));
    BOOST_TEST(!fs::exists(detail / "wire.hpp"));
    BOOST_TEST(!fs::exists(detail / "handshake.hpp"));
}

BOOST_AUTO_TEST_CASE(installed_node_exits_1_when_a_balancer_plugin_is_missing,
                     *boost::unit_test::precondition(cmake_build_or_skip)) {
    MovedInstall install;
    auto a = install.node({"ring=hash_ring", "bogus=no_such_plugin"}, dir() / "a.log");
    const auto status = a->wait_exit(Process::Clock::now() + 20s);
    BOOST_TEST_REQUIRE(status.has_value(), "rpclb-node still runs; stderr:\n" << a->stderr_text());
    BOOST_TEST(describe_status(*status) == "exited 1");
    const auto err = a->stderr_text();
    BOOST_TEST(err.find("cannot start balancer \"bogus=no_such_plugin\"") != std::string::npos, err);
    // The error lists the folder beside the library among those it looked in.
    BOOST_TEST(err.find("librpclb_no_such_plugin.so in " + install.plugin_dir().string()) != std::string::npos, err);
    BOOST_TEST(!a->wait_for_line("listening on ", Process::Clock::now() + 1s).has_value());
}

BOOST_AUTO_TEST_CASE(package_plugin_dir_follows_the_moved_install,
                     *boost::unit_test::precondition(cmake_build_or_skip)) {
    MovedInstall install;
    const auto project = install.scratch.path() / "consumer";
    fs::create_directories(project);
    const auto answer = install.scratch.path() / "plugin_dir.txt";
    std::ofstream(project / "CMakeLists.txt")
        << "cmake_minimum_required(VERSION 3.20)\n"
           "project(consumer LANGUAGES CXX)\n"
           "find_package(rpclb REQUIRED)\n"
           "file(WRITE \"" << answer.string() << "\" \"${rpclb_PLUGIN_DIR}\")\n";
    auto cache = cmake_cache();
    std::vector<std::string> args{"-S", project.string(), "-B", (install.scratch.path() / "consumer-build").string(),
                                  "-DCMAKE_PREFIX_PATH=" + install.prefix.string(),
                                  "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"};
    if (!cache["CMAKE_CXX_COMPILER"].empty()) args.push_back("-DCMAKE_CXX_COMPILER=" + cache["CMAKE_CXX_COMPILER"]);
    if (!cache["CMAKE_GENERATOR"].empty()) args.insert(args.end(), {"-G", cache["CMAKE_GENERATOR"]});
    if (!cache["CMAKE_MAKE_PROGRAM"].empty()) args.push_back("-DCMAKE_MAKE_PROGRAM=" + cache["CMAKE_MAKE_PROGRAM"]);
    const auto failure = run(install.cmake, args, install.scratch.path() / "consumer.log", 120s);
    BOOST_TEST_REQUIRE(failure.empty(), "configuring a project with find_package(rpclb): " << failure);
    const auto reported = detail::read_file(answer);
    BOOST_TEST_REQUIRE(!reported.empty());
    BOOST_TEST(fs::equivalent(reported, install.plugin_dir()), reported << " is not " << install.plugin_dir());
}

BOOST_AUTO_TEST_SUITE_END()
