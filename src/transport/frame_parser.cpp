// The frame parser: json::parser's document builder, with the top-level "tp" read aside.
#include "transport/frame_parser.hpp"

#include "transport/block_cache.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

namespace rpclb::detail::wire {
namespace {

namespace json = boost::json;
using boost::system::error_code;

// The handler of json::parser (each event pushed on a json::value_stack), except for a
// top-level "tp" whose value is a string: that string is read with parse_traceparent()
// and neither the key nor the value is pushed. Which "tp" is a string is known only at
// its value's event, so the key waits until then (`tp_waits`).
struct Handler {
    static constexpr std::size_t max_object_size = json::object::max_size();
    static constexpr std::size_t max_array_size = json::array::max_size();
    static constexpr std::size_t max_key_size = json::string::max_size();
    static constexpr std::size_t max_string_size = json::string::max_size();

    json::value_stack st;
    ParsedTrace trace;
    std::size_t depth = 0;       // containers open
    std::size_t left_out = 0;    // top-level members not pushed
    bool key_in_parts = false;   // the key being read came in parts
    bool tp_waits = false;       // a top-level key "tp" was read, its value is next

    explicit Handler(json::storage_ptr sp) : st(std::move(sp)) {}

    void reset(json::storage_ptr sp) {
        st.reset(std::move(sp));
        trace = {};
        depth = left_out = 0;
        key_in_parts = tp_waits = false;
    }

    // A value other than a whole string follows the waiting key: it goes in the document.
    void value_follows() {
        if (!tp_waits) return;
        tp_waits = false;
        st.push_key("tp");
    }

    bool on_document_begin(error_code&) { return true; }
    bool on_document_end(error_code&) { return true; }
    bool on_object_begin(error_code&) {
        value_follows();
        ++depth;
        return true;
    }
    bool on_object_end(std::size_t n, error_code&) {
        if (--depth == 0) n -= left_out;
        st.push_object(n);
        return true;
    }
    bool on_array_begin(error_code&) {
        value_follows();
        ++depth;
        return true;
    }
    bool on_array_end(std::size_t n, error_code&) {
        --depth;
        st.push_array(n);
        return true;
    }
    bool on_key_part(json::string_view s, std::size_t, error_code&) {
        st.push_chars(s);
        key_in_parts = true;
        return true;
    }
    bool on_key(json::string_view s, std::size_t, error_code&) {
        if (depth == 1 && !key_in_parts && s == "tp")
            tp_waits = true;
        else
            st.push_key(s);
        key_in_parts = false;
        return true;
    }
    bool on_string_part(json::string_view s, std::size_t, error_code&) {
        value_follows();
        st.push_chars(s);
        return true;
    }
    bool on_string(json::string_view s, std::size_t, error_code&) {
        if (!tp_waits) {
            st.push_string(s);
            return true;
        }
        // Whole: a string that came in parts cleared tp_waits at its first part.
        tp_waits = false;
        ++left_out;
        const auto parent = s.size() <= max_traceparent_text ? parse_traceparent(s) : std::nullopt;
        trace.read = parent ? TraceRead::valid : TraceRead::malformed;
        if (parent) trace.parent = *parent;
        return true;
    }
    bool on_number_part(json::string_view, error_code&) { return true; }
    bool on_int64(std::int64_t i, json::string_view, error_code&) {
        value_follows();
        st.push_int64(i);
        return true;
    }
    bool on_uint64(std::uint64_t u, json::string_view, error_code&) {
        value_follows();
        st.push_uint64(u);
        return true;
    }
    bool on_double(double d, json::string_view, error_code&) {
        value_follows();
        st.push_double(d);
        return true;
    }
    bool on_bool(bool b, error_code&) {
        value_follows();
        st.push_bool(b);
        return true;
    }
    bool on_null(error_code&) {
        value_follows();
        st.push_null();
        return true;
    }
    bool on_comment_part(json::string_view, error_code&) { return true; }
    bool on_comment(json::string_view, error_code&) { return true; }
};

using Parser = json::basic_parser<Handler>;

// As json::parser::write and release do: the whole text, nothing after it.
json::value run(Parser& parser, std::string_view text, json::storage_ptr storage, ParsedTrace& trace,
                error_code& ec) {
    parser.reset();
    parser.handler().reset(std::move(storage));
    const auto n = parser.write_some(false, text.data(), text.size(), ec);
    if (!ec && n < text.size()) ec = json::error::extra_data;
    if (ec) return nullptr;
    trace = parser.handler().trace;
    return parser.handler().st.release();
}

}  // namespace

// A parser gathers a string on its own stack and keeps that memory across reset() (a fresh
// one mapped and unmapped a 128 KiB stack per 64 KiB string); only texts up to reuse_limit
// use the thread's parser, so it keeps at most about 1.2 MiB.
json::value parse_frame(std::string_view text, ParsedTrace& trace, error_code& ec) {
    constexpr std::size_t reuse_limit = 96 * 1024;
    json::storage_ptr storage = text.size() >= BlockCache::min_block ? BlockCache::storage() : json::storage_ptr();
    if (text.size() > reuse_limit) {
        Parser own{json::parse_options{}, json::storage_ptr{}};
        return run(own, text, std::move(storage), trace, ec);
    }
    thread_local Parser parser{json::parse_options{}, json::storage_ptr{}};
    return run(parser, text, std::move(storage), trace, ec);
}

}  // namespace rpclb::detail::wire
