#include <rpclb/plugin_registry.hpp>

#include <rpclb/detail/plugin_path.hpp>

#include "plugin_algorithm.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <system_error>
#include <utility>

#ifndef RPCLB_PLUGIN_INSTALL_DIR
#define RPCLB_PLUGIN_INSTALL_DIR "/usr/local/lib/rpclb/plugins"
#endif

namespace rpclb {

std::vector<std::filesystem::path> detail::plugin_environment_path() {
    std::vector<std::filesystem::path> dirs;
    const char* value = std::getenv("RPCLB_PLUGIN_PATH");
    if (!value) return dirs;
    std::string_view rest(value);
    while (!rest.empty()) {
        const auto colon = rest.find(':');
        const auto entry = rest.substr(0, colon);
        if (!entry.empty()) dirs.emplace_back(entry);
        if (colon == std::string_view::npos) break;
        rest.remove_prefix(colon + 1);
    }
    return dirs;
}

namespace {

constexpr const char* entry_symbol = RPCLB_PLUGIN_ENTRY_SYMBOL;
// What plugins of contract versions up to 6 exported instead (a Boost.DLL alias of a
// function returning a pointer to LegacyInfo): read only to name their version.
constexpr const char* legacy_info_symbol = "rpclb_plugin_info";
struct LegacyInfo {
    std::uint32_t abi_version;
    const char* name;
    const char* rpclb_version;
    const char* compiler;
};

// The table's functions, by name, for the message that names a null one.
struct TableFunction {
    const char* name;
    bool (*missing)(const rpclb_plugin_table&);
};
#define RPCLB_TABLE_FUNCTION(F) TableFunction{#F, [](const rpclb_plugin_table& t) { return t.F == nullptr; }}
constexpr TableFunction table_functions[] = {
    RPCLB_TABLE_FUNCTION(free_string), RPCLB_TABLE_FUNCTION(create),        RPCLB_TABLE_FUNCTION(destroy),
    RPCLB_TABLE_FUNCTION(init),        RPCLB_TABLE_FUNCTION(open_members),  RPCLB_TABLE_FUNCTION(close_members),
    RPCLB_TABLE_FUNCTION(choose),      RPCLB_TABLE_FUNCTION(choose_many),   RPCLB_TABLE_FUNCTION(release),
    RPCLB_TABLE_FUNCTION(node_change), RPCLB_TABLE_FUNCTION(local),         RPCLB_TABLE_FUNCTION(services),
};
#undef RPCLB_TABLE_FUNCTION

// "GNU libstdc++" of "GNU C++ version 12.2.0 / GNU libstdc++ version 20230528": the
// standard library's family, which decides the layout of the C++ objects that
// capability::host and capability::services pass.
std::string_view standard_library(std::string_view compiler) {
    const auto slash = compiler.find(" / ");
    if (slash == std::string_view::npos) return {};
    compiler.remove_prefix(slash + 3);
    return compiler.substr(0, compiler.find(" version"));
}

std::string contract_versions() {
    return RPCLB_PLUGIN_ABI_MIN_VERSION == RPCLB_PLUGIN_ABI_VERSION
               ? std::to_string(RPCLB_PLUGIN_ABI_VERSION)
               : std::to_string(RPCLB_PLUGIN_ABI_MIN_VERSION) + " to " + std::to_string(RPCLB_PLUGIN_ABI_VERSION);
}


// `<directory of librpclb.so>/rpclb/plugins`, read from the loaded library at run time:
// an install puts the plugins there, beside the library, and the pair stays together
// when the installed tree is moved or installed with another prefix than the configured
// one. Empty when the loader cannot say where the library is.
std::filesystem::path library_relative_dir() {
    std::error_code ec;
    const std::filesystem::path library = boost::dll::this_line_location(ec);
    if (ec || library.empty()) return {};
    // The loader's name may hold "bin/../lib" (a $ORIGIN run path): normalise it for the
    // error messages that list the folders.
    auto dir = std::filesystem::weakly_canonical(library.parent_path(), ec);
    if (ec) dir = library.parent_path().lexically_normal();
    return dir / "rpclb" / "plugins";
}

bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b) {
    std::error_code ec;
    if (std::filesystem::equivalent(a, b, ec)) return true;
    return a.lexically_normal() == b.lexically_normal();
}

// Algorithm names become file names, so anything that could leave the search directory
// ("../x", "a/b") is refused before touching the file system.
bool valid_name(std::string_view name) {
    if (name.empty()) return false;
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

std::string or_unknown(const char* s) { return s ? std::string(s) : std::string("<unknown>"); }

PluginError file_error(const std::filesystem::path& file, std::string what) {
    return PluginError{"plugin " + file.string() + ": " + std::move(what)};
}

}  // namespace

PluginRegistry::PluginRegistry(std::vector<std::filesystem::path> search_path)
    : given_(std::move(search_path)) {
    for (auto& dir : detail::plugin_environment_path()) given_.push_back(std::move(dir));
    // Each folder once, in order (a tool may give the library's own folder, or one twice).
    auto add = [&](std::filesystem::path dir) {
        if (std::none_of(path_.begin(), path_.end(), [&](const auto& p) { return same_directory(p, dir); }))
            path_.push_back(std::move(dir));
    };
    for (const auto& dir : given_) add(dir);
    if (auto beside = library_relative_dir(); !beside.empty()) add(std::move(beside));
    // Installed where it was configured for, the library's folder is the built-in one.
    add(std::filesystem::path(RPCLB_PLUGIN_INSTALL_DIR));
}

std::vector<std::filesystem::path> PluginRegistry::missing_directories() const {
    std::vector<std::filesystem::path> missing;
    for (const auto& dir : given_) {
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec)) missing.push_back(dir);
    }
    return missing;
}

