#include <rpclb/selection_algorithm.hpp>

#include <rpclb/detail/log.hpp>
#include <rpclb/plugin_log.hpp>

#include <rpclb/detail/thread_rng.hpp>

#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace rpclb {
namespace {

using detail::thread_rng;

}  // namespace

void plugin_log(std::string_view channel, LogSeverity severity, std::string_view message) noexcept {
    try {
        const std::string name(channel);
        switch (severity) {
            case LogSeverity::trace: RPCLB_LOG(name.c_str(), trace) << message; break;
            case LogSeverity::debug: RPCLB_LOG(name.c_str(), debug) << message; break;
            case LogSeverity::info: RPCLB_LOG(name.c_str(), info) << message; break;
            case LogSeverity::warning: RPCLB_LOG(name.c_str(), warning) << message; break;
            case LogSeverity::error: RPCLB_LOG(name.c_str(), error) << message; break;
            case LogSeverity::fatal: RPCLB_LOG(name.c_str(), fatal) << message; break;
        }
    } catch (...) {
        // Logging failed; the plugin must not see it.
    }
}

void* hold_code_at(const void* address) noexcept {
    Dl_info info{};
    if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return nullptr;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

void release_code(void* held) noexcept {
    if (held) dlclose(held);
}

std::uint64_t new_snapshot_owner() noexcept {
    static std::atomic<std::uint64_t> owners{0};
    return owners.fetch_add(1, std::memory_order_relaxed) + 1;
}

ErrorMessage state_build_error(std::string_view balancer) {
    return ErrorMessage{ErrorCode::internal_server_error, "out of memory building the member table",
                        boost::json::object{{"load_balancer", balancer}}};
}

ErrorMessage empty_members_error(std::string_view balancer) {
    return ErrorMessage{ErrorCode::service_unavailable, "no members registered",
                        boost::json::object{{"load_balancer", balancer}}, make_error_code(Failure::no_members)};
}

void reject_unknown_options(const boost::json::object& options, std::string_view algorithm,
                            std::initializer_list<std::string_view> known) {
    for (const auto& option : options) {
        const std::string_view key = option.key();
        if (std::find(known.begin(), known.end(), key) != known.end()) continue;
        std::string message(algorithm);
        message.append(": unknown option \"").append(key).append("\" (");
        if (known.size() == 0) {
            message.append("takes no options");
        } else {
            message.append("known: ");
            for (auto it = known.begin(); it != known.end(); ++it) {
                if (it != known.begin()) message.append(", ");
                message.append(*it);
            }
        }
        throw std::invalid_argument(message.append(")"));
    }
}

// The predecessor's default (predecessor-compatibility §1.10): shuffle, then take `count`. A partial
// Fisher–Yates shuffle of the indices draws the same distribution with `count` draws.
// The default doesn't know its balancer's name, so an empty list names none.
Result<std::vector<std::size_t>> SelectionAlgorithm::choose_nodes(const MemberSnapshot& members,
                                                                  std::size_t count,
                                                                  const PickOptions& options) {
    (void)options;
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error("");
    const std::size_t take = std::min(count, size);

    std::vector<std::size_t> indices(size);
    std::iota(indices.begin(), indices.end(), std::size_t{0});
    auto& rng = thread_rng();
    for (std::size_t i = 0; i < take; ++i) {
        boost::random::uniform_int_distribution<std::size_t> pick(i, size - 1);
        std::swap(indices[i], indices[pick(rng)]);
    }
    indices.resize(take);
    return indices;
}

}  // namespace rpclb
