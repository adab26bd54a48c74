#include <rpclb/plugin_registry.hpp>

#include <rpclb/detail/plugin_path.hpp>

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

constexpr const char* info_symbol = "rpclb_plugin_info";
constexpr const char* factory_symbol = "rpclb_create_algorithm";


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

    if (!lib->has(info_symbol))
        return file_error(file, std::string("missing ") + info_symbol + " (not an rpclb plugin?)");
    const PluginInfo* info = lib->get_alias<detail::PluginInfoFunction>(info_symbol)();
    if (!info) return file_error(file, std::string(info_symbol) + " returned null");

    // PluginInfo only grows at its end, so its first four fields are where we look in a
    // plugin of any contract version; `capabilities` exists from version 6.
    if (info->abi_version < RPCLB_PLUGIN_ABI_MIN_VERSION || info->abi_version > RPCLB_PLUGIN_ABI_VERSION)
        return file_error(file, "plugin contract version " + std::to_string(info->abi_version) +
                                    ", this rpclb loads " + std::to_string(RPCLB_PLUGIN_ABI_MIN_VERSION) + " to " +
                                    std::to_string(RPCLB_PLUGIN_ABI_VERSION) +
                                    " (plugin built against rpclb " +
                                    or_unknown(info->rpclb_version) + " with " +
                                    or_unknown(info->compiler) + ")");
    if (!info->compiler || std::string_view(info->compiler) != RPCLB_COMPILER_ID)
        return file_error(file, "plugin built with " + or_unknown(info->compiler) +
                                    ", this rpclb was built with " RPCLB_COMPILER_ID
                                    " (plugin built against rpclb " +
                                    or_unknown(info->rpclb_version) + ")");
    if (!expected_name.empty() && (!info->name || std::string_view(info->name) != expected_name))
        return file_error(file, "exports algorithm \"" + or_unknown(info->name) +
                                    "\", expected \"" + std::string(expected_name) + "\"");

    if (const std::uint64_t unknown = info->capabilities & ~capability::all; unknown != 0)
        return file_error(file, "plugin uses capabilities this rpclb does not offer (bits 0x" +
                                    [unknown] {
                                        char hex[17];
                                        std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(unknown));
                                        return std::string(hex);
                                    }() +
                                    "; plugin built against rpclb " + or_unknown(info->rpclb_version) + ")");
    if (!lib->has(factory_symbol)) return file_error(file, std::string("missing factory ") + factory_symbol);
    auto& factory = lib->get_alias<AlgorithmFactory>(factory_symbol);

    std::unique_ptr<SelectionAlgorithm> algorithm;
    try {
        algorithm = factory();
    } catch (const std::exception& e) {
        return file_error(file, std::string("factory ") + factory_symbol + " threw: " + e.what());
    } catch (...) {
        return file_error(file, std::string("factory ") + factory_symbol +
                                    " threw an exception not derived from std::exception");
    }
    if (!algorithm) return file_error(file, std::string("factory ") + factory_symbol + " returned null");
    if (out) *out = LoadedPlugin{or_unknown(info->name), file, or_unknown(info->rpclb_version), info->abi_version,
                                 or_unknown(info->compiler), 0, info->capabilities};

    // The deleter runs the destructor (code in the plugin) first, then drops its library
    // reference at once rather than with the control block, which weak_ptrs may keep.
    // The deleter's own code is in this library, so it may run on after the unload.
    return std::shared_ptr<SelectionAlgorithm>(
        algorithm.release(), [lib = std::move(lib)](SelectionAlgorithm* p) mutable {
            delete p;
            lib.reset();
        });
}

void throw_exception_from_error(const PluginError& e, const boost::source_location&) {
    throw std::runtime_error(e.message);
}

}  // namespace rpclb
