#include <rpclb/detail/option_problem.hpp>

namespace rpclb::detail {

bool valid_utf8(std::string_view text) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* const end = p + text.size();
    while (p < end) {
        const unsigned char c = *p;
        std::size_t extra = 0;
        unsigned char lo = 0x80, hi = 0xbf;  // the range of the byte after the lead
        if (c < 0x80) {
            ++p;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            extra = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            extra = 2;
            if (c == 0xe0) lo = 0xa0;  // no overlong forms
            if (c == 0xed) hi = 0x9f;  // no surrogates
        } else if (c >= 0xf0 && c <= 0xf4) {
            extra = 3;
            if (c == 0xf0) lo = 0x90;  // no overlong forms
            if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
        } else {
            return false;
        }
        if (static_cast<std::size_t>(end - p) <= extra) return false;
        if (p[1] < lo || p[1] > hi) return false;
        for (std::size_t i = 2; i <= extra; ++i)
            if (p[i] < 0x80 || p[i] > 0xbf) return false;
        p += extra + 1;
    }
    return true;
}

std::optional<OptionProblem> check_duration(const char* field, std::chrono::milliseconds value, bool zero_allowed) {
    const auto min = zero_allowed ? 0 : 1;
    if (value.count() >= min && value <= max_option_duration) return std::nullopt;
    return OptionProblem{field, std::string(zero_allowed ? "must be in 0.." : "must be in 1..") +
                              std::to_string(max_option_duration.count()) + " (milliseconds), got " +
                              std::to_string(value.count())};
}

// Names travel in JSON frames, which the peer's decoder refuses unless they are UTF-8, and
// in the handshake's newline-separated HMAC input.
std::optional<OptionProblem> check_printable(const char* field, std::string_view text) {
    for (const unsigned char ch : text)
        if (ch < 0x20 || ch == 0x7f) return OptionProblem{field, "must not contain control characters"};
    if (!valid_utf8(text)) return OptionProblem{field, "must be valid UTF-8"};
    return std::nullopt;
}

}  // namespace rpclb::detail
