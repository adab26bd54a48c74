#define BOOST_TEST_MODULE plugin_registry
#include <boost/test/unit_test.hpp>

#include "support/env.hpp"

#include <rpclb/plugin_abi.h>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/selection_algorithm.hpp>

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using rpclb::test::ScopedEnv;

namespace {

// Directory of the deliberately broken plugins (test/plugins), set by the build.
fs::path test_plugin_dir() {
    const char* dir = std::getenv("RPCLB_TEST_PLUGIN_DIR");
    BOOST_TEST_REQUIRE(dir != nullptr, "RPCLB_TEST_PLUGIN_DIR is not set");
    return dir;
}

// First directory of RPCLB_PLUGIN_PATH: where the real plugins were built.
std::string plugin_path_env() {
    const char* path = std::getenv("RPCLB_PLUGIN_PATH");
    BOOST_TEST_REQUIRE(path != nullptr, "RPCLB_PLUGIN_PATH is not set");
    return path;
}

fs::path test_plugin(const std::string& stem) {
    return test_plugin_dir() / rpclb::PluginRegistry::file_name(stem);
}

// Whether a shared object whose path ends in `file_name` is mapped into this process.
bool is_mapped(const std::string& file_name) {
    struct Search {
        const std::string* file_name;
        bool found = false;
    } search{&file_name};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            auto* s = static_cast<Search*>(data);
            if (info->dlpi_name && fs::path(info->dlpi_name).filename() == *s->file_name)
                s->found = true;
            return 0;
        },
        &search);
    return search.found;
}

// The directory of the librpclb.so mapped into this process, as the loader named it.
fs::path librpclb_dir() {
    fs::path found;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            if (info->dlpi_name && fs::path(info->dlpi_name).filename().string().rfind("librpclb.so", 0) == 0)
                *static_cast<fs::path*>(data) = info->dlpi_name;
            return 0;
        },
        &found);
    BOOST_TEST_REQUIRE(!found.empty(), "librpclb.so is not mapped");
    return found.parent_path();
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// Members a, b, c: a fresh snapshot each time, since a snapshot keeps the plugins that
// picked from it loaded (their views of it) until it is destroyed.
rpclb::MemberSnapshot abc() { return {{"a@h", "b@h", "c@h"}, 1}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(plugin_registry)

BOOST_AUTO_TEST_CASE(create_good_plugin_from_environment_path) {
    rpclb::PluginRegistry registry;
    auto algorithm = registry.create("round_robin");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    BOOST_TEST_REQUIRE(*algorithm != nullptr);
    (*algorithm)->init({"workers", "me@h", nullptr}, {{"start", 0}});
    BOOST_TEST((*algorithm)->choose_from_nodes(abc(), {}).value() == 0u);
    BOOST_TEST((*algorithm)->choose_from_nodes(abc(), {}).value() == 1u);
}

BOOST_AUTO_TEST_CASE(find_returns_file_in_first_directory_that_has_it) {
    rpclb::PluginRegistry registry({"/nonexistent/rpclb-first"});
    auto file = registry.find("round_robin");
    BOOST_TEST_REQUIRE(file.has_value());
    BOOST_TEST(file->filename() == "librpclb_round_robin.so");
    BOOST_TEST(fs::exists(*file));
}

BOOST_AUTO_TEST_CASE(search_path_orders_constructor_environment_library_dir_install_and_skips_empty_entries) {
    ScopedEnv env("RPCLB_PLUGIN_PATH", "::/env/a::/env/b:");
    rpclb::PluginRegistry registry({"/given"});
    const auto& path = registry.search_path();
    BOOST_TEST_REQUIRE(path.size() == 5u);
    BOOST_TEST(path[0] == fs::path("/given"));
    BOOST_TEST(path[1] == fs::path("/env/a"));
    BOOST_TEST(path[2] == fs::path("/env/b"));
    // Beside the librpclb.so this process loaded (the build tree's lib/ here), found at
    // run time: an installed tree finds its own plugins wherever it is.
    BOOST_TEST(path[3] == fs::weakly_canonical(librpclb_dir()) / "rpclb" / "plugins");
    // Then the directory compiled in (the configured prefix's, not this build tree).
    BOOST_TEST(path[4].filename() == "plugins");
    BOOST_TEST(path[4] != path[3]);
}

BOOST_AUTO_TEST_CASE(missing_directories_reports_given_and_environment_dirs_that_do_not_exist) {
    ScopedEnv env("RPCLB_PLUGIN_PATH", ("/nonexistent/rpclb-env:" + plugin_path_env()).c_str());
    rpclb::PluginRegistry registry({"/nonexistent/rpclb-given", test_plugin_dir()});
    const auto missing = registry.missing_directories();
    BOOST_TEST_REQUIRE(missing.size() == 2u);
    BOOST_TEST(missing[0] == fs::path("/nonexistent/rpclb-given"));
    BOOST_TEST(missing[1] == fs::path("/nonexistent/rpclb-env"));
}

BOOST_AUTO_TEST_CASE(create_unknown_name_error_names_file_and_searched_directories) {
    rpclb::PluginRegistry registry({"/nonexistent/rpclb-given"});
    auto algorithm = registry.create("no_such_algorithm");
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(contains(message, "plugin \"no_such_algorithm\" not found"));
    BOOST_TEST(contains(message, "librpclb_no_such_algorithm.so"));
    BOOST_TEST(contains(message, "/nonexistent/rpclb-given, "));
    BOOST_TEST(contains(message, plugin_path_env()));
    BOOST_TEST(contains(message, registry.search_path().back().string()));
}

BOOST_AUTO_TEST_CASE(create_name_with_path_separator_is_refused) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    auto algorithm = registry.create("../plugins/round_robin");
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    BOOST_TEST(contains(algorithm.error().message, "invalid plugin name"));
}

