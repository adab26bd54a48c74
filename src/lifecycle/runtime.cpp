#include "lifecycle/runtime.hpp"

namespace rpclb::detail {

namespace {
// Set on the network threads of every node of the process: a blocking call from any of
// them may need the loop it blocks (two nodes in one process calling each other).
thread_local bool network_thread = false;
}  // namespace

Runtime::Runtime(std::size_t network_threads, std::size_t worker_threads)
    : network_threads_(network_threads),
      network_(static_cast<int>(network_threads)),
      workers_(worker_threads) {}

void Runtime::start() {
    work_.emplace(network_.get_executor());
    for (std::size_t i = 0; i < network_threads_; ++i) {
        threads_.emplace_back([this] {
            network_thread = true;
            network_.run();
        });
    }
}

void Runtime::stop() {
    work_.reset();
    network_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Handlers that were queued when the loop stopped (the cancellations the node's stop
    // posted, completions of the operations those cancel) hold shared_ptrs to the node:
    // left in the queue they would keep it alive forever (a cycle through its own
    // io_context). Run them here, where no network thread runs any more.
    network_.restart();
    network_.poll();
    workers_stopped_ = true;  // set first: what is posted from here may find no thread
    workers_.join();
}

bool Runtime::on_network_thread() const noexcept {
    return network_thread || const_cast<boost::asio::io_context&>(network_).get_executor().running_in_this_thread();
}

}  // namespace rpclb::detail
