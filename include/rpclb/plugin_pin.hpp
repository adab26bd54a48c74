// Keeping a plugin's shared object mapped for the rest of the process.
#pragma once

#include <dlfcn.h>

#include <mutex>

namespace rpclb {
namespace {  // internal linkage: each plugin that includes this gets its own copy

/// Keeps the shared object that calls it mapped until the process exits: a dlopen
/// reference that is never closed, on a library marked RTLD_NODELETE. For a plugin that
/// registers a function on the Cluster (or leaves callbacks in flight): that code must
/// outlive every algorithm object, after which the loader would otherwise unload the
/// library. Done once per library. Returns false when the library could not be pinned
/// (the caller should log it). Must be compiled into the plugin itself: the anchor it
/// looks up is this copy's own static.
///
/// Thread safety: safe from any thread.
inline bool pin_this_plugin() noexcept {
    static std::once_flag once;
    static bool pinned = false;
    std::call_once(once, [] {
        static const char anchor = 0;
        Dl_info info{};
        pinned = dladdr(&anchor, &info) != 0 && info.dli_fname != nullptr &&
                 dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != nullptr;
    });
    return pinned;
}

}  // namespace
}  // namespace rpclb
