// The per-thread random generator of the pick path.
#pragma once

#include <boost/random/taus88.hpp>

#include <random>

namespace rpclb::detail {

// `static`, not `inline`, on purpose: each translation unit (the library, each plugin) gets
// its own function and thread_local with internal linkage. An inline function's
// thread_local would become a GNU "unique" symbol, which keeps a plugin from ever being
// unloaded. taus88 keeps 12 bytes of state and is trivially destructible, so a thread's
// copy never pins a plugin either; one generator per thread means no lock and no shared
// cache line on the pick path.
static boost::random::taus88& thread_rng() {
    thread_local boost::random::taus88 rng = [] {
        std::random_device device;
        std::seed_seq seed{device(), device(), device(), device()};
        return boost::random::taus88(seed);
    }();
    return rng;
}

}  // namespace rpclb::detail
