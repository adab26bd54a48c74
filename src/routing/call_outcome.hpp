// How a routed call ended, as the release of its pick tells the algorithm (internal).
#pragma once

#include <rpclb/error.hpp>
#include <rpclb/selection_algorithm.hpp>

namespace rpclb::detail {

// How a call ended, for the release of its pick: an error rpclb itself recorded a reason
// for (no connection, timeout, cancelled, ...) arose here or on the way; one without (the
// handler's own error, or one decoded from the member's reply) arose at the member.
inline CallOutcome outcome_of(const CallResult& result) {
    CallOutcome outcome;
    if (result) return outcome;
    const auto& error = result.error();
    outcome.error = error.code;
    // A `draining` refusal is the member leaving gracefully, a cancellation the caller's
    // choice: neither is the member's failure.
    outcome.origin = error.is(Failure::draining) || error.is(Failure::cancelled) ? ErrorOrigin::none
                     : error.reason                ? ErrorOrigin::local
                                                   : ErrorOrigin::remote;
    return outcome;
}

}  // namespace rpclb::detail
