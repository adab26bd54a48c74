// Finds, checks and loads selection-algorithm plugins with Boost.DLL.
#pragma once

#include <rpclb/selection_algorithm.hpp>

#include <boost/system/result.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// Error from the plugin loader: a message naming the file and, for a version mismatch,
/// both versions.
struct PluginError {
    std::string message;
};

/// A plugin a registry has loaded, as its table (rpclb/plugin_abi.h) described it.
struct LoadedPlugin {
    std::string name;             ///< algorithm name ("round_robin")
    std::filesystem::path file;   ///< the file it was loaded from
    std::string rpclb_version;    ///< the rpclb version it was built against
    std::uint32_t abi_version = 0;
    std::string compiler;         ///< compiler and standard-library identity
    std::uint64_t loads = 0;      ///< algorithm objects created from it so far
    std::uint64_t capabilities = 0;  ///< the rpclb::capability bits it declares
};

/// Loads `librpclb_<name>.so` plugins. Search path, first match wins: the constructor's
/// directories (ClusterOptions::plugin_path); `RPCLB_PLUGIN_PATH` (colon-separated);
/// `rpclb/plugins` beside the loaded librpclb.so; the configured install directory. A
/// missing directory is skipped; the "not found" error lists every one. Only C data crosses
/// to a plugin (rpclb/plugin_abi.h), so one built with another compiler loads; a plugin of
/// another contract version or name, with a short table or a null function, or one that
/// passes C++ objects (capability::host, services) built against another standard
/// library, is refused before anything is created. Each algorithm object keeps its library loaded while it lives.
///
/// Thread safety: distinct objects safe; shared objects safe (no lock is held while plugin
/// code runs).
class PluginRegistry {
public:
    /// `search_path`: directories searched before `RPCLB_PLUGIN_PATH` and the library's
    /// own plugin directories. Directories that don't exist are reported by
    /// `missing_directories()` and skipped.
    explicit PluginRegistry(std::vector<std::filesystem::path> search_path = {});

    /// The full search path in order (constructor's, environment, beside the library,
    /// compiled-in).
    const std::vector<std::filesystem::path>& search_path() const noexcept { return path_; }

    /// Directories given to the constructor or by the environment that don't exist.
    std::vector<std::filesystem::path> missing_directories() const;

    /// The file that `load(name)` would open, or an error listing the directories searched.
    boost::system::result<std::filesystem::path, PluginError> find(std::string_view name) const;

    /// Creates a fresh algorithm named `name` (e.g. "round_robin").
    /// Errors: unknown name (no file on the search path), a file that fails to open, a
    /// missing `rpclb_plugin` function, a refused table (contract version, size, null
    /// function, name, capability, standard library), or a `create` that failed.
    boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError> create(
        std::string_view name);

    /// Like create(), from an explicit file; `expected_name` empty = accept any name.
    /// Not recorded in loaded().
    static boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError>
    create_from_file(const std::filesystem::path& file, std::string_view expected_name = {});

    /// Every plugin create() has loaded successfully, by name (the admin console's
    /// "loaded plugins"). A plugin stays listed after its last object is gone.
    std::vector<LoadedPlugin> loaded() const;

    /// The plugin file name for an algorithm: "librpclb_<name>.so".
    static std::string file_name(std::string_view name);

private:
    // create_from_file, also filling `info` (strings copied while the library is loaded).
    static boost::system::result<std::shared_ptr<SelectionAlgorithm>, PluginError>
    load(const std::filesystem::path& file, std::string_view expected_name, LoadedPlugin* info);

    std::vector<std::filesystem::path> path_;
    std::vector<std::filesystem::path> given_;
    mutable std::mutex loaded_mutex_;
    std::vector<LoadedPlugin> loaded_;
};

}  // namespace rpclb

namespace rpclb {
/// Lets `boost::system::result<T, PluginError>::value()` throw std::runtime_error.
[[noreturn]] void throw_exception_from_error(const PluginError& e,
                                             const boost::source_location& loc);
}  // namespace rpclb
