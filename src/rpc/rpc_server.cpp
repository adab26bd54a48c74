#include "rpc/rpc_server.hpp"

#include "json_fields.hpp"
#include "rpc/call_scope.hpp"
#include "telemetry/trace_state.hpp"

#include <rpclb/detail/deadline.hpp>
#include <rpclb/detail/log.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/post.hpp>
#include <boost/json/array.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace rpclb::detail {
namespace asio = boost::asio;

namespace {

std::string function_key(std::string_view module, std::string_view function) {
    std::string key;
    key.reserve(module.size() + function.size() + 1);
    key.append(module).push_back('.');
    key.append(function);
    return key;
}

// Makes sure an error names node, module and function without overwriting what the
// handler said.
void name_call(ErrorMessage& error, std::string_view node, std::string_view module, std::string_view function) {
    if (!error.details.contains("node")) error.details["node"] = node;
    if (!error.details.contains("module")) error.details["module"] = module;
    if (!error.details.contains("function")) error.details["function"] = function;
}

}  // namespace

RpcServer::RpcServer(RpcOptions options, asio::thread_pool& workers, ServedBalancers& balancers)
    : options_(std::move(options)),
      load_(options_.load ? options_.load : std::make_shared<LoadGauge>()),
      workers_(workers), balancers_(balancers), table_(std::make_shared<const Table>()) {}

void RpcServer::register_function(std::string module, std::string function, Handler handler,
                                  HandlerOptions handler_options) {
    if (auto problem = check(handler_options)) throw std::invalid_argument(problem->message());
    auto key = function_key(module, function);
    auto entry = std::make_shared<Entry>();
    entry->handler = std::move(handler);
    entry->options = handler_options;
    entry->name = key;
    std::lock_guard lock(edit_mutex_);
    auto table = std::make_shared<Table>(*table_.load());
    (*table)[std::move(key)] = std::move(entry);
    table_.store(std::move(table));
}

std::shared_ptr<const RpcServer::Entry> RpcServer::find(std::string_view module, std::string_view function) const {
    // The "module.function" key is built on the stack when it fits (no allocation per
    // served call); the table takes a string_view (heterogeneous lookup).
    char buffer[128];
    std::string heap;
    std::string_view key;
    if (const auto size = module.size() + function.size() + 1; size <= sizeof buffer) {
        auto* end = std::copy(module.begin(), module.end(), buffer);
        *end++ = '.';
        end = std::copy(function.begin(), function.end(), end);
        key = std::string_view(buffer, size);
    } else {
        heap = function_key(module, function);
        key = heap;
    }
    const auto table = table_.load();
    auto it = table->find(key);
    return it == table->end() ? nullptr : it->second;
}

CallResult RpcServer::run(const Entry* entry, std::string_view module, std::string_view function,
                          const boost::json::array& args, bool* threw, time_point deadline,
                          const Connection* connection, AbandonSignal* abandon,
                          const TraceContext* trace) const {
    if (!entry)
        return call_error(ErrorCode::not_found,
                          "function " + std::string(module) + "." + std::string(function) + " is not registered",
                          options_.node, module, function);
    const bool timed = entry->options.run_inline;
    const bool spanned = trace && trace->sampled() && options_.bus && options_.bus->active();
    const auto began = timed || spanned ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const auto wall_began = spanned ? std::chrono::system_clock::now() : std::chrono::system_clock::time_point{};
    CallResult result = [&]() -> CallResult {
        const CallScope scope(deadline, connection, abandon, trace);
        try {
            return entry->handler(args);
        } catch (const std::exception& e) {
            if (threw) *threw = true;
            return call_error(ErrorCode::internal_server_error, e.what(), options_.node, module, function);
        } catch (...) {
            if (threw) *threw = true;
            return call_error(ErrorCode::internal_server_error, "unknown exception", options_.node, module,
                              function);
        }
    }();
    if (timed) {
        const auto took = std::chrono::steady_clock::now() - began;
        if (took > entry->options.slow_threshold) {
            slow_inline_runs_.fetch_add(1);
            if (!entry->warned.exchange(true))
                RPCLB_LOG("rpc", warning)
                    << "inline handler " << entry->name << " ran for "
                    << std::chrono::duration_cast<std::chrono::microseconds>(took).count()
                    << " us, over its slow_threshold of " << entry->options.slow_threshold.count()
                    << " us: it holds up a network thread; register it without run_inline (logged once)";
        }
    }
    if (spanned) emit_server_span(*trace, module, function, result, began, wall_began);
    if (!result) {
        auto error = std::move(result).error();
        error.details.erase(draining_detail);  // reserved: would make the caller run it again
        error.reason = {};
        name_call(error, options_.node, module, function);
        return error;
    }
    return result;
}

