#include <rpclb/node_filter.hpp>

#include <algorithm>
#include <cstddef>
#include <regex>

namespace rpclb {

namespace {

// The longest pattern std::regex is given: its compiler recurses once per group, so a
// pattern's length bounds the stack it takes.
constexpr std::size_t max_pattern = 1000;

// The largest count std::regex is given in a {n}, {n,} or {n,m} repetition. libstdc++
// accumulates a count's digits in a long without an overflow check, so a long run of
// digits is undefined behaviour before std::regex can refuse it; a node name is short, so
// counts above this serve nothing.
constexpr unsigned long max_repetition = 1000;

// Reads the run of digits at `at` (moving past it); throws std::regex_error(`error`) when
// its number is above max_repetition.
void check_number(std::string_view pattern, std::size_t& at, std::regex_constants::error_type error) {
    unsigned long number = 0;
    for (; at < pattern.size() && pattern[at] >= '0' && pattern[at] <= '9'; ++at) {
        number = number * 10 + static_cast<unsigned long>(pattern[at] - '0');
        if (number > max_repetition) throw std::regex_error(error);
    }
}

// Throws std::regex_error: error_complexity when `pattern` is longer than max_pattern,
// error_badbrace when a repetition count in it is above max_repetition, error_backref when
// a number after a backslash (a back-reference) is. Braces inside a bracket expression or
// after a backslash are literal.
void check_pattern(std::string_view pattern) {
    if (pattern.size() > max_pattern) throw std::regex_error(std::regex_constants::error_complexity);
    bool in_class = false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\') {
            auto at = i + 1;
            check_number(pattern, at, std::regex_constants::error_backref);
            ++i;
        } else if (in_class) {
            in_class = c != ']';
        } else if (c == '[') {
            in_class = true;
        } else if (c == '{') {  // {n}, {n,} or {n,m}
            auto at = i + 1;
            check_number(pattern, at, std::regex_constants::error_badbrace);
            if (at < pattern.size() && pattern[at] == ',') check_number(pattern, ++at, std::regex_constants::error_badbrace);
        }
    }
}

}  // namespace

struct NodeFilter::Pattern {
    std::regex regex;
};

NodeFilter NodeFilter::substring(std::string text) {
    NodeFilter f;
    f.text_ = std::move(text);
    return f;
}

NodeFilter NodeFilter::regex(std::string pattern) {
    check_pattern(pattern);
    NodeFilter f;
    f.regex_ = std::make_shared<const Pattern>(Pattern{std::regex(pattern, std::regex::ECMAScript)});
    f.text_ = std::move(pattern);
    return f;
}

NodeFilter NodeFilter::parse(std::string_view text) {
    if (text.size() >= 2 && text.front() == '/' && text.back() == '/')
        return regex(std::string(text.substr(1, text.size() - 2)));
    return substring(std::string(text));
}

bool NodeFilter::matches(std::string_view node, const std::vector<std::string>& excluded) const {
    const bool base = regex_ ? std::regex_search(node.begin(), node.end(), regex_->regex)
                             : node.find(text_) != std::string_view::npos;
    if (!base) return false;
    const auto short_name = node.substr(0, node.find('@'));
    return std::none_of(excluded.begin(), excluded.end(), [&](const std::string& p) {
        return short_name.find(p) != std::string_view::npos &&
               text_.find(p) == std::string::npos;
    });
}

bool NodeMatchList::matches(std::string_view node, const std::vector<std::string>& excluded) const {
    if (all) return true;
    return std::any_of(filters.begin(), filters.end(),
                       [&](const NodeFilter& f) { return f.matches(node, excluded); });
}

}  // namespace rpclb
