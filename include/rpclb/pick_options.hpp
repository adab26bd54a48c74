// Options of one pick of a balancer's member.
#pragma once

#include <optional>
#include <string_view>

namespace rpclb {

/// Per-pick options (the predecessor forwards `key` to the algorithm).
struct PickOptions {
    /// Routing key; algorithms that don't hash ignore it. Empty optional = no key.
    std::optional<std::string_view> key;
};

}  // namespace rpclb
