// Steady call load through a balancer from several threads, for tests that change the
// cluster under load (rolling restart, drain) and then check that no call failed.
#pragma once

#include <rpclb/cluster.hpp>
#include <rpclb/error.hpp>

#include <boost/json/serialize.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rpclb::test {

/// `threads` threads call `call(client, thread index, options)` in a loop, with
/// `options.load_balancer` = `balancer` and a 10 s timeout, until finish() (or the
/// destructor). A successful call must return the serving node's name (as demo.node and
/// demo.sleep do); it is counted per node. Every error is kept as "message details".
class CallLoad {
public:
    using Call = std::function<CallResult(Cluster&, int thread, const CallOptions&)>;

    CallLoad(Cluster& client, std::string balancer, int threads, Call call) {
        for (int i = 0; i < threads; ++i)
            threads_.emplace_back([this, &client, balancer, call, i] {
                CallOptions options;
                options.load_balancer = balancer;
                options.timeout = std::chrono::seconds(10);
                while (!stop_) {
                    auto r = call(client, i, options);
                    std::lock_guard lock(mutex_);
                    if (r)
                        ++served_[std::string(r->as_string())];
                    else
                        errors_.push_back(r.error().message + " " + boost::json::serialize(r.error().details));
                }
            });
    }
    ~CallLoad() { finish(); }

    CallLoad(const CallLoad&) = delete;
    CallLoad& operator=(const CallLoad&) = delete;

    void finish() {
        stop_ = true;
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    std::size_t served_by(const std::string& node) {
        std::lock_guard lock(mutex_);
        return served_[node];
    }

    /// Calls completed so far, served or failed.
    std::size_t total() {
        std::lock_guard lock(mutex_);
        std::size_t n = errors_.size();
        for (const auto& [node, count] : served_) n += count;
        return n;
    }

    std::vector<std::string> errors() {
        std::lock_guard lock(mutex_);
        return errors_;
    }

private:
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::map<std::string, std::size_t> served_;
    std::vector<std::string> errors_;
    std::vector<std::thread> threads_;
};

}  // namespace rpclb::test
