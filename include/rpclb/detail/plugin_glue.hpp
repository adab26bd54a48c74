// The plugin side of the C boundary (rpclb/plugin_abi.h): what RPCLB_PLUGIN compiles into a
// plugin to turn the C calls of rpclb into calls of a SelectionAlgorithm class, and its
// answers, errors and exceptions back into C data. Included by selection_algorithm.hpp.
#pragma once

#include <rpclb/plugin_abi.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rpclb::detail {

/// A copy of `text` from malloc, for the host to give back with plugin_free_string; null
/// when memory ran out.
inline char* plugin_string(std::string_view text) noexcept {
    auto* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (!copy) return nullptr;
    if (!text.empty()) std::memcpy(copy, text.data(), text.size());
    copy[text.size()] = '\0';
    return copy;
}

inline void plugin_free_string(char* text) noexcept { std::free(text); }

/// The message of the exception being handled; null for one not derived from
/// std::exception (or when memory ran out).
inline char* plugin_exception_text() noexcept {
    try {
        throw;
    } catch (const std::exception& e) {
        return plugin_string(e.what());
    } catch (...) {
        return nullptr;
    }
}

inline std::string_view plugin_view(rpclb_plugin_text t) noexcept { return {t.data, t.size}; }

inline PickOptions plugin_pick(const rpclb_plugin_pick* pick) noexcept {
    PickOptions options;
    if (pick && pick->has_key) options.key = plugin_view(pick->key);
    return options;
}

inline int plugin_refuse(const ErrorMessage& e, rpclb_plugin_error* error) noexcept {
    error->code = static_cast<std::int32_t>(e.code);
    // The value alone: asking an error_code for its category would compile Boost.System's
    // category singletons (GNU unique symbols) into the plugin, and it could never unload.
    // A plugin's errors carry only rpclb's Failure reasons (ErrorMessage::reason).
    error->failure = e.reason.failed() ? e.reason.value() : 0;
    error->message = plugin_string(e.message);
    if (!e.details.empty()) {
        try {
            error->details = plugin_string(boost::json::serialize(e.details));
        } catch (...) {
            error->details = nullptr;  // memory ran out: the error goes without its details
        }
    }
    return RPCLB_PLUGIN_REFUSED;
}

/// The C functions of a plugin whose algorithm is `T`. An algorithm instance is a `T*`; a
/// members view is a MemberSnapshot of the plugin's own, whose in-flight counts are the
/// host's.
template <class T>
struct PluginGlue {
    static T& self(void* algorithm) noexcept { return *static_cast<T*>(algorithm); }
    static const MemberSnapshot& members(void* view) noexcept { return *static_cast<const MemberSnapshot*>(view); }

    static void* create(char** error) noexcept {
        try {
            return new T();
        } catch (...) {
            *error = plugin_exception_text();
            return nullptr;
        }
    }

    static void destroy(void* algorithm) noexcept { delete static_cast<T*>(algorithm); }

