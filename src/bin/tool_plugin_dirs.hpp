// Plugin folders found from the running tool's own location.
#pragma once

#include <boost/dll/runtime_symbol_info.hpp>

#include <filesystem>
#include <system_error>
#include <vector>

namespace rpclb::tools {

/// Appends to `path` the plugin folders of the tree this executable runs from, those that
/// exist: `<its folder>/../plugins` (a build tree) and `<its folder>/../lib/rpclb/plugins`
/// (an install). They come after the folders given on the command line or in a config
/// file, and before RPCLB_PLUGIN_PATH's, the library's own and the compiled-in one
/// (PluginRegistry, which searches each folder once), so a tool run from a build tree or a
/// moved install finds the plugins built or installed with it.
inline void add_tool_plugin_dirs(std::vector<std::filesystem::path>& path) {
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
