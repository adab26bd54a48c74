/* The plugin boundary: the C data and functions that pass between rpclb and a
 * selection-algorithm plugin. Valid C and C++; nothing else crosses a plugin's `.so`
 * boundary, so a plugin built with any compiler (and standard library) that follows the
 * platform's C calling convention loads into any rpclb of the same contract version.
 *
 * A plugin exports one C function, `rpclb_plugin` (rpclb_plugin_entry), returning its
 * table. A C++ plugin never writes the table: RPCLB_PLUGIN (rpclb/selection_algorithm.hpp)
 * generates it from a SelectionAlgorithm class. doc/how-to/write-a-plugin.md, "The
 * boundary", says what each function must do.
 *
 * Every string a plugin returns through a `char** error` or `rpclb_plugin_error::message`
 * is allocated by the plugin and given back to it with `free_string`. Strings rpclb passes
 * in (rpclb_plugin_text) are valid only during the call. No function may let an exception
 * or a longjmp leave it. */
#ifndef RPCLB_PLUGIN_ABI_H
#define RPCLB_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Results of a table function. */
#define RPCLB_PLUGIN_OK 0      /* done */
#define RPCLB_PLUGIN_REFUSED 1 /* a pick answered an error (rpclb_plugin_error) */
#define RPCLB_PLUGIN_THREW 2   /* the hook failed; the error string says why, or is null */

/* A string rpclb passes in: `size` bytes at `data`, not NUL-terminated. */
typedef struct rpclb_plugin_text {
    const char* data;
    size_t size;
} rpclb_plugin_text;

/* A balancer's members at one moment (rpclb::MemberSnapshot), passed to open_members.
 * `nodes` is valid only during that call; `in_flight` and the counts it points to until
 * close_members of the view it returned. */
typedef struct rpclb_plugin_members {
    const rpclb_plugin_text* nodes; /* distinct node names, ascending */
    size_t size;
    uint64_t version; /* changes whenever the set changes */
    /* Index-aligned with `nodes`, or null when the host counts no call: member i's calls
     * in flight, a 64-bit signed integer on a 64-byte boundary that rpclb changes with
     * atomic operations (rpclb::InFlightCount). Read it with relaxed atomic loads only. */
    int64_t* const* in_flight;
} rpclb_plugin_members;

/* rpclb::AlgorithmContext. */
typedef struct rpclb_plugin_context {
    rpclb_plugin_text balancer;
    rpclb_plugin_text local_node;
    /* An rpclb::AlgorithmHost* (a C++ object), given only to a plugin that declares
     * capability::host; null otherwise. */
    void* host;
} rpclb_plugin_context;

/* rpclb::PickOptions. */
typedef struct rpclb_plugin_pick {
    int has_key;
    rpclb_plugin_text key;
} rpclb_plugin_pick;

/* rpclb::CallOutcome. */
typedef struct rpclb_plugin_outcome {
    int32_t error;  /* rpclb::ErrorCode (400, 404, 408, 500, 503), or 0: none */
    int32_t origin; /* rpclb::ErrorOrigin: 0 none, 1 local, 2 remote */
    int32_t has_latency;
    int64_t latency_ns;
} rpclb_plugin_outcome;

/* The error a pick answers (rpclb::ErrorMessage). rpclb passes it zeroed. */
typedef struct rpclb_plugin_error {
    int32_t code;    /* rpclb::ErrorCode */
    int32_t failure; /* rpclb::Failure, 0 when none */
    char* message;   /* the plugin's, freed with free_string; may be null */
    char* details;   /* a JSON object's text, the plugin's, freed with free_string; may be null */
} rpclb_plugin_error;

/* What a plugin exports. Fields are only ever added at the end; `size` tells how many the
 * plugin has. A function a plugin does not use is still set (RPCLB_PLUGIN sets all). */
typedef struct rpclb_plugin_table {
    uint32_t abi_version;      /* RPCLB_PLUGIN_ABI_VERSION the plugin was built with */
    uint32_t size;             /* sizeof(rpclb_plugin_table) as the plugin was built */
    const char* name;          /* algorithm name, e.g. "round_robin" */
    const char* rpclb_version; /* RPCLB_VERSION_STRING the plugin was built against */
    const char* compiler;      /* compiler and standard library, for messages */
    uint64_t capabilities;     /* rpclb::capability bits the plugin uses */

    void (*free_string)(char* text);
    /* A new algorithm instance, or null with *error set. */
    void* (*create)(char** error);
    void (*destroy)(void* algorithm);
    /* `options` is the balancer's algorithm_opts as a JSON object text. */
    int (*init)(void* algorithm, const rpclb_plugin_context* context, rpclb_plugin_text options, char** error);
    /* The plugin's view of `members`, passed to the picks and releases made from them;
     * null with *error set when it could not be built. */
    void* (*open_members)(void* algorithm, const rpclb_plugin_members* members, char** error);
    void (*close_members)(void* view);
    int (*choose)(void* algorithm, void* view, const rpclb_plugin_pick* pick, size_t* index,
                  rpclb_plugin_error* error);
    /* Writes up to `capacity` indices to `indices` and their number, which may be more
     * than `capacity` when the algorithm answered more, to *count. */
    int (*choose_many)(void* algorithm, void* view, size_t wanted, const rpclb_plugin_pick* pick,
                       size_t* indices, size_t capacity, size_t* count, rpclb_plugin_error* error);
    int (*release)(void* algorithm, void* view, size_t index, const rpclb_plugin_outcome* outcome,
                   char** error);
    /* change: 0 joined, 1 left. */
    int (*node_change)(void* algorithm, int change, const rpclb_plugin_text* nodes, size_t size, char** error);
    int (*local)(void* algorithm, int* local, char** error);
    /* Only for capability::services: appends the algorithm's services to `out`, a
     * std::vector<std::shared_ptr<rpclb::Service>>* (C++ objects). */
    int (*services)(void* algorithm, void* out, char** error);
} rpclb_plugin_table;

/* The name of the function a plugin exports, of type rpclb_plugin_entry. */
#define RPCLB_PLUGIN_ENTRY_SYMBOL "rpclb_plugin"
typedef const rpclb_plugin_table* rpclb_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* RPCLB_PLUGIN_ABI_H */
