// Log records of the running process, for tests that check what a node logged.
#pragma once

#include <boost/log/core.hpp>
#include <boost/log/expressions/message.hpp>
#include <boost/log/sinks/basic_sink_backend.hpp>
#include <boost/log/sinks/unlocked_frontend.hpp>
#include <boost/smart_ptr/make_shared_object.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace rpclb::test {

/// Every message logged while it lives (Boost.Log is process-wide: rpclb's records too).
class LogCapture {
public:
    LogCapture() : backend_(boost::make_shared<Backend>()) {
        sink_ = boost::make_shared<boost::log::sinks::unlocked_sink<Backend>>(backend_);
        boost::log::core::get()->add_sink(sink_);
    }
    ~LogCapture() { boost::log::core::get()->remove_sink(sink_); }
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;

    /// How many messages logged so far contain `text`.
    std::size_t count(const std::string& text) const {
        std::lock_guard lock(backend_->mutex);
        std::size_t n = 0;
        for (const auto& m : backend_->messages) n += m.find(text) != std::string::npos;
        return n;
    }

private:
    struct Backend : boost::log::sinks::basic_sink_backend<boost::log::sinks::concurrent_feeding> {
        void consume(const boost::log::record_view& record) {
            const auto message = record[boost::log::expressions::smessage];
            std::lock_guard lock(mutex);
            messages.push_back(message ? *message : std::string());
        }
        mutable std::mutex mutex;
        std::vector<std::string> messages;
    };
    boost::shared_ptr<Backend> backend_;
    boost::shared_ptr<boost::log::sinks::unlocked_sink<Backend>> sink_;
};

}  // namespace rpclb::test
