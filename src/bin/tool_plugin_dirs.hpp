// Plugin folders found from the running tool's own location.
#pragma once

#include <boost/dll/runtime_symbol_info.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
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
    if (const char* env = std::getenv("RPCLB_PLUGIN_PATH")) {
        std::string_view rest(env);
        while (!rest.empty()) {
            const auto colon = rest.find(':');
            const auto dir = rest.substr(0, colon);
            if (!dir.empty()) path.emplace_back(std::string(dir));
            rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        }
    }
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
