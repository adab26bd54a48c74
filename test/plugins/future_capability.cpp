// A plugin that uses a capability this rpclb does not offer (bit 40): the loader must
// refuse it, naming the bits, before calling its factory.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

class FutureCapability final : public rpclb::SelectionAlgorithm {
public:
    static constexpr std::uint64_t capabilities = std::uint64_t{1} << 40;

    FutureCapability() { throw std::logic_error("future_capability factory called despite the capability check"); }

    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&, const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

}  // namespace

RPCLB_PLUGIN(future_capability, FutureCapability)