BOOST_AUTO_TEST_CASE(create_null_table_function_error_names_file_and_function) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    auto algorithm = registry.create("no_factory");
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message == "plugin " + test_plugin("no_factory").string() + ": plugin table function create is null");
}

BOOST_AUTO_TEST_CASE(create_short_table_error_names_both_sizes) {
    auto algorithm = rpclb::PluginRegistry::create_from_file(test_plugin("short_table"));
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message == "plugin " + test_plugin("short_table").string() + ": plugin table of " +
                              std::to_string(offsetof(rpclb_plugin_table, services)) + " bytes, contract version " +
                              std::to_string(rpclb::plugin_abi_version) + " needs " +
                              std::to_string(sizeof(rpclb_plugin_table)));
}

BOOST_AUTO_TEST_CASE(create_abi_mismatch_error_names_file_and_both_versions) {
    auto algorithm = rpclb::PluginRegistry::create_from_file(test_plugin("bad_abi"));
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(contains(message, "plugin " + test_plugin("bad_abi").string() + ": "));
    BOOST_TEST(message == "plugin " + test_plugin("bad_abi").string() +
                              ": plugin contract version 99, this rpclb loads contract version " +
                              std::to_string(rpclb::plugin_abi_version) +
                              " (plugin built against rpclb 9.9.9 with Some C compiler 9)");
}

BOOST_AUTO_TEST_CASE(create_plugin_of_previous_layout_refused_naming_both_versions) {
    // A plugin of contract 6 exports its handshake and no C table: refused, naming both
    // versions, and never created.
    auto algorithm = rpclb::PluginRegistry::create_from_file(test_plugin("old_layout"));
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(contains(message, "plugin contract version 6, this rpclb loads contract version " +
                                     std::to_string(rpclb::plugin_abi_version) + " (plugin built against rpclb 0.1.0 "));
    // The factory of old_layout throws a logic_error if it is ever called.
    BOOST_TEST(!contains(message, "factory"));
}

BOOST_AUTO_TEST_CASE(create_plugin_using_a_capability_not_offered_is_refused) {
    auto algorithm = rpclb::PluginRegistry::create_from_file(test_plugin("future_capability"));
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST(contains(message, "plugin uses capabilities this rpclb does not offer (bits 0x10000000000"));
    BOOST_TEST(!contains(message, "factory"));
}

