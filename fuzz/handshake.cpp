// libFuzzer target for the cookie handshake state machine (src/transport/handshake.cpp).
//
// The first byte picks a mode:
// - even: one Handshake (dialer or acceptor, from bit 1) is fed the frames the rest of
//   the input decodes to (frames separated by NUL bytes). It must never complete (no input
//   can carry a proof under a cookie it does not know), never send a Ready, and stay
//   failed once it failed.
// - odd: two Handshakes, a dialer and an acceptor, talk to each other; the input gives
//   their cookies and node names (NUL-separated). Both complete exactly when the cookies
//   match and both names are well formed; otherwise neither completes. A frame the peer
//   cannot decode ends the exchange, as it ends a connection; that may only happen for a
//   name that is not UTF-8, which the options check refuses before a node starts.
#include <rpclb/detail/handshake.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/detail/wire.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace wire = rpclb::detail::wire;
using rpclb::detail::Handshake;
using rpclb::detail::Role;

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_handshake: %s\n", what);
    std::abort();
}

std::vector<std::string_view> split(std::string_view text) {
    std::vector<std::string_view> parts;
    while (true) {
        const auto nul = text.find('\0');
        parts.push_back(text.substr(0, nul));
        if (nul == std::string_view::npos) return parts;
        text.remove_prefix(nul + 1);
    }
}

bool sends_ready(const Handshake::Step& step) {
    for (const auto& f : step.send)
        if (std::holds_alternative<wire::Ready>(f)) return true;
    return false;
}

void one_side(std::uint8_t mode, std::string_view rest) {
    const auto role = (mode & 2) ? Role::acceptor : Role::dialer;
    Handshake h(role, wire::PeerInfo{"me@127.0.0.1", "inc-me", "127.0.0.1:1", false}, "the-cookie");
    auto step = h.start();
    if (step.error || step.done) fail("start() failed or completed");
    bool failed = false;
    for (const auto part : split(rest)) {
        auto frame = wire::decode(part);
        if (!frame) continue;
        step = h.on_frame(*frame);
        if (step.done) fail("completed without the cookie");
        if (sends_ready(step)) fail("sent a Ready to a peer that did not prove the cookie");
        if (failed && !step.error) fail("accepted a frame after failing");
        if (step.error) {
            failed = true;
            if (!step.send.empty()) fail("sent frames with an error step");
        }
    }
}

bool well_formed(std::string_view node) { return !node.empty() && node.find('\n') == std::string_view::npos; }
bool sendable(std::string_view node) { return rpclb::detail::valid_utf8(node); }

void two_sides(std::string_view rest) {
    auto parts = split(rest);
    parts.resize(4);
    const std::string dialer_cookie(parts[0]), acceptor_cookie(parts[1]);
    const std::string dialer_name(parts[2].empty() ? "d@h" : parts[2]);
    const std::string acceptor_name(parts[3].empty() ? "a@h" : parts[3]);
    Handshake dialer(Role::dialer, wire::PeerInfo{dialer_name, "inc-d", "", true}, dialer_cookie);
    Handshake acceptor(Role::acceptor, wire::PeerInfo{acceptor_name, "inc-a", "127.0.0.1:2", false},
                       acceptor_cookie);
    // Frames travel as text, as on a connection.
    std::deque<std::string> to_acceptor, to_dialer;
    auto post = [](std::deque<std::string>& queue, const Handshake::Step& step) {
        for (const auto& f : step.send) queue.push_back(wire::encode(f));
    };
    post(to_acceptor, dialer.start());
    post(to_dialer, acceptor.start());
    bool dialer_done = false, acceptor_done = false, ended = false;
    for (int round = 0; round < 16 && !ended && (!to_acceptor.empty() || !to_dialer.empty()); ++round) {
        auto deliver = [&](std::deque<std::string>& in, Handshake& h, std::deque<std::string>& out, bool& done) {
            while (!in.empty() && !ended) {
                auto frame = wire::decode(in.front());
                in.pop_front();
                if (!frame) {
                    if (sendable(dialer_name) && sendable(acceptor_name)) fail("a handshake frame did not decode");
                    ended = true;
                    return;
                }
                const auto step = h.on_frame(*frame);
                post(out, step);
                if (step.error) ended = true;
                done = done || step.done;
            }
        };
        deliver(to_acceptor, acceptor, to_dialer, acceptor_done);
        deliver(to_dialer, dialer, to_acceptor, dialer_done);
    }
    const bool should_complete = dialer_cookie == acceptor_cookie && well_formed(dialer_name) &&
                                 well_formed(acceptor_name) && sendable(dialer_name) && sendable(acceptor_name);
    if (should_complete && !(dialer_done && acceptor_done)) fail("matching cookies did not complete");
    if (!should_complete && (dialer_done || acceptor_done)) fail("completed without matching cookies");
    if (should_complete && (dialer.peer().node != acceptor_name || acceptor.peer().node != dialer_name))
        fail("a side learnt the wrong peer name");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] & 1)
        two_sides(rest);
    else
        one_side(data[0], rest);
    return 0;
}
