// libFuzzer target for the config-file parser (src/lifecycle/config.cpp): the input is a config
// file's text, read through load_node_config() as rpclb-node reads --config. It either
// loads or is refused with a message, never crashes; a configuration that loads and
// validates converts to JSON and back unchanged.
#include <rpclb/config.hpp>

#include <boost/json/serialize.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace {

[[noreturn]] void fail(const char* what, const std::string& a, const std::string& b) {
    std::fprintf(stderr, "fuzz_config: %s\n  first:  %s\n  second: %s\n", what, a.c_str(), b.c_str());
    std::abort();
}

const std::filesystem::path& scratch_file() {
    static const auto path = std::filesystem::temp_directory_path() /
                             ("rpclb-fuzz-config-" + std::to_string(::getpid()) + ".json");
    return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto& path = scratch_file();
    {
        std::FILE* out = std::fopen(path.c_str(), "wb");
        if (!out) fail("cannot write the scratch file", path.string(), "");
        if (size) std::fwrite(data, 1, size, out);
        std::fclose(out);
    }
    auto config = rpclb::load_node_config(path);
    if (!config) {
        if (config.error().message.empty()) fail("refused without a message", "", "");
        return 0;
    }
    if (!rpclb::validate(*config)) return 0;
    const auto json = rpclb::to_json(*config, rpclb::Secrets::include);
    auto back = rpclb::node_config_from_json(json);
    if (!back) fail("to_json wrote a config node_config_from_json refuses", boost::json::serialize(json),
                    back.error().message);
    const auto again = rpclb::to_json(*back, rpclb::Secrets::include);
    if (again != json) fail("config changed through JSON", boost::json::serialize(json), boost::json::serialize(again));
    return 0;
}
