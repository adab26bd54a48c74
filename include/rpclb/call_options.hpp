// Options of one call or cast.
#pragma once

#include <rpclb/retry.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace rpclb {

/// Hedging of one call through a balancer ("The Tail at Scale"'s hedged requests, brpc's
/// backup requests): when no answer came within `delay`, another attempt goes to another
/// member the balancer picks, up to `max_attempts` in flight; the first answer wins and
/// the others are released as cancelled (no failure of their members). Every extra
/// attempt takes a token of the balancer's budget (LoadBalancer::hedge_budget), and
/// none is sent when the budget is spent. Plain data; checked when the call starts.
struct Hedging {
    /// How long an attempt has to answer before the next is sent: 1 ms to the call's
    /// timeout, or 0 (the default): the p95 of the latencies of the balancer's recent
    /// successful calls from this node (LoadBalancer::recent_p95), 10 ms until 20 are known.
    std::chrono::milliseconds delay{0};
    /// Most attempts in flight at once, the first included: 2 to 5. A balancer with fewer
    /// members gets one attempt per member (a single member: no hedge).
    int max_attempts = 2;
};

/// Options of one call (predecessor-compatibility §1.4).
struct CallOptions {
    /// Deadline of the whole call, from when it is made: the waits for a member
    /// (`retry_count` × `retry_sleep`), re-routes after `draining` and the request, which
    /// carries what is left to the serving node. Default 10 s. Run out while waiting for a
    /// member: `request_timeout` (Failure::timeout), "timeout while waiting for a member: "
    /// and the balancer's error (the predecessor counted only the request). Range 1 ms to
    /// 4294967295 ms (erpc's, without its 0); a timeout outside it fails at once with
    /// `bad_request` ("timeout must be 1 to 4294967295 ms; got N ms", naming node, module
    /// and function), on every path: nothing is picked, sent or run. Casts ignore it.
    /// Made from a handler, the call ends by that handler's call's deadline if it is
    /// earlier (rpclb::call_deadline()), and, cancelled, when that call's caller gives up
    /// on it first (rpclb::call_cancelled()).
    /// Retries and their waits: doc/explanation/draining-and-retries.md.
    std::chrono::milliseconds timeout{10000};
    /// Route through this balancer; empty = call the given node directly.
    std::string load_balancer;
    /// Routing key forwarded to the balancer's algorithm.
    std::optional<std::string> key;
    /// When set, receives the name of the node the call was sent to (after the balancer's
    /// pick), like gRPC's `ClientContext::peer()`. Must stay valid until the call completes;
    /// written before completion, from the thread that routes the call. The older form:
    /// the typed calls of <rpclb/typed.hpp> return the node with the value (`Reply<T>`),
    /// with nothing for the caller to keep alive.
    std::string* peer = nullptr;
    /// Run load-balanced calls and the random-node helpers on this node, with no
    /// selection, retry or draining (predecessor-compatibility §4.4). Unset:
    /// ClusterOptions::call_directly.
    std::optional<bool> call_directly;
    /// Retry when no member / no node matches (predecessor-compatibility §4.1). Unset:
    /// ClusterOptions::retry.
    std::optional<bool> retry;
    /// Retries after the first attempt (total attempts = count + 1), or
    /// `unlimited_retries`. Unset: ClusterOptions::retry_count.
    std::optional<std::size_t> retry_count;
    /// Wait between attempts. Default 5 s, as in the predecessor; per call only.
    std::chrono::milliseconds retry_sleep{5000};
    /// For async_call() and async_call_on_random_node(): run the completion handler on
    /// the network thread that completes the call (the one that read the answer, or whose
    /// deadline timer fired, or that saw the connection drop) instead of handing it to the
    /// worker pool: no thread hand-off on the calling side, the client-side twin of
    /// HandlerOptions::run_inline (gRPC's callback API runs its reactions on its own
    /// threads the same way). Applies only to a handler with no executor of its own (an
    /// associated executor is always used) and no cancellation slot (whose signal is
    /// emitted on the pool), and only to completions that happen on a network thread: a
    /// call that completes inside async_call() (one that fails at once) or on another
    /// thread is handed to the worker pool as usual, so a handler that starts the next
    /// call never recurses. It may start further async calls. The handler must not block:
    /// while it runs, no other frame of that connection (nor, with one network thread, of
    /// any connection) is read; a blocking call() from it fails at once with
    /// `internal_server_error` "blocking call from a network thread would deadlock", as
    /// from an inline handler. It must not throw (an exception ends the process through
    /// std::terminate) and must not call stop(). Ignored by blocking calls. Default false.
    bool run_completion_inline = false;
    /// The function may run more than once for this call without harm: only then may the
    /// call be hedged, or, through a balancer, sent again after its link was lost once the
    /// request had left (within the balancer's budget, as hedges). Default false.
    bool idempotent = false;
    /// Hedge this call (a call, with `load_balancer` and `idempotent` only; otherwise it
    /// fails at once with `bad_request` naming the option, also when `call_directly` runs
    /// it here in one attempt). Unset: one attempt at a time.
    std::optional<Hedging> hedging;
};

}  // namespace rpclb
