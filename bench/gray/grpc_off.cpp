// The gRPC side when the bench is built without gRPC (RPCLB_BUILD_GRAY_BENCH off): the
// rpclb stacks run alone (as with --no-grpc).
#include "members.hpp"

#include "../support/harness.hpp"

namespace gray {

bool grpc_built() { return false; }

int run_grpc_member(const std::string&) {
    bench::die("built without gRPC (configure with -DRPCLB_BUILD_GRAY_BENCH=ON)");
}

std::unique_ptr<Target> make_grpc_target(const std::vector<std::pair<int, unsigned short>>&) {
    bench::die("built without gRPC (configure with -DRPCLB_BUILD_GRAY_BENCH=ON)");
}

}  // namespace gray
