// Matching node names against filters (the predecessor's NodeFilter,
// predecessor-compatibility §4.3).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb {

/// A node-name filter: a substring or an ECMAScript regex matched against the full
/// `short@host` name (predecessor-compatibility §4.3). An empty substring matches every node.
///
/// Exclusions (`excluded`, the predecessor's `excluded_node_patterns`): a node whose short name
/// (text before the first '@') contains an excluded pattern is rejected unless the filter's
/// own text contains that pattern.
///
/// Thread safety: immutable after construction; safe to share.
class NodeFilter {
public:
    /// A substring filter.
    static NodeFilter substring(std::string text);

    /// A regex filter. Throws std::regex_error for an invalid pattern.
    static NodeFilter regex(std::string pattern);

    /// Parses the textual form used by flags and JSON config: `/PATTERN/` is a regex,
    /// anything else a substring. Throws std::regex_error for an invalid regex.
    static NodeFilter parse(std::string_view text);

    /// True when `node` matches and is not excluded.
    bool matches(std::string_view node, const std::vector<std::string>& excluded = {}) const;

    /// The substring or the regex source.
    const std::string& text() const noexcept { return text_; }
    bool is_regex() const noexcept { return static_cast<bool>(regex_); }

private:
    std::string text_;
    struct Pattern;  // the compiled std::regex (src/routing/node_filter.cpp)
    std::shared_ptr<const Pattern> regex_;
};

/// `node_match_list` of a balancer: `all` (default) or a list of filters, any of which
/// may match (predecessor-compatibility §3.3). An empty list matches nothing.
struct NodeMatchList {
    bool all = true;
    std::vector<NodeFilter> filters;

    /// A list matching nothing.
    static NodeMatchList none() { return NodeMatchList{false, {}}; }

    bool matches(std::string_view node, const std::vector<std::string>& excluded = {}) const;
};

}  // namespace rpclb