BOOST_AUTO_TEST_CASE(plugin_of_another_compiler_loads_and_picks) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    auto algorithm = registry.create("wrong_compiler");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    (*algorithm)->init(rpclb::AlgorithmContext{"b", "n@h", nullptr}, {});
    const rpclb::MemberSnapshot members({"a@h", "b@h", "c@h"}, 1);
    const auto picked = (*algorithm)->choose_from_nodes(members, {});
    BOOST_TEST_REQUIRE(picked.has_value());
    BOOST_TEST(*picked == 2u);
    const auto loaded = registry.loaded();
    BOOST_TEST_REQUIRE(loaded.size() == 1u);
    BOOST_TEST(loaded[0].compiler == "Borland C++ 5.5 / Rogue Wave");
}

BOOST_AUTO_TEST_CASE(plugin_passing_cpp_objects_built_against_another_standard_library_is_refused) {
    auto algorithm = rpclb::PluginRegistry::create_from_file(test_plugin("foreign_host"));
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message == "plugin " + test_plugin("foreign_host").string() +
                              ": plugin uses capability host or services, which pass C++ objects, and was built "
                              "with Clang version 14.0.6 / libc++ version 14000, this rpclb with " RPCLB_COMPILER_ID
                              " (another standard library)");
}

// A plugin of the C boundary alone (no rpclb C++ header), reporting the previous rpclb
// release of this contract: it loads, picks through the host's in-flight counts, refuses
// an empty list with its code, reason and message, and fails init with its own text.
BOOST_AUTO_TEST_CASE(c_plugin_of_a_previous_release_loads_and_serves) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    auto algorithm = registry.create("c_abi");
    BOOST_TEST_REQUIRE(algorithm.has_value(), (algorithm ? "" : algorithm.error().message));
    BOOST_TEST(registry.loaded().at(0).rpclb_version == "0.0.9");
    auto& a = **algorithm;
    a.init(rpclb::AlgorithmContext{"b", "n@h", nullptr}, {});
    rpclb::MemberSnapshot members({"a@h", "b@h", "c@h"}, 1);
    members.count_calls();
    BOOST_TEST(*a.choose_from_nodes(members, {}) == 2u);
    members.calls[2]->acquire();
    members.calls[0]->acquire();
    BOOST_TEST(*a.choose_from_nodes(members, {}) == 1u);
    members.calls[1]->acquire();
    members.calls[1]->acquire();
    BOOST_TEST(*a.choose_from_nodes(members, {}) == 2u);
    const auto many = a.choose_nodes(members, 2, {});
    BOOST_TEST_REQUIRE(many.has_value());
    BOOST_TEST(*many == (std::vector<std::size_t>{2, 1}), boost::test_tools::per_element());

    const rpclb::MemberSnapshot none;
    const auto refused = a.choose_from_nodes(none, {});
    BOOST_TEST_REQUIRE(!refused.has_value());
    BOOST_TEST(static_cast<int>(refused.error().code) == 503);
    BOOST_TEST(refused.error().is(rpclb::Failure::no_members));
    BOOST_TEST(refused.error().message == "c_abi: no members");

    auto failing = registry.create("c_abi");
    BOOST_TEST_REQUIRE(failing.has_value());
    BOOST_CHECK_EXCEPTION((*failing)->init(rpclb::AlgorithmContext{"b", "n@h", nullptr}, {{"fail_init", true}}),
                          std::invalid_argument, [](const std::invalid_argument& e) {
                              return std::string(e.what()) == "c_abi: init refused by option fail_init";
                          });
}

BOOST_AUTO_TEST_CASE(create_from_file_without_handshake_names_file_and_symbol) {
    // librpclb itself is a loadable library that exports no rpclb_plugin.
    Dl_info self{};
    BOOST_TEST_REQUIRE(::dladdr(reinterpret_cast<void*>(&rpclb::empty_members_error), &self) != 0);
    const fs::path file = self.dli_fname;
    auto algorithm = rpclb::PluginRegistry::create_from_file(file);
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    BOOST_TEST(algorithm.error().message ==
               "plugin " + file.string() + ": missing rpclb_plugin (not an rpclb plugin?)");
}

