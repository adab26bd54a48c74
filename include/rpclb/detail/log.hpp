// Internal loggers: one Boost.Log channel per component. Nothing is logged per call.
#pragma once

#include <boost/log/sources/record_ostream.hpp>
#include <boost/log/sources/severity_channel_logger.hpp>
#include <boost/log/trivial.hpp>

#include <string>

namespace rpclb::detail {

using Logger = boost::log::sources::severity_channel_logger_mt<boost::log::trivial::severity_level,
                                                               std::string>;

/// The logger of one component channel ("mesh", "rpc", ...). The first record that gets
/// this far installs rpclb's console sink on stderr unless rpclb::log::init() or
/// use_application_sinks() settled where records go (see <rpclb/log.hpp>). Thread-safe.
Logger& logger(const char* channel);

/// The least severity rpclb emits: `warning` until rpclb::log::init(), set_level() or
/// use_application_sinks() sets another, so an application that never sets logging up sees
/// no debug or info records.
boost::log::trivial::severity_level log_threshold() noexcept;

}  // namespace rpclb::detail

#define RPCLB_LOG(channel, level)                                                                     \
    for (bool rpclb_log_on_ = ::boost::log::trivial::level >= ::rpclb::detail::log_threshold(); rpclb_log_on_; \
         rpclb_log_on_ = false)                                                                        \
        BOOST_LOG_SEV(::rpclb::detail::logger(channel), ::boost::log::trivial::level)