std::string PluginRegistry::file_name(std::string_view name) {
    return "librpclb_" + std::string(name) + ".so";
}

boost::system::result<std::filesystem::path, PluginError> PluginRegistry::find(
    std::string_view name) const {
    if (!valid_name(name))
        return PluginError{"invalid plugin name \"" + std::string(name) +
                           "\": use letters, digits, '_' and '-'"};
    const std::string file = file_name(name);
    for (const auto& dir : path_) {
        std::error_code ec;
        auto candidate = dir / file;
        if (std::filesystem::is_regular_file(candidate, ec))
            return {boost::system::in_place_value, std::move(candidate)};
    }
    std::string searched;
    for (const auto& dir : path_) {
        if (!searched.empty()) searched += ", ";
        searched += dir.string();
    }
    return PluginError{"plugin \"" + std::string(name) + "\" not found: looked for " + file +
                       " in " + searched};
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> PluginRegistry::create(
    std::string_view name) {
    auto file = find(name);
    if (!file) return file.error();
    LoadedPlugin info;
    auto algorithm = load(*file, name, &info);
    if (!algorithm) return algorithm;
    std::lock_guard lock(loaded_mutex_);
    auto it = std::find_if(loaded_.begin(), loaded_.end(),
                           [&](const LoadedPlugin& p) { return p.name == info.name && p.file == info.file; });
    if (it == loaded_.end()) it = loaded_.insert(std::upper_bound(loaded_.begin(), loaded_.end(), info,
                                                                  [](const auto& a, const auto& b) { return a.name < b.name; }),
                                                 std::move(info));
    ++it->loads;
    return algorithm;
}

std::vector<LoadedPlugin> PluginRegistry::loaded() const {
    std::lock_guard lock(loaded_mutex_);
    return loaded_;
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError>
PluginRegistry::create_from_file(const std::filesystem::path& file, std::string_view expected_name) {
    return load(file, expected_name, nullptr);
}

boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError>
PluginRegistry::load(const std::filesystem::path& file, std::string_view expected_name, LoadedPlugin* out) {
    // Each object holds its own reference to the library (dlopen counts them), so the
    // library unloads when the last object created from it is gone.
    auto lib = std::make_shared<boost::dll::shared_library>();
    {
        std::error_code ec;
        // rtld_now: an unresolved symbol fails here with a message, not at the first pick.
        lib->load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
        if (ec) {
            const char* reason = ::dlerror();
            return file_error(file, "cannot open: " + (reason ? std::string(reason) : ec.message()));
        }
    }

    if (!lib->has(entry_symbol)) {
        if (lib->has(legacy_info_symbol)) {
            const auto* legacy = lib->get_alias<const LegacyInfo*()>(legacy_info_symbol)();
            if (legacy)
                return file_error(file, "plugin contract version " + std::to_string(legacy->abi_version) +
                                            ", this rpclb loads contract version " + contract_versions() +
                                            " (plugin built against rpclb " + or_unknown(legacy->rpclb_version) +
                                            " with " + or_unknown(legacy->compiler) + ")");
        }
        return file_error(file, std::string("missing ") + entry_symbol + " (not an rpclb plugin?)");
    }
    const rpclb_plugin_table* table = lib->get<rpclb_plugin_entry>(entry_symbol)();
    if (!table) return file_error(file, std::string(entry_symbol) + " returned null");

    // The table only grows at its end: its first six fields are where we look in a
    // plugin of any contract version from 7.
    if (table->abi_version < RPCLB_PLUGIN_ABI_MIN_VERSION || table->abi_version > RPCLB_PLUGIN_ABI_VERSION)
        return file_error(file, "plugin contract version " + std::to_string(table->abi_version) +
                                    ", this rpclb loads contract version " + contract_versions() +
                                    " (plugin built against rpclb " + or_unknown(table->rpclb_version) + " with " +
                                    or_unknown(table->compiler) + ")");
    if (table->size < sizeof(rpclb_plugin_table))
        return file_error(file, "plugin table of " + std::to_string(table->size) + " bytes, contract version " +
                                    std::to_string(table->abi_version) + " needs " +
                                    std::to_string(sizeof(rpclb_plugin_table)));
    for (const auto& f : table_functions)
        if (f.missing(*table)) return file_error(file, std::string("plugin table function ") + f.name + " is null");
    if (!expected_name.empty() && (!table->name || std::string_view(table->name) != expected_name))
        return file_error(file, "exports algorithm \"" + or_unknown(table->name) +
                                    "\", expected \"" + std::string(expected_name) + "\"");

    if (const std::uint64_t unknown = table->capabilities & ~capability::all; unknown != 0)
        return file_error(file, "plugin uses capabilities this rpclb does not offer (bits 0x" +
                                    [unknown] {
                                        char hex[17];
                                        std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(unknown));
                                        return std::string(hex);
                                    }() +
                                    "; plugin built against rpclb " + or_unknown(table->rpclb_version) + ")");
    if ((table->capabilities & (capability::host | capability::services)) != 0 &&
        (!table->compiler || standard_library(table->compiler) != standard_library(RPCLB_COMPILER_ID)))
        return file_error(file, "plugin uses capability host or services, which pass C++ objects, and was built with " +
                                    or_unknown(table->compiler) + ", this rpclb with " RPCLB_COMPILER_ID
                                    " (another standard library)");

    char* error = nullptr;
    void* instance = table->create(&error);
    if (!instance) {
        std::string what = error ? std::string(": ") + error : std::string(" (no message)");
        if (error) table->free_string(error);
        return file_error(file, "plugin create failed" + what);
    }
    if (out) *out = LoadedPlugin{or_unknown(table->name), file, or_unknown(table->rpclb_version), table->abi_version,
                                 or_unknown(table->compiler), 0, table->capabilities};
    // The instance and each view of a snapshot it opens keep the library loaded; the
    // library unloads when the last of them is gone.
    return std::shared_ptr<SelectionAlgorithm>(
        std::make_shared<detail::PluginAlgorithm>(std::shared_ptr<void>(std::move(lib)), table, instance));
}

void throw_exception_from_error(const PluginError& e, const boost::source_location&) {
    throw std::runtime_error(e.message);
}

}  // namespace rpclb
