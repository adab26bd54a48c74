// How the serving side counts the calls that balancers route to this node (internal).
#pragma once

#include <memory>
#include <string_view>

namespace rpclb::detail {

/// The balancers that route calls to this node, as the serving side sees them: a request a
/// balancer routed here runs only while this node is a live member of that balancer, and
/// the balancer's drain waits for it (doc/explanation/draining-and-retries.md).
/// Implemented by the routing part (BalancerRegistry); RpcServer holds it by reference.
///
/// Thread safety: both members may be called from any thread, concurrently.
class ServedBalancers {
public:
    /// Opaque: the balancer a served request counts on, kept until release().
    using Handle = std::shared_ptr<void>;

    virtual ~ServedBalancers() = default;
    /// Counts a request routed here by balancer `name` as served by it and returns the
    /// handle to release() when its answer is out; null (nothing counted) when this node
    /// is not a live member of `name` (never was, left, or drains): the request must then
    /// be refused with `draining`. Never throws.
    virtual Handle admit(std::string_view name) noexcept = 0;
    /// The request admit() returned `handle` for is answered (or dropped): its balancer
    /// counts it no more. `handle` is not null.
    virtual void release(const Handle& handle) noexcept = 0;
};

}  // namespace rpclb::detail
