// A frame's JSON text parsed to a document, its traceparent read on the way (internal).
#pragma once

#include <rpclb/detail/wire.hpp>

#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string_view>

namespace rpclb::detail::wire {

/// The "tp" member of a frame's top-level object, as parse_frame() read it.
struct ParsedTrace {
    /// absent: parse_frame() read none, and any "tp" is in the document; valid or
    /// malformed: what parse_traceparent() made of it, malformed also when longer than
    /// max_traceparent_text.
    TraceRead read = TraceRead::absent;
    TraceParent parent{};  ///< when `read` is valid
};

/// Parses one frame's text to a Boost.JSON document, as json::parse does (same options,
/// errors and values), except for one member: a "tp" of the top-level object whose value
/// is a string is read into `trace` and left out of the document. Kept in the document,
/// it would cost an allocation for its key and one for its 55 characters, and their
/// release: about half of what the traceparent costs a request (bench/README.md). A "tp"
/// whose key the parser hands over in parts (one written with escapes) or whose value is
/// not a string stays in the document.
///
/// A text of BlockCache::min_block bytes or more is decoded into the process's BlockCache
/// (block_cache.hpp). Texts up to 96 KiB use this thread's parser, whose stack (24 bytes
/// per value) is kept from one frame to the next; larger ones get their own.
///
/// Returns null, with `ec` set, when `text` is not one JSON text; `trace` is then
/// unspecified. Thread safety: any thread; no lock.
boost::json::value parse_frame(std::string_view text, ParsedTrace& trace, boost::system::error_code& ec);

}  // namespace rpclb::detail::wire