    static int init(void* algorithm, const rpclb_plugin_context* context, rpclb_plugin_text options,
                    char** error) noexcept {
        try {
            AlgorithmContext c;
            c.balancer = plugin_view(context->balancer);
            c.local_node = plugin_view(context->local_node);
            if constexpr ((capabilities_of<T>() & capability::host) != 0)
                c.host = static_cast<AlgorithmHost*>(context->host);
            const boost::json::value parsed = boost::json::parse(plugin_view(options));
            if (!parsed.is_object()) throw std::invalid_argument("algorithm options are not a JSON object");
            self(algorithm).init(c, parsed.get_object());
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            *error = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static void* open_members(void*, const rpclb_plugin_members* m, char** error) noexcept {
        try {
            auto view = std::make_unique<MemberSnapshot>();
            view->nodes.reserve(m->size);
            for (std::size_t i = 0; i < m->size; ++i) view->nodes.emplace_back(plugin_view(m->nodes[i]));
            view->version = m->version;
            if (m->in_flight) {
                // The host's counts, not owned: the view is closed before they go.
                view->calls.reserve(m->size);
                for (std::size_t i = 0; i < m->size; ++i)
                    view->calls.emplace_back(std::shared_ptr<InFlightCount>(),
                                             reinterpret_cast<InFlightCount*>(m->in_flight[i]));
            }
            return view.release();
        } catch (...) {
            *error = plugin_exception_text();
            return nullptr;
        }
    }

    static void close_members(void* view) noexcept { delete static_cast<MemberSnapshot*>(view); }

    static int choose(void* algorithm, void* view, const rpclb_plugin_pick* pick, std::size_t* index,
                      rpclb_plugin_error* error) noexcept {
        try {
            auto picked = self(algorithm).choose_from_nodes(members(view), plugin_pick(pick));
            if (!picked) return plugin_refuse(picked.error(), error);
            *index = *picked;
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            error->message = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static int choose_many(void* algorithm, void* view, std::size_t wanted, const rpclb_plugin_pick* pick,
                           std::size_t* indices, std::size_t capacity, std::size_t* count,
                           rpclb_plugin_error* error) noexcept {
        try {
            auto picked = self(algorithm).choose_nodes(members(view), wanted, plugin_pick(pick));
            if (!picked) return plugin_refuse(picked.error(), error);
            const std::size_t n = picked->size() < capacity ? picked->size() : capacity;
            if (n) std::memcpy(indices, picked->data(), n * sizeof(std::size_t));
            *count = picked->size();
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            error->message = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static int release(void* algorithm, void* view, std::size_t index, const rpclb_plugin_outcome* outcome,
                       char** error) noexcept {
        try {
            CallOutcome o;
            if (outcome->error != 0) o.error = static_cast<ErrorCode>(outcome->error);
            o.origin = static_cast<ErrorOrigin>(outcome->origin);
            if (outcome->has_latency) o.latency = std::chrono::nanoseconds(outcome->latency_ns);
            self(algorithm).release(members(view), index, o);
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            *error = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static int node_change(void* algorithm, int change, const rpclb_plugin_text* nodes, std::size_t size,
                           char** error) noexcept {
        try {
            std::vector<std::string> names;
            names.reserve(size);
            for (std::size_t i = 0; i < size; ++i) names.emplace_back(plugin_view(nodes[i]));
            self(algorithm).on_node_change(change == 0 ? NodeChange::joined : NodeChange::left, names);
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            *error = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static int local(void* algorithm, int* answer, char** error) noexcept {
        try {
            *answer = self(algorithm).local() ? 1 : 0;
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            *error = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    static int services(void* algorithm, void* out, char** error) noexcept {
        try {
            if constexpr ((capabilities_of<T>() & capability::services) != 0) {
                auto* into = static_cast<std::vector<std::shared_ptr<Service>>*>(out);
                for (auto& s : self(algorithm).services()) into->push_back(std::move(s));
            }
            return RPCLB_PLUGIN_OK;
        } catch (...) {
            *error = plugin_exception_text();
            return RPCLB_PLUGIN_THREW;
        }
    }

    /// The table, constant-initialized (no guard, no GNU unique symbol to pin the plugin).
    static constexpr rpclb_plugin_table table(const char* name) noexcept {
        return rpclb_plugin_table{RPCLB_PLUGIN_ABI_VERSION,
                                  sizeof(rpclb_plugin_table),
                                  name,
                                  RPCLB_VERSION_STRING,
                                  RPCLB_COMPILER_ID,
                                  capabilities_of<T>(),
                                  &plugin_free_string,
                                  &create,
                                  &destroy,
                                  &init,
                                  &open_members,
                                  &close_members,
                                  &choose,
                                  &choose_many,
                                  &release,
                                  &node_change,
                                  &local,
                                  &services};
    }
};

}  // namespace rpclb::detail
