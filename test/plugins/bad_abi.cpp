// A plugin built "against a future rpclb": its table reports contract version 99, so the
// loader must refuse it, naming both versions, before calling anything of it. Written by
// hand because RPCLB_PLUGIN always exports the version of the headers it is compiled with.
#include <rpclb/plugin_abi.h>
#include <rpclb/version.hpp>

namespace {

// Every function is null: the version check must come first.
const rpclb_plugin_table table{99, sizeof(rpclb_plugin_table), "bad_abi", "9.9.9", "Some C compiler 9",
                               0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) const rpclb_plugin_table* rpclb_plugin(void) { return &table; }