void RpcServer::emit_server_span(const TraceContext& trace, std::string_view module, std::string_view function,
                                 const CallResult& result, std::chrono::steady_clock::time_point start,
                                 std::chrono::system_clock::time_point wall_start) const {
    const TraceText ids(trace.trace_id, trace.span_id, &trace.parent_span_id);
    Event e = trace_span_event(ids, "server", wall_start, start);
    e.node = options_.node;
    e.module = module;
    e.function = function;
    e.status = result ? std::string_view("ok") : to_string(result.error().code);
    options_.bus->emit(e);
}

CallResult RpcServer::run_handler(std::string_view module, std::string_view function, const boost::json::array& args,
                                  bool* threw, time_point deadline, const TraceContext* trace) const {
    const auto entry = find(module, function);
    return run(entry.get(), module, function, args, threw, deadline, nullptr, nullptr, trace);
}

void RpcServer::run_local(std::string module, std::string function, boost::json::array args, time_point deadline,
                          TraceContext trace, std::function<void(CallResult, bool)> done) {
    auto entry = find(module, function);
    if (runs_inline(entry.get())) {
        bool threw = false;
        auto result = run(entry.get(), module, function, args, &threw, deadline, nullptr, nullptr, &trace);
        return done(std::move(result), threw);
    }
    load_->queued();
    asio::post(workers_, [this, entry = std::move(entry), module = std::move(module), function = std::move(function),
                  args = std::move(args), deadline, trace = std::move(trace), done = std::move(done)] {
        load_->started();
        if (skip_abandoned()) {
            load_->finished();
            return done(call_failure(Failure::node_stopping, options_.node, module, function), false);
        }
        bool threw = false;
        auto result = run(entry.get(), module, function, args, &threw, deadline, nullptr, nullptr, &trace);
        load_->finished();
        done(std::move(result), threw);
    });
}

std::string RpcServer::answer(std::uint64_t id, CallResult result, std::string_view module,
                              std::string_view function, std::string buffer) const {
    // Written as it is, an answer holding NaN or infinity (its value, or its error's
    // details) would reach the caller as text no JSON parser reads.
    bool not_json = false;
    if (result) {
        not_json = !json_fields::all_finite(*result);
    } else {
        const auto error = result.error();  // a copy: error() returns by value
        not_json = !std::all_of(error.details.begin(), error.details.end(),
                                [](const auto& m) { return json_fields::all_finite(m.value()); });
    }
    if (not_json) {
        auto error = call_failure(Failure::not_json, options_.node, module, function);
        error.code = ErrorCode::internal_server_error;
        error.message = std::string("the handler's ") + (result ? "answer holds" : "error details hold") +
                        " a number JSON cannot carry (NaN or infinity)";
        result = std::move(error);
    }
    auto frame = wire::encode(wire::Response{id, std::move(result), load_->sample()}, std::move(buffer));
    if (frame.size() <= options_.max_message_size) return frame;
    return wire::encode(wire::Response{
        id, call_error(ErrorCode::internal_server_error,
                       "response of " + std::to_string(frame.size()) + " bytes exceeds the maximum message size of " +
                           std::to_string(options_.max_message_size),
                       options_.node, module, function)});
}

