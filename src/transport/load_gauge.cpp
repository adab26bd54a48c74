#include "transport/load_gauge.hpp"

#include <rpclb/detail/log.hpp>

namespace rpclb::detail {

void note_load(NodeLoad& record, const std::optional<wire::Load>& load, std::string_view problem,
               std::string_view node) {
    if (load) return record.store(load->busy_permille, load->queue, load->application, load_clock_ms());
    if (problem.empty()) return;
    record.forget();
    if (!record.warned.exchange(true))
        RPCLB_LOG("mesh", warning) << node << " reported its load malformed (" << problem
                                   << "): its load counts as unknown until it reports a good one (logged once)";
}

}  // namespace rpclb::detail
