// The plugin folders the environment names.
#pragma once

#include <filesystem>
#include <vector>

namespace rpclb::detail {

/// The folders of RPCLB_PLUGIN_PATH (colon-separated; empty entries skipped), in order;
/// none when it is unset. Thread-safe as long as nothing changes the environment.
std::vector<std::filesystem::path> plugin_environment_path();

}  // namespace rpclb::detail
