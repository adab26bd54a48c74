// The admin console page: files embedded in librpclb at build time (src/admin/page/embed.cmake
// writes their bytes into a generated source) and served by the admin listener.
#pragma once

#include <string_view>

namespace rpclb::admin {

/// One embedded file of the console page.
struct PageAsset {
    std::string_view path;          ///< URL path it is served at, e.g. "/" or "/uplot.min.js"
    std::string_view content_type;  ///< the Content-Type header, with a charset
    std::string_view body;          ///< the file's bytes (static storage)
};

/// The embedded file served at `path` (the URL path, query removed), or nullptr. Thread
/// safe; the result lives as long as the program.
const PageAsset* find_page_asset(std::string_view path) noexcept;

}  // namespace rpclb::admin
