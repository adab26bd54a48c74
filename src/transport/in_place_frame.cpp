// One whole WebSocket frame taken from a call channel's socket with a non-blocking receive:
// the answer of a dialer's in-place call (channel_call.cpp) and the next request of an
// acceptor's worker that stays on its channel (channel_answer.cpp). See doc/architecture.md,
// "Call channels".
#include "transport/connection.hpp"

#include <cerrno>
#include <cstdint>
#include <optional>

namespace rpclb::detail {
namespace {
// Frames up to this payload size are taken in place once they are whole in the socket.
constexpr std::size_t max_in_place_payload = 64 * 1024;
// The first receive asks for this much: a usual answer or request comes whole in it.
constexpr std::size_t first_receive = 4096;

// The size of the frame at the start of `head` when it is one whole-message data frame: FIN,
// no RSV bits, opcode 1 or 2, the mask bit as `masked` says (a dialer masks its frames, an
// acceptor does not), then a 7-bit, 16-bit or 64-bit length and the 4-byte masking key of
// a masked frame (RFC 6455, section 5.2), with at most max_in_place_payload bytes of payload;
// nullopt for anything else, or when its header is not all there.
std::optional<std::size_t> whole_data_frame(const unsigned char* head, std::size_t have, bool masked) {
    if (have < 2 || (head[0] & 0xF0) != 0x80 || ((head[0] & 0x0F) != 1 && (head[0] & 0x0F) != 2) ||
        bool(head[1] & 0x80) != masked)
        return std::nullopt;
    std::uint64_t length = head[1] & 0x7F;
    std::size_t header = 2;
    if (length == 126) {
        if (have < 4) return std::nullopt;
        length = (std::uint64_t(head[2]) << 8) | head[3];
        header = 4;
    } else if (length == 127) {
        if (have < 10) return std::nullopt;
        length = 0;
        for (int i = 2; i < 10; ++i) length = (length << 8) | head[i];
        header = 10;
    }
    if (length > max_in_place_payload) return std::nullopt;
    if (masked) header += 4;
    return header + static_cast<std::size_t>(length);
}

}  // namespace

Connection::Waiting Connection::take_frame() {
    auto* socket = ws_.plain_socket();
    if (!socket) return Waiting::other;
    auto& ahead = socket->ahead();
    if (ahead.size() == 0) {
        const auto n = socket->receive_ahead(first_receive);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Waiting::nothing : Waiting::other;
        if (n == 0) return Waiting::other;  // the end of the stream, which Beast's read reports
    }
    const auto* head = static_cast<const unsigned char*>(ahead.data().data());
    const auto whole = whole_data_frame(head, ahead.size(), role() == Role::acceptor);
    if (!whole || ahead.size() > *whole) return Waiting::other;  // Beast's reads take it, from ahead() first
    // A larger frame: its rest, exactly, if it is all in the socket by now.
    if (ahead.size() < *whole && socket->receive_ahead(*whole - ahead.size()) <= 0) return Waiting::other;
    return ahead.size() == *whole ? Waiting::frame : Waiting::other;
}

}  // namespace rpclb::detail
