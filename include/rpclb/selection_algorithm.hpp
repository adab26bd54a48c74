// The selection-algorithm plugin contract (the predecessor's SelectionAlgorithm behaviour).
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/member_snapshot.hpp>
#include <rpclb/pick_options.hpp>
#include <rpclb/service.hpp>
#include <rpclb/version.hpp>

#include <boost/config.hpp>
#include <boost/json/object.hpp>

#include <atomic>
#include <chrono>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

class AlgorithmHost;


/// Where a call's error arose.
enum class ErrorOrigin : std::uint8_t {
    none,    ///< the call succeeded, the member refused it while draining, or the caller
             ///< cancelled it (nobody's failure)
    local,   ///< on this node or on the way: no connection, the deadline passed
    remote,  ///< at the member: it answered with an error
};

/// How a picked call ended, as its release tells the algorithm that picked it.
struct CallOutcome {
    /// The call's error code; nullopt when it succeeded (or when nobody said: see `known`).
    std::optional<ErrorCode> error;
    ErrorOrigin origin = ErrorOrigin::none;
    /// From the pick to the end of the call; nullopt when the caller did not say
    /// (LoadBalancer::release_node by name).
    std::optional<std::chrono::nanoseconds> latency;

    bool ok() const noexcept { return !error; }
};

/// What a balancer tells its algorithm at `init`.
struct AlgorithmContext {
    std::string balancer;    ///< balancer name, e.g. "workers"
    std::string local_node;  ///< this node's name, `short@host`
    /// What the algorithm may use of the node: its group's members, calls to them, an
    /// executor for timers, serving a function, telemetry (rpclb/algorithm_host.hpp).
    /// Valid until the balancer is destroyed, which is after the algorithm's services have
    /// stopped. Null when the algorithm runs outside a node (unit tests), and for a
    /// plugin that does not declare capability::host; an algorithm that needs it throws
    /// std::invalid_argument from `init` or std::logic_error from a service's start().
    AlgorithmHost* host = nullptr;
};

/// A load-balancing algorithm. One instance serves one balancer on one node.
///
/// Implementations live in plugins (`librpclb_<name>.so`) and are exported with
/// RPCLB_PLUGIN (plugins/round_robin is a small model to copy), which puts a C boundary
/// between the class and rpclb.
///
/// Threading: `init` runs once, before any other hook. `choose_from_nodes`,
/// `choose_nodes` and `release` may run concurrently from many threads and with
/// `on_node_change`; they must not block, lock a lock shared between threads, allocate
/// or log. Hooks other than `init` must not throw; rpclb catches what escapes anyway: a
/// pick fails with `internal_server_error`, an exception from `on_node_change` or
/// `release` is logged, one from `init`, `services`, `local` (asked once, at start)
/// or a service's `start` fails the balancer's start with a message naming the hook.
class BOOST_SYMBOL_VISIBLE SelectionAlgorithm {
public:
    virtual ~SelectionAlgorithm() = default;

    /// Configures the algorithm from `algorithm_opts` (a JSON object, possibly empty).
    /// Throws std::invalid_argument with a message naming the bad option; the
    /// balancer's start then fails with that message.
    virtual void init(const AlgorithmContext& context, const boost::json::object& options) {
        (void)context;
        (void)options;
    }

    /// Picks one member. Returns the index of the chosen node in `members.nodes`, or an
    /// ErrorMessage (`service_unavailable`) when `members.nodes` is empty. Required.
    virtual Result<std::size_t> choose_from_nodes(const MemberSnapshot& members,
                                                  const PickOptions& options) = 0;

    /// Picks up to `count` distinct members, best first. The default is a random sample.
    /// Returns indices into `members.nodes`; `min(count, size)` of them.
    virtual Result<std::vector<std::size_t>> choose_nodes(const MemberSnapshot& members,
                                                          std::size_t count,
                                                          const PickOptions& options);

    /// Membership of the balancer's group changed: `nodes` joined or left.
    virtual void on_node_change(NodeChange change, std::span<const std::string> nodes) {
        (void)change;
        (void)nodes;
    }

    /// A pick of `members.nodes[index]` from this instance has ended: the call it routed
    /// finished with `outcome` (or the caller that picked gave it back without one).
    /// Exactly one release follows each successful choose_from_nodes() that a balancer
    /// made; `members` is the snapshot picked from (its in_flight() already counts the
    /// call off). The default does nothing.
    virtual void release(const MemberSnapshot& members, std::size_t index, const CallOutcome& outcome) {
        (void)members;
        (void)index;
        (void)outcome;
    }

