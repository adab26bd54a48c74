// Plugin folders found from the running tool's own location.
#pragma once

#include <rpclb/detail/plugin_path.hpp>

#include <boost/dll/runtime_symbol_info.hpp>

#include <filesystem>
#include <system_error>
#include <vector>

namespace rpclb::tools {

/// Appends to `path` the folders of RPCLB_PLUGIN_PATH, then the plugin folders of the tree
/// this executable runs from, those that exist: `<its folder>/../plugins` (a build tree)
/// and `<its folder>/../lib/rpclb/plugins` (an install). So the order is: the folders given
/// on the command line or in a config file, RPCLB_PLUGIN_PATH's, the tool's own, the
/// library's and the compiled-in one (PluginRegistry searches each folder once), and a
/// tool run from a build tree or a moved install finds the plugins built or installed
/// with it unless the environment says otherwise.
inline void add_tool_plugin_dirs(std::vector<std::filesystem::path>& path) {
    for (auto& dir : detail::plugin_environment_path()) path.push_back(std::move(dir));
    boost::dll::fs::error_code located;
    const std::filesystem::path program(boost::dll::program_location(located).string());
    if (located || program.empty()) return;
    const auto bin = program.parent_path();
    std::error_code ec;
    for (const auto& candidate : {bin / ".." / "plugins", bin / ".." / "lib" / "rpclb" / "plugins"}) {
        auto dir = std::filesystem::weakly_canonical(candidate, ec);
        if (!ec && std::filesystem::is_directory(dir, ec)) path.push_back(std::move(dir));
    }
}

}  // namespace rpclb::tools
