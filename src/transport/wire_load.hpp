// The load report's text form, shared by a reply's "ld" member and the load pong
// (rpclb/detail/wire.hpp: read_load, encode_load_pong, decode_load_pong).
#pragma once

#include <rpclb/detail/wire.hpp>

namespace rpclb::detail::wire {

/// Writes "BUSY<separator>QUEUE[<separator>APPLICATION]" from `p` on (room for 48 bytes)
/// and returns the end.
char* format_load(const Load& load, char* p, char separator);

}  // namespace rpclb::detail::wire