    /// True when load-balanced calls should run on the calling node without selection
    /// (the predecessor's CallDirect `local?`). Asked once, when the balancer starts; the answer
    /// holds for the balancer's life.
    virtual bool local() const { return false; }

    /// Services the algorithm wants started before its balancer joins and stopped after
    /// it has drained (the predecessor's `child_specs`). Called once, after `init`; of a
    /// plugin only when it declares capability::services.
    virtual std::vector<std::shared_ptr<Service>> services() { return {}; }

    /// What this instance passes to MemberSnapshot::state: a number no other instance has.
    std::uint64_t snapshot_owner() const noexcept { return snapshot_owner_; }

private:
    const std::uint64_t snapshot_owner_ = new_snapshot_owner();
};

/// The error a pick returns when the state it derives from a snapshot could not be built
/// (memory ran out): `internal_server_error` naming the balancer.
ErrorMessage state_build_error(std::string_view balancer);

/// The error every algorithm returns for an empty member list (predecessor-compatibility §10.6).
ErrorMessage empty_members_error(std::string_view balancer);

/// For `init`: throws std::invalid_argument `<algorithm>: unknown option "<key>" (known:
/// <known, comma-separated>)`, or `(takes no options)`, for the first key of `options` not
/// in `known`. An option the algorithm doesn't read is most likely misspelt, so the
/// balancer's start fails with this message rather than running with the default.
void reject_unknown_options(const boost::json::object& options, std::string_view algorithm,
                            std::initializer_list<std::string_view> known = {});

/// What a plugin uses of the contract beyond its base (choose_from_nodes, init,
/// on_node_change, local, options): a plugin declares them as `static constexpr
/// std::uint64_t capabilities` of its class (RPCLB_PLUGIN reads it; absent = none), and
/// the loader refuses a plugin that uses one this library does not offer, naming it. A
/// later library offers every capability of the same contract version, so a plugin keeps
/// loading until the contract itself changes (doc/how-to/write-a-plugin.md, "Versions").
namespace capability {
inline constexpr std::uint64_t feedback = 1u << 0;        ///< reads CallOutcome in release()
inline constexpr std::uint64_t snapshot_state = 1u << 1;  ///< MemberSnapshot::state()
inline constexpr std::uint64_t in_flight = 1u << 2;       ///< MemberSnapshot::in_flight()
inline constexpr std::uint64_t host = 1u << 3;            ///< AlgorithmContext::host
inline constexpr std::uint64_t services = 1u << 4;        ///< services()
inline constexpr std::uint64_t choose_many = 1u << 5;     ///< its own choose_nodes()
inline constexpr std::uint64_t reported_load = 1u << 6;   ///< NodeLoads (rpclb/reported_load.hpp)
/// Every capability this library offers.
inline constexpr std::uint64_t all =
    feedback | snapshot_state | in_flight | host | services | choose_many | reported_load;
}  // namespace capability

/// The capabilities `T` declares (`T::capabilities`), else 0.
template <class T>
constexpr std::uint64_t capabilities_of() noexcept {
    if constexpr (requires { T::capabilities; })
        return T::capabilities;
    else
        return 0;
}

/// The compiler/standard-library identity a plugin reports; the loader compares the
/// standard library only for capability::host and capability::services, which pass C++
/// objects.
#define RPCLB_COMPILER_ID BOOST_COMPILER " / " BOOST_STDLIB

}  // namespace rpclb

#include <rpclb/detail/plugin_glue.hpp>

/// Exports a plugin: `RPCLB_PLUGIN(round_robin, rpclb::plugins::RoundRobin)` in exactly
/// one source of the plugin's shared object. Generates the C side of the boundary
/// (rpclb/plugin_abi.h): a table of C functions that create `TYPE` and call its hooks,
/// with the contract version, the rpclb version, the compiler and `TYPE::capabilities`,
/// and the C function `rpclb_plugin` that returns it. Only C data crosses: an error or an
/// exception of a hook comes back as its code and message.
#define RPCLB_PLUGIN(NAME, TYPE)                                                          \
    namespace rpclb_plugin_##NAME {                                                       \
    constexpr rpclb_plugin_table table = ::rpclb::detail::PluginGlue<TYPE>::table(#NAME); \
    }                                                                                     \
    extern "C" BOOST_SYMBOL_EXPORT const rpclb_plugin_table* rpclb_plugin(void) {         \
        return &rpclb_plugin_##NAME::table;                                               \
    }
