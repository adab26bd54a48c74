#include <rpclb/node_filter.hpp>

#include <algorithm>

namespace rpclb {

NodeFilter NodeFilter::substring(std::string text) {
    NodeFilter f;
    f.text_ = std::move(text);
    return f;
}

NodeFilter NodeFilter::regex(std::string pattern) {
    NodeFilter f;
    f.regex_ = std::make_shared<const std::regex>(pattern, std::regex::ECMAScript);
    f.text_ = std::move(pattern);
    return f;
}

NodeFilter NodeFilter::parse(std::string_view text) {
    if (text.size() >= 2 && text.front() == '/' && text.back() == '/')
        return regex(std::string(text.substr(1, text.size() - 2)));
    return substring(std::string(text));
}

bool NodeFilter::matches(std::string_view node, const std::vector<std::string>& excluded) const {
    const bool base = regex_ ? std::regex_search(node.begin(), node.end(), *regex_)
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
