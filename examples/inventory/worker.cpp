// An inventory worker: holds stock per SKU and serves inventory.reserve as a member of the
// "inventory" balancer (hash_ring: each SKU has one owner while the members stay the same).
//
//   inventory-worker NAME SEED...     e.g. inventory-worker w1@127.0.0.1
//
// The cookie comes from $RPCLB_COOKIE. Prints "listening on HOST:PORT" once it
// serves, then runs until SIGINT or SIGTERM, when it leaves the balancer, drains and stops
// (exit 0), or until it gives up its name to an older live worker of that name (exit 1).
#include <rpclb/cluster.hpp>
#include <rpclb/log.hpp>
#include <rpclb/stop_signal.hpp>
#include <rpclb/typed.hpp>

#include <iostream>
#include <map>
#include <mutex>
#include <string>

namespace {

// Stock per SKU on this worker; every SKU starts with `initial` units.
class Stock {
public:
    static constexpr int initial = 1000;

    // Takes `qty` units of `sku`; returns what is left, or an error when there is not enough.
    rpclb::Result<int> reserve(const std::string& sku, int qty) {
        if (qty <= 0)
            return rpclb::ErrorMessage{rpclb::ErrorCode::bad_request, "qty must be positive", {{"qty", qty}}};
        std::lock_guard lock(mutex_);
        auto [it, added] = left_.try_emplace(sku, initial);
        if (it->second < qty)
            return rpclb::ErrorMessage{rpclb::ErrorCode::service_unavailable, "out of stock",
                                       {{"sku", sku}, {"left", it->second}}};
        return it->second -= qty;
    }

private:
    std::mutex mutex_;
    std::map<std::string, int> left_;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: inventory-worker NAME [SEED...]\n";
        return 2;
    }
    rpclb::log::init("info");  // the library's records on stderr, from info up
    rpclb::StopSignal stop_signal;  // before any thread starts: SIGTERM now stops gracefully
    rpclb::ClusterOptions options;
    options.name = argv[1];
    for (int i = 2; i < argc; ++i) options.seeds.emplace_back(argv[i]);
    Stock stock;
    try {
        rpclb::Cluster cluster(options);
        cluster.register_function("inventory", "reserve",
                                  rpclb::typed([&stock](std::string sku, int qty) { return stock.reserve(sku, qty); },
                                               {"sku", "qty"}));
        cluster.start();
        rpclb::LoadBalancerOptions inventory;
        inventory.name = "inventory";
        inventory.algorithm = "hash_ring";
        inventory.algorithm_opts = {{"weight", 128}};  // virtual nodes per member on the ring
        cluster.start_balancer(inventory);
        const auto at = *cluster.listen_endpoint();
        std::cout << "listening on " << at.address().to_string() << ':' << at.port() << std::endl;
        rpclb::run_until_signalled(cluster, stop_signal);  // returns the signal's number
        // It also returns when another live worker holds this name: the node gives it up
        // (after twice the idle timeout) and stops; exit 1 saying so.
        if (auto why = cluster.name_taken()) {
            std::cerr << "inventory-worker: " << *why << "\n";
            return 1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "inventory-worker: " << e.what() << "\n";
        return 1;
    }
}