BOOST_AUTO_TEST_CASE(create_throwing_factory_returns_exception_text) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    auto algorithm = registry.create("throwing_factory");
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(contains(message, test_plugin("throwing_factory").string()));
    BOOST_TEST(contains(message, "throwing_factory refuses to build an algorithm"));
}

BOOST_AUTO_TEST_CASE(create_from_file_name_mismatch_names_both_names) {
    rpclb::PluginRegistry registry;
    auto file = registry.find("round_robin");
    BOOST_TEST_REQUIRE(file.has_value());
    auto algorithm = rpclb::PluginRegistry::create_from_file(*file, "random");
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    BOOST_TEST(algorithm.error().message ==
               "plugin " + file->string() + ": exports algorithm \"round_robin\", expected \"random\"");
}

BOOST_AUTO_TEST_CASE(create_from_file_not_a_library_error_names_file_and_reason) {
    const fs::path file =
        fs::temp_directory_path() / ("librpclb_not_elf_" + std::to_string(::getpid()) + ".so");
    std::ofstream(file) << "this is not a shared object\n";
    auto algorithm = rpclb::PluginRegistry::create_from_file(file);
    fs::remove(file);
    BOOST_TEST_REQUIRE(!algorithm.has_value());
    const auto& message = algorithm.error().message;
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(contains(message, "plugin " + file.string() + ": cannot open: "));
    // The dlerror text names the file too; an empty reason would end the message here.
    BOOST_TEST(message.size() > ("plugin " + file.string() + ": cannot open: ").size());
}

BOOST_AUTO_TEST_CASE(value_of_error_throws_runtime_error_with_message) {
    rpclb::PluginRegistry registry({test_plugin_dir()});
    BOOST_CHECK_EXCEPTION(registry.create("no_factory").value(), std::runtime_error,
                          [](const std::runtime_error& e) {
                              return contains(e.what(), "plugin table function create is null");
                          });
}

BOOST_AUTO_TEST_CASE(library_stays_loaded_while_object_lives_and_unloads_after) {
    for (const std::string name : {"round_robin", "random"}) {
        BOOST_TEST_CONTEXT(name) {
            const std::string file = rpclb::PluginRegistry::file_name(name);
            BOOST_TEST_REQUIRE(!is_mapped(file));
            std::shared_ptr<rpclb::SelectionAlgorithm> algorithm;
            {
                rpclb::PluginRegistry registry;
                algorithm = registry.create(name).value();
            }
            // The registry is gone; the object's code (its vtable) must still be there.
            BOOST_TEST(is_mapped(file));
            algorithm->init({"workers", "me@h", nullptr}, {});
            auto members = std::make_unique<rpclb::MemberSnapshot>(abc());
            BOOST_TEST(algorithm->choose_from_nodes(*members, {}).value() < 3u);
            BOOST_TEST(algorithm->choose_nodes(*members, 2, {}).value().size() == 2u);
            std::weak_ptr<rpclb::SelectionAlgorithm> watcher = algorithm;
            algorithm.reset();
            BOOST_TEST(watcher.expired());
            // The plugin's view of a snapshot it picked from keeps it loaded, until the
            // snapshot goes.
            BOOST_TEST(is_mapped(file));
            members.reset();
            BOOST_TEST(!is_mapped(file), file << " is still mapped after its last object and snapshot died");
        }
    }
}

BOOST_AUTO_TEST_CASE(create_concurrent_calls_all_succeed) {
    rpclb::PluginRegistry registry;
    std::vector<std::shared_ptr<rpclb::SelectionAlgorithm>> made(8);
    {
        std::vector<std::jthread> threads;
        for (std::size_t i = 0; i < made.size(); ++i)
            threads.emplace_back([&, i] {
                auto algorithm = registry.create(i % 2 ? "random" : "round_robin");
                if (algorithm) made[i] = *algorithm;
            });
    }
    for (const auto& algorithm : made) BOOST_TEST(algorithm != nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
