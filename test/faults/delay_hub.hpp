// Fault-test support: a hub in user space that delays and drops packets between the nodes
// of a NetnsLab, for kernels built without netem (sch_netem), such as the Firecracker
// kernel these tests were written on.
#pragma once

#include "faults/netns.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rpclb::test::faults {

/// While it lives, the lab's bridge is out of the path: a thread in the hub namespace
/// reads every frame from each node's port (AF_PACKET), drops `loss_percent` % of the IPv4
/// frames at random, and after `delay` ± `jitter` (uniform, drawn per frame, so frames may
/// overtake each other) writes the rest to every other port (a hub, not a switch: a node
/// ignores frames for another MAC address). So each packet between two nodes arrives
/// `delay` ± `jitter` late, or not at all, in each direction.
///
/// Frames keep their virtio-net header (PACKET_VNET_HDR) from the port they came in on to
/// the one they go out of, so the veths' segmentation offload stays on and a 64 KiB TCP
/// segment is split by the kernel on its way out, as a real link would see it.
///
/// The destructor stops the thread and puts the ports back on the bridge. Cuts (nft rules
/// on the bridge) do not apply while the hub runs. Throws std::system_error when a socket
/// cannot be opened. Thread safety: distinct objects safe; shared objects unsafe.
class DelayHub {
public:
    DelayHub(NetnsLab& lab, std::chrono::milliseconds delay, int loss_percent,
             std::chrono::milliseconds jitter = std::chrono::milliseconds(0))
        : lab_(lab), delay_(delay), jitter_(std::min(jitter, delay)), loss_percent_(loss_percent) {
        for (int i = 0; i < lab_.size(); ++i) lab_.detach_port(i);
        std::promise<void> ready;
        thread_ = std::thread([this, &ready] {
            try {
                detail::enter_namespace(lab_.hub());
                open_ports();
            } catch (...) {
                ready.set_exception(std::current_exception());
                return;
            }
            ready.set_value();
            run();
        });
        try {
            ready.get_future().get();
        } catch (...) {
            thread_.join();
            restore();
            throw;
        }
    }

    ~DelayHub() {
        stop_ = true;
        thread_.join();
        restore();
    }

    DelayHub(const DelayHub&) = delete;
    DelayHub& operator=(const DelayHub&) = delete;

    /// Frames forwarded and dropped so far (read after the hub ran a while).
    std::uint64_t forwarded() const noexcept { return forwarded_; }
    std::uint64_t dropped() const noexcept { return dropped_; }

private:
    // sizeof(struct virtio_net_hdr), which PACKET_VNET_HDR puts before each frame (the
    // header linux/virtio_net.h declares it in does not compile as C++).
    static constexpr std::size_t vnet_header_bytes = 10;

    struct Frame {
        std::size_t from;
        std::vector<char> bytes;  // virtio_net_hdr, then the Ethernet frame
    };

    void open_ports() {
        for (int i = 0; i < lab_.size(); ++i) {
            const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
            if (fd < 0) throw std::system_error(errno, std::generic_category(), "AF_PACKET socket");
            fds_.push_back(fd);
            const int one = 1;
            if (::setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
                ::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0)
                throw std::system_error(errno, std::generic_category(), "setsockopt on an AF_PACKET socket");
            const auto port = "p" + std::to_string(i);
            sockaddr_ll address{};
            address.sll_family = AF_PACKET;
            address.sll_protocol = htons(ETH_P_ALL);
            address.sll_ifindex = static_cast<int>(::if_nametoindex(port.c_str()));
            if (address.sll_ifindex == 0 ||
                ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
                throw std::system_error(errno, std::generic_category(), "bind AF_PACKET to " + port);
        }
    }

    void run() {
        std::mt19937 rng(std::random_device{}());
        std::uniform_int_distribution<int> percent(0, 99);
        std::uniform_int_distribution<long long> jitter_us(-std::chrono::microseconds(jitter_).count(),
                                                           std::chrono::microseconds(jitter_).count());
        std::vector<pollfd> polled;
        for (int fd : fds_) polled.push_back({fd, POLLIN, 0});
        std::vector<char> buffer(vnet_header_bytes + 70000);
        while (!stop_) {
            int wait_ms = 10;
            if (!queue_.empty())
                wait_ms = static_cast<int>(std::clamp<long long>(
                    std::chrono::ceil<std::chrono::milliseconds>(queue_.begin()->first - Clock::now()).count(), 0, 10));
            if (::poll(polled.data(), polled.size(), wait_ms) > 0) {
                for (std::size_t i = 0; i < polled.size(); ++i) {
                    if (!(polled[i].revents & POLLIN)) continue;
                    for (;;) {
                        const auto n = ::recv(fds_[i], buffer.data(), buffer.size(), 0);
                        if (n <= 0) break;
                        const auto size = static_cast<std::size_t>(n);
                        const auto* eth = buffer.data() + vnet_header_bytes;
                        const bool ipv4 = size >= vnet_header_bytes + 14 &&
                                          static_cast<unsigned char>(eth[12]) == 0x08 && eth[13] == 0x00;
                        if (ipv4 && percent(rng) < loss_percent_) {
                            ++dropped_;
                            continue;
                        }
                        const auto due = Clock::now() + delay_ + std::chrono::microseconds(jitter_us(rng));
                        queue_.emplace(due, Frame{i, {buffer.begin(), buffer.begin() + n}});
                    }
                }
            }
            const auto now = Clock::now();
            while (!queue_.empty() && queue_.begin()->first <= now) {
                const auto& f = queue_.begin()->second;
                for (std::size_t j = 0; j < fds_.size(); ++j)
                    if (j != f.from) ::send(fds_[j], f.bytes.data(), f.bytes.size(), 0);
                ++forwarded_;
                queue_.erase(queue_.begin());
            }
        }
        for (int fd : fds_) ::close(fd);
    }

    void restore() {
        for (int i = 0; i < lab_.size(); ++i) lab_.attach_port(i);
    }

    NetnsLab& lab_;
    const std::chrono::milliseconds delay_;
    const std::chrono::milliseconds jitter_;
    const int loss_percent_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::vector<int> fds_;
    std::multimap<Clock::time_point, Frame> queue_;  // by when each frame is due
    std::atomic<std::uint64_t> forwarded_{0}, dropped_{0};
};

}  // namespace rpclb::test::faults
