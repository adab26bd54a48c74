// A plugin built "against a future rpclb": its handshake reports ABI version 99, so the
// loader must refuse it before calling its factory. Written by hand because
// RPCLB_PLUGIN always exports the right version.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

class Never final : public rpclb::SelectionAlgorithm {
public:
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&,
                                                 const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

const rpclb::PluginInfo* info() {
    static const rpclb::PluginInfo i{99, "bad_abi", "9.9.9", RPCLB_COMPILER_ID};
    return &i;
}

// Reaching the factory would mean the loader skipped the check.
std::unique_ptr<rpclb::SelectionAlgorithm> create() {
    throw std::logic_error("bad_abi factory called despite the ABI mismatch");
}

}  // namespace

BOOST_DLL_ALIAS(info, rpclb_plugin_info)
BOOST_DLL_ALIAS(create, rpclb_create_algorithm)