// A request or cast without a valid traceparent starts a trace here; a malformed one is
// counted, never refused (W3C Trace Context §3.2: restart the trace).
TraceContext RpcServer::handler_trace(wire::TraceRead read, const TraceParent& parent, std::string&& tracestate) {
    if (read == wire::TraceRead::valid) return TraceContext::child_of(parent, new_span_id(), std::move(tracestate));
    if (read == wire::TraceRead::malformed) bad_traceparents_.fetch_add(1, std::memory_order_relaxed);
    return new_trace(false);
}

RpcServer::Served RpcServer::admit(wire::Request&& request, std::shared_ptr<const Entry> entry) {
    // Constructed, not assigned: a moved json::array keeps its storage only when
    // constructed (assigned across storages, it is copied: a 64 KiB argument string each
    // call, as a profile of rpc_throughput showed).
    Served served{std::move(request)};
    auto& r = served.request;
    if (r.timeout_ms) served.deadline = deadline_after(std::chrono::steady_clock::now(), *r.timeout_ms);
    served.trace = handler_trace(r.trace_read, r.trace, std::move(r.tracestate));
    if (!r.load_balancer.empty()) {
        served.balancer = balancers_.admit(r.load_balancer);  // its drain waits for this call too
        if (!served.balancer) {
            // Routed here by a balancer this node has left or is draining: refuse it unrun,
            // so that the caller picks another member.
            served.refusal = wire::encode(
                wire::Response{r.id, draining_error(options_.node, r.module, r.function, r.load_balancer)});
            return served;
        }
    }
    served.before_stop = begin_serving();
    served.entry = entry ? std::move(entry) : find(r.module, r.function);
    return served;
}

CallResult RpcServer::run_unless_expired(const Served& served, const Connection* connection) {
    const auto& r = served.request;
    if (served.abandon && served.abandon->fired()) {
        expired_requests_.fetch_add(1, std::memory_order_relaxed);
        return call_error(ErrorCode::request_timeout, "not run: the caller cancelled it", options_.node, r.module,
                          r.function);
    }
    if (std::chrono::steady_clock::now() < served.deadline)
        return run(served.entry.get(), r.module, r.function, r.args, nullptr, served.deadline, connection,
                   served.abandon.get(), &served.trace);
    expired_requests_.fetch_add(1, std::memory_order_relaxed);
    return call_error(ErrorCode::request_timeout,
                      "not run: the caller's timeout of " + std::to_string(*r.timeout_ms) +
                          " ms passed while the request waited for a worker",
                      options_.node, r.module, r.function);
}

void RpcServer::finish(Served& served) {
    if (served.refusal) return;
    if (served.balancer) balancers_.release(served.balancer);
    end_serving(served.before_stop);
}

void RpcServer::serve_request(const std::shared_ptr<Connection>& c, wire::Request&& request) {
    auto served = admit(std::move(request));
    if (served.refusal) return c->send(std::move(*served.refusal));
    if (runs_inline(served.entry.get())) {
        // On the connection's strand: the answer is queued (or written) right here.
        const auto& r = served.request;
        auto result = run(served.entry.get(), r.module, r.function, r.args, nullptr, served.deadline, c.get(), nullptr,
                          &served.trace);
        c->send(answer(r.id, std::move(result), r.module, r.function, c->spare_buffer()));
        return finish(served);
    }
    c->answer_later();
    load_->queued();
    // Abandoned by a cancel (which comes only on a mesh link whose peer sends them) or by
    // the connection's close, which connection_closed() reports on this strand after this.
    served.abandon = std::make_shared<AbandonSignal>();
    {
        std::lock_guard lock(cancel_mutex_);
        cancellable_[CancelKey{c.get(), served.request.id}] = served.abandon;
    }
    asio::post(workers_, [this, c, served = std::move(served)]() mutable {
        load_->started();
        // A request whose connection closed while it waited is not run: its caller's call
        // failed when the connection dropped, and its answer could go nowhere. Running it
        // would only hold up the requests queued behind it (a killed caller's backlog made
        // a newcomer's fresh call wait seconds). Counted as expired, like one whose
        // caller's timeout passed.
        const bool orphaned = c->closed();
        if (orphaned) expired_requests_.fetch_add(1, std::memory_order_relaxed);
        if (!orphaned && !skip_abandoned()) {
            const auto& r = served.request;
            auto result = run_unless_expired(served, c.get());
            load_->finished();  // the answer's load does not count the run it answers
            c->answer(answer(r.id, std::move(result), r.module, r.function, c->spare_buffer()));
        } else {
            load_->finished();
            c->forgo_answer();
        }
        {
            std::lock_guard lock(cancel_mutex_);
            cancellable_.erase(CancelKey{c.get(), served.request.id});
        }
        finish(served);  // after its answer is queued (a drain waits for it)
    });
}

