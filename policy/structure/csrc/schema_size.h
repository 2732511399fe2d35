/* Sizing tool schemas: what the walk (schema_walk.c) and the ToolSizer type
 * that builds its tables and serves it to Python (schema_sizer.c) share. */
#ifndef DRAFTGATE_SCHEMA_SIZE_H
#define DRAFTGATE_SCHEMA_SIZE_H

#include "speedups.h"

#include <string.h>

/* The keywords the walk reads: the slots of a node. */
enum {
    K_TYPE, K_PROPERTIES, K_REQUIRED, K_ADDITIONAL, K_REF, K_CONST, K_ENUM, K_ANY_OF, K_ONE_OF, K_ALL_OF,
    K_ITEMS, K_PREFIX_ITEMS, K_MIN_ITEMS, K_MAX_ITEMS, K_FORMAT, K_MAX_LENGTH, K_MIN_LENGTH, K_SLOTS
};

/* A name in one of the tables below. */
typedef struct {
    char text[32];
    Py_ssize_t length;
} Name;

/* A key a node may hold: the slot it fills (-1: none), whether a plain leaf may
 * hold it, and whether it decides a node's size before its type does. */
typedef struct {
    Name name;
    int slot, plain, shaping;
} Keyword;

/* What a type name means once aliases are applied, and its size as a plain leaf (-1: none). */
enum { T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_BOOLEAN, T_NULL, T_UNKNOWN };
typedef struct {
    Name name;
    int kind;
    double leaf;
} TypeName;

#define MAX_KEYWORDS 64
#define MAX_TYPES 64

/* The tables and numbers of one set of priors (the ToolSizer object). */
typedef struct {
    PyObject_HEAD
    Keyword keywords[MAX_KEYWORDS];
    int keyword_count;
    TypeName types[MAX_TYPES];
    int type_count;
    PyObject *formats, *no_parameters;
    double string_chars, number_chars, optional_share, open_keys, array_items;
    Py_ssize_t max_nodes, max_depth, max_tools;
} Sizer;

#define SEEN 32 /* keys remembered per walk: a power of two */

/* One walk: the tools of one call, each sized from its own root. */
typedef struct {
    const Sizer *z;
    PyObject *root, *resolving;
    Py_ssize_t nodes;
    int stop; /* gave up: the Python walk sizes this schema */
    /* json.loads makes one str of each distinct key of a document, so a key met
     * once is known by its address after that; the body holds it for the call */
    PyObject *seen[SEEN];
    int seen_as[SEEN];
} Walk;

/* The index of ``key`` in a table of ``count`` rows, each beginning with its Name,
 * or -1. Keys are short and tables small: a scan that mostly compares lengths
 * costs less than hashing. */
static inline int find(const void *rows, size_t stride, int count, PyObject *key)
{
    if (!PyUnicode_IS_COMPACT_ASCII(key))
        return -1; /* every name in the tables is ASCII */
    Py_ssize_t length = PyUnicode_GET_LENGTH(key);
    const char *text = (const char *)PyUnicode_DATA(key);
    for (int i = 0; i < count; i++) {
        const Name *name = (const Name *)((const char *)rows + (size_t)i * stride);
        if (name->length == length && memcmp(name->text, text, (size_t)length) == 0)
            return i;
    }
    return -1;
}

#define FIND_KEYWORD(z, key) find((z)->keywords, sizeof(Keyword), (z)->keyword_count, (key))
#define FIND_TYPE(z, key) find((z)->types, sizeof(TypeName), (z)->type_count, (key))

/* Sizes one tool: 1 with its name (borrowed) and size, 0 where the Python walk must. */
int size_tool(Walk *w, PyObject *tool, PyObject **name, double *size);

/* The names the walk compares with; made once, when the module is. */
int schema_walk_init(void);

#endif
