#include <rpclb/detail/log.hpp>
#include <rpclb/log.hpp>

#include "telemetry/trace_state.hpp"

#include <boost/core/null_deleter.hpp>
#include <boost/log/attributes/function.hpp>
#include <boost/log/attributes/value_extraction.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/sync_frontend.hpp>
#include <boost/log/sinks/text_ostream_backend.hpp>
#include <boost/log/support/date_time.hpp>
#include <boost/log/utility/setup/common_attributes.hpp>

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace rpclb {
namespace {

namespace bl = boost::log;
using severity = bl::trivial::severity_level;

BOOST_LOG_ATTRIBUTE_KEYWORD(channel_attr, "Channel", std::string)
BOOST_LOG_ATTRIBUTE_KEYWORD(severity_attr, "Severity", severity)
BOOST_LOG_ATTRIBUTE_KEYWORD(trace_attr, "Trace", std::string)

// "Trace": the trace context of the thread that logs, as " trace_id=<32 hex> span_id=<16
// hex>", or empty outside a call's handler and any TraceScope. A global attribute, so the
// application's own records from a handler carry it too, on its sinks as on rpclb's.
void add_trace_attribute() {
    bl::core::get()->add_global_attribute("Trace", bl::attributes::make_function([]() -> std::string {
        const auto* t = detail::innermost_trace();
        if (!t) return {};
        return " trace_id=" + to_hex(t->trace_id) + " span_id=" + to_hex(t->span_id);
    }));
}

severity parse_level(std::string_view level) {
    static const std::map<std::string_view, severity> levels{
        {"trace", severity::trace}, {"debug", severity::debug},     {"info", severity::info},
        {"warning", severity::warning}, {"error", severity::error}, {"fatal", severity::fatal}};
    auto it = levels.find(level);
    if (it == levels.end())
        throw std::invalid_argument("unknown log level \"" + std::string(level) +
                                    "\" (expected trace, debug, info, warning, error or fatal)");
    return it->second;
}

std::atomic<severity> threshold{severity::warning};

// Where records go is settled once rpclb's console sink is installed (log::init(), or the
// first record), or the application keeps its own sinks (log::use_application_sinks()):
// until then Boost.Log would hand records to its default sink, which prints on stdout.
std::mutex init_mutex;
boost::shared_ptr<bl::sinks::sink> console;  // rpclb's sink on stderr; under init_mutex
std::atomic<bool> settled{false};

// Installs the console sink unless it is there (init_mutex held).
void install_console() {
    if (console) return;
    bl::add_common_attributes();
    add_trace_attribute();
    using backend_t = bl::sinks::text_ostream_backend;
    auto backend = boost::make_shared<backend_t>();
    backend->add_stream(boost::shared_ptr<std::ostream>(&std::clog, boost::null_deleter()));
    backend->auto_flush(true);
    auto sink = boost::make_shared<bl::sinks::synchronous_sink<backend_t>>(backend);
    sink->set_formatter(bl::expressions::stream
                        << bl::expressions::format_date_time<boost::posix_time::ptime>("TimeStamp",
                                                                                       "%Y-%m-%d %H:%M:%S.%f")
                        << " " << severity_attr << " [" << channel_attr << "] " << bl::expressions::smessage
                        << trace_attr);
    bl::core::get()->add_sink(sink);
    console = sink;
}

}  // namespace

namespace detail {

Logger& logger(const char* channel) {
    // Called for each record that passes the threshold, before Boost.Log routes it.
    if (!settled.load(std::memory_order_acquire)) {
        std::lock_guard lock(init_mutex);
        if (!settled.load(std::memory_order_relaxed)) {
            install_console();
            settled.store(true, std::memory_order_release);
        }
    }
    // One logger per channel name; channels are a handful of literals.
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<Logger>, std::less<>> loggers;
    std::lock_guard lock(mutex);
    auto it = loggers.find(std::string_view(channel));
    if (it == loggers.end())
        it = loggers.emplace(channel, std::make_unique<Logger>(bl::keywords::channel = std::string(channel)))
                 .first;
    return *it->second;
}

severity log_threshold() noexcept { return threshold.load(std::memory_order_relaxed); }

}  // namespace detail

namespace log {

void set_level(std::string_view level) {
    const auto min = parse_level(level);
    threshold.store(min, std::memory_order_relaxed);
    bl::core::get()->set_filter(severity_attr >= min);
}

void init(std::string_view level) {
    const auto min = parse_level(level);
    std::lock_guard lock(init_mutex);
    install_console();
    settled.store(true, std::memory_order_release);
    threshold.store(min, std::memory_order_relaxed);
    bl::core::get()->set_filter(severity_attr >= min);
}

void use_application_sinks(std::string_view level) {
    const auto min = parse_level(level);
    std::lock_guard lock(init_mutex);
    if (console) {
        bl::core::get()->remove_sink(console);
        console.reset();
    }
    add_trace_attribute();
    settled.store(true, std::memory_order_release);
    threshold.store(min, std::memory_order_relaxed);
}

}  // namespace log
}  // namespace rpclb
