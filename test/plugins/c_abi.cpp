// A plugin written against the C boundary alone, as a C compiler sees it: no rpclb C++
// header, no C++ type, the table filled by hand and reporting the previous rpclb release
// of this contract. The loader must load it and its functions must serve. It picks the
// member with the fewest calls in flight, the last such in list order (reading the host's
// counts with atomic loads); an empty list is refused with 503 and Failure::no_members;
// option "fail_init" makes init fail with a message of its own.
#include <rpclb/plugin_abi.h>

#include <stdlib.h>
#include <string.h>

extern "C" {

static char* copy(const char* text) {
    char* out = (char*)malloc(strlen(text) + 1);
    if (out) strcpy(out, text);
    return out;
}

static void free_string(char* text) { free(text); }

typedef struct algorithm {
    int picks;
} algorithm;

static void* create(char** error) {
    algorithm* a = (algorithm*)calloc(1, sizeof(algorithm));
    if (!a) *error = copy("c_abi: out of memory");
    return a;
}

static void destroy(void* a) { free(a); }

static int init(void* a, const rpclb_plugin_context* context, rpclb_plugin_text options, char** error) {
    (void)a;
    (void)context;
    static const char fail[] = "\"fail_init\"";
    for (size_t i = 0; i + sizeof fail - 1 <= options.size; ++i)
        if (memcmp(options.data + i, fail, sizeof fail - 1) == 0) {
            *error = copy("c_abi: init refused by option fail_init");
            return RPCLB_PLUGIN_THREW;
        }
    return RPCLB_PLUGIN_OK;
}

// The view is the host's struct itself, copied: its arrays live as long as the view.
static void* open_members(void* a, const rpclb_plugin_members* members, char** error) {
    (void)a;
    rpclb_plugin_members* view = (rpclb_plugin_members*)malloc(sizeof *view);
    if (!view) {
        *error = copy("c_abi: out of memory");
        return NULL;
    }
    *view = *members;
    view->nodes = NULL;  // valid only during open_members
    return view;
}

static void close_members(void* view) { free(view); }

static int refuse(rpclb_plugin_error* error) {
    error->code = 503;
    error->failure = 1;
    error->message = copy("c_abi: no members");
    return RPCLB_PLUGIN_REFUSED;
}

static int64_t load(const rpclb_plugin_members* m, size_t i) {
    return m->in_flight ? __atomic_load_n(m->in_flight[i], __ATOMIC_RELAXED) : 0;
}

static int choose(void* a, void* view, const rpclb_plugin_pick* pick, size_t* index, rpclb_plugin_error* error) {
    (void)pick;
    const rpclb_plugin_members* m = (const rpclb_plugin_members*)view;
    if (m->size == 0) return refuse(error);
    size_t best = m->size - 1;
    for (size_t i = m->size; i-- > 0;)
        if (load(m, i) < load(m, best)) best = i;
    ((algorithm*)a)->picks++;
    *index = best;
    return RPCLB_PLUGIN_OK;
}

static int choose_many(void* a, void* view, size_t wanted, const rpclb_plugin_pick* pick, size_t* indices,
                       size_t capacity, size_t* count, rpclb_plugin_error* error) {
    (void)a;
    (void)pick;
    const rpclb_plugin_members* m = (const rpclb_plugin_members*)view;
    if (m->size == 0) return refuse(error);
    size_t n = wanted < m->size ? wanted : m->size;
    for (size_t i = 0; i < n && i < capacity; ++i) indices[i] = m->size - 1 - i;
    *count = n;
    return RPCLB_PLUGIN_OK;
}

static int release(void* a, void* view, size_t index, const rpclb_plugin_outcome* outcome, char** error) {
    (void)a;
    (void)view;
    (void)index;
    (void)outcome;
    (void)error;
    return RPCLB_PLUGIN_OK;
}

static int node_change(void* a, int change, const rpclb_plugin_text* nodes, size_t size, char** error) {
    (void)a;
    (void)change;
    (void)nodes;
    (void)size;
    (void)error;
    return RPCLB_PLUGIN_OK;
}

static int local(void* a, int* answer, char** error) {
    (void)a;
    (void)error;
    *answer = 0;
    return RPCLB_PLUGIN_OK;
}

static int services(void* a, void* out, char** error) {
    (void)a;
    (void)out;
    (void)error;
    return RPCLB_PLUGIN_OK;
}

static const rpclb_plugin_table table = {
    7, sizeof(rpclb_plugin_table), "c_abi", "0.0.9", "a C compiler", 0,
    free_string, create, destroy, init, open_members, close_members, choose, choose_many, release,
    node_change, local, services};

__attribute__((visibility("default"))) const rpclb_plugin_table* rpclb_plugin(void) { return &table; }

}  // extern "C"
