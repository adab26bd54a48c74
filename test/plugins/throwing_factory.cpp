// A plugin whose algorithm's constructor throws: the loader must turn the exception into
// an error that carries its text, and nothing may escape to the caller.
#include <rpclb/selection_algorithm.hpp>

#include <stdexcept>

namespace {

class Throwing final : public rpclb::SelectionAlgorithm {
public:
    Throwing() { throw std::runtime_error("throwing_factory refuses to build an algorithm"); }
    rpclb::Result<std::size_t> choose_from_nodes(const rpclb::MemberSnapshot&, const rpclb::PickOptions&) override {
        return std::size_t{0};
    }
};

}  // namespace

RPCLB_PLUGIN(throwing_factory, Throwing)
