// An inventory frontend: a client node that waits until the "inventory" balancer has its
// workers, then reserves one unit of SKUs in turn, each routed by its SKU (hash_ring), first
// with blocking calls and then from coroutines. Prints a JSON summary like rpclb-call's:
// {"calls", "ok", "errors", "per_node", "error_messages"}.
//
//   inventory-frontend SEED WORKERS CALLS
//
// The cookie comes from $RPCLB_COOKIE; the node names itself (client-<hex>@<host>). Exits
// 0 when every call came back, served or with a reported error, and some were served; 1
// otherwise; 2 on bad usage.
#include <rpclb/cluster.hpp>
#include <rpclb/log.hpp>
#include <rpclb/typed.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <charconv>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr int sku_count = 64;
constexpr auto pace = 1ms;  // between two calls of one caller: a steady load, not a flood

std::string sku_of(int i) { return "sku-" + std::to_string(i % sku_count); }

// What the calls came back with; shared by the callers.
class Tally {
public:
    void add(const rpclb::Result<rpclb::Reply<int>>& r) {
        std::lock_guard lock(mutex_);
        ++calls_;
        if (r) {
            ++ok_;
            ++per_node_[r->node];
        } else {
            ++errors_[r.error().message];
        }
    }
    // {"calls", "ok", "errors", "per_node", "error_messages"}; `complete` when every call
    // came back and some were served.
    std::string summary(int expected, bool& complete) const {
        std::lock_guard lock(mutex_);
        boost::json::object per_node, messages;
        for (const auto& [node, n] : per_node_) per_node[node] = n;
        int errors = 0;
        for (const auto& [message, n] : errors_) {
            messages[message] = n;
            errors += n;
        }
        complete = calls_ == expected && ok_ + errors == calls_ && ok_ > 0;
        return boost::json::serialize(boost::json::object{
            {"calls", calls_}, {"ok", ok_}, {"errors", errors}, {"per_node", per_node}, {"error_messages", messages}});
    }

private:
    mutable std::mutex mutex_;
    int calls_ = 0;
    int ok_ = 0;
    std::map<std::string, int> per_node_;
    std::map<std::string, int> errors_;
};

// Calls first, first + step, ... below `end`, one at a time, from a coroutine.
asio::awaitable<void> reserve_from_coroutine(rpclb::Cluster& cluster, Tally& tally, int first, int step, int end) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (int i = first; i < end; i += step) {
        const auto sku = sku_of(i);
        rpclb::CallOptions by_sku;
        by_sku.key = sku;
        by_sku.timeout = 2s;
        tally.add(co_await rpclb::async_call<rpclb::Reply<int>>(cluster, rpclb::through("inventory", &by_sku),
                                                                "inventory", "reserve", sku, 1, asio::use_awaitable));
        timer.expires_after(pace);
        co_await timer.async_wait(asio::use_awaitable);
    }
}

}  // namespace

int main(int argc, char** argv) {
    int workers = 0;
    int calls = 0;
    // The whole of `text` as a number of at least `least`.
    auto number = [](std::string_view text, int least, int& out) {
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
        return ec == std::errc() && end == text.data() + text.size() && out >= least;
    };
    if (argc != 4 || !number(argv[2], 1, workers) || !number(argv[3], 2, calls)) {
        std::cerr << "usage: inventory-frontend SEED WORKERS CALLS (WORKERS a whole number of at least 1, "
                     "CALLS of at least 2)\n";
        return 2;
    }
    rpclb::log::init("info");  // the library's records on stderr, from info up
    rpclb::ClusterOptions options;
    options.client = true;
    options.seeds = {argv[1]};
    rpclb::Cluster cluster(options);
    cluster.start();
    if (auto ready = cluster.wait_for_members("inventory", static_cast<std::size_t>(workers), 10s); !ready) {
        std::cerr << "inventory-frontend: " << ready.error().message << "\n";
        cluster.stop();
        return 1;
    }
    std::cout << "ready: " << workers << " workers" << std::endl;

    Tally tally;
    // Half the calls blocking, one after another on this thread.
    const int blocking = calls / 2;
    for (int i = 0; i < blocking; ++i) {
        const auto sku = sku_of(i);
        rpclb::CallOptions by_sku;
        by_sku.key = sku;
        by_sku.timeout = 2s;
        tally.add(rpclb::call<rpclb::Reply<int>>(cluster, rpclb::through("inventory", &by_sku), "inventory",
                                                 "reserve", sku, 1));
        std::this_thread::sleep_for(pace);
    }
    std::cout << "blocking calls done" << std::endl;

    // The other half from four coroutines at once.
    asio::io_context io;
    constexpr int callers = 4;
    for (int c = 0; c < callers; ++c)
        asio::co_spawn(io, reserve_from_coroutine(cluster, tally, blocking + c, callers, calls), asio::detached);
    io.run();
    cluster.stop();

    bool complete = false;
    std::cout << tally.summary(calls, complete) << std::endl;
    return complete ? 0 : 1;
}