// The hooks run with no lock of this server held: they complete calls, whose completions
// may run user code.
void RpcServer::cancel_request(const Connection& connection, std::uint64_t id) {
    std::shared_ptr<AbandonSignal> abandon;
    {
        std::lock_guard lock(cancel_mutex_);
        if (auto it = cancellable_.find(CancelKey{&connection, id}); it != cancellable_.end()) abandon = it->second;
    }
    if (abandon) abandon->fire();
}

void RpcServer::connection_closed(const Connection& connection) {
    std::vector<std::shared_ptr<AbandonSignal>> abandoned;
    {
        std::lock_guard lock(cancel_mutex_);
        for (const auto& [key, abandon] : cancellable_)
            if (key.connection == &connection) abandoned.push_back(abandon);
    }
    for (const auto& abandon : abandoned) abandon->fire();
}

void RpcServer::serve_cast(wire::Cast&& cast) {
    const bool before_stop = begin_serving();
    auto entry = find(cast.module, cast.function);
    const bool here = runs_inline(entry.get());
    auto trace = handler_trace(cast.trace_read, cast.trace, std::move(cast.tracestate));
    auto run_cast = [this, here, before_stop, entry = std::move(entry), cast = std::move(cast), trace = std::move(trace)] {
        if (!here) load_->started();
        if (!skip_abandoned()) {
            auto result = run(entry.get(), cast.module, cast.function, cast.args, nullptr, time_point::max(), nullptr,
                              nullptr, &trace);
            if (!result)
                RPCLB_LOG("rpc", debug) << "cast " << cast.module << "." << cast.function
                                        << " failed: " << result.error().message;
        }
        if (!here) load_->finished();
        end_serving(before_stop);
    };
    if (here) return run_cast();
    load_->queued();
    asio::post(workers_, std::move(run_cast));
}

std::int64_t RpcServer::abandon_queued() noexcept {
    abandoned_.store(true);
    return serving_.load();
}

bool RpcServer::skip_abandoned() const noexcept { return abandoned_.load(std::memory_order_relaxed); }

bool RpcServer::begin_serving() noexcept {
    serving_.fetch_add(1);
    if (stop_marked_.load()) return false;
    serving_before_stop_.fetch_add(1);
    return true;
}

void RpcServer::end_serving(bool before_stop) {
    const bool earlier_done = before_stop && serving_before_stop_.fetch_sub(1) == 1;
    if (serving_.fetch_sub(1) == 1 || earlier_done) idle_.wake();
}

bool RpcServer::wait_idle(std::chrono::steady_clock::time_point deadline) {
    return idle_.wait_until(deadline, [this] { return serving_.load() <= 0; });
}

bool RpcServer::wait_served_before_stop(std::chrono::steady_clock::time_point deadline) {
    return idle_.wait_until(deadline, [this] { return serving_before_stop_.load() <= 0; });
}

}  // namespace rpclb::detail
