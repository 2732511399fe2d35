/* Sizing tool schemas: schema_length.SchemaWalk in C, for the tools of a request.
 *
 * A walk that asks each node for every keyword it might hold spends its time in
 * lookups, each hashing its way to a string compare. Here a node's own keys (two
 * or three, usually) are read once, each matched to a keyword by its length and
 * bytes, so a node costs what it holds rather than what the walk might ask of it.
 * The keyword and type tables are built from the Python walk's own
 * (schema_length._tables), so the two read the same keys the same way.
 */
#include "schema_size.h"

#include <math.h>
#include <stdint.h>

/* One node's keys, read once. */
typedef struct {
    PyObject *at[K_SLOTS];
    int plain;   /* every key is one a plain leaf may hold */
    int shaping; /* some key decides the size before the type does */
} Node;

static PyObject *s_null, *s_object, *s_array, *s_string, *s_slash;

static double size_of(Walk *w, PyObject *schema, Py_ssize_t depth);
static double size_node(Walk *w, PyObject *schema, const Node *node, Py_ssize_t depth);

static double give_up(Walk *w)
{
    PyErr_Clear(); /* whatever went wrong, the Python walk meets it again and says so */
    w->stop = 1;
    return 0.0;
}

static const TypeName *type_of(const Sizer *z, PyObject *name)
{
    int i = FIND_TYPE(z, name);
    return i < 0 ? NULL : &z->types[i];
}

/* The keyword row of ``key`` (exact str), or -1. */
static inline int keyword_of(Walk *w, PyObject *key)
{
    size_t slot = ((uintptr_t)key >> 4) & (SEEN - 1);
    if (w->seen[slot] == key)
        return w->seen_as[slot];
    int i = FIND_KEYWORD(w->z, key);
    w->seen[slot] = key;
    w->seen_as[slot] = i;
    return i;
}

/* Reads ``schema``'s keys into ``node``; -1 when a value is one the Python must see. */
static int read_node(Walk *w, PyObject *schema, Node *node)
{
    const Sizer *z = w->z;
    memset(node->at, 0, sizeof node->at);
    node->plain = 1;
    node->shaping = 0;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(schema, &pos, &key, &value)) {
        int i = -1;
        if (PyUnicode_CheckExact(key))
            i = keyword_of(w, key);
        else if (PyUnicode_Check(key))
            return -1;
        if (i < 0) {
            node->plain = 0;
            continue;
        }
        const Keyword *k = &z->keywords[i];
        node->plain &= k->plain;
        node->shaping |= k->shaping;
        if (k->slot >= 0) {
            if (subclassed(value))
                return -1;
            node->at[k->slot] = value;
        }
    }
    return 0;
}

/* The size of a plain {"type": ..., "description": ...} node, or -1. */
static double leaf_size(const Sizer *z, const Node *node)
{
    PyObject *kind = node->at[K_TYPE];
    if (!node->plain || kind == NULL || !PyUnicode_CheckExact(kind))
        return -1.0;
    const TypeName *t = type_of(z, kind);
    return t == NULL ? -1.0 : t->leaf;
}

/* _number: a non-negative bound capped at 10,000, or -1 for none. */
static double bound(PyObject *value)
{
    if (value == NULL || PyBool_Check(value))
        return -1.0;
    if (PyFloat_CheckExact(value)) {
        double v = PyFloat_AS_DOUBLE(value);
        return isnan(v) || v < 0 ? -1.0 : (v < 10000.0 ? v : 10000.0);
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow)
            return overflow > 0 ? 10000.0 : -1.0;
        return v < 0 ? -1.0 : (double)(v < 10000 ? v : 10000);
    }
    return -1.0;
}

/* len(_compact(value)) */
static double compact_len(Walk *w, PyObject *value)
{
    if (PyUnicode_CheckExact(value))
        return (double)(PyUnicode_GET_LENGTH(value) + 2);
    if (PyBool_Check(value))
        return value == Py_True ? 4.0 : 5.0;
    if (value == Py_None)
        return 4.0;
    if (PyLong_CheckExact(value) || PyFloat_CheckExact(value)) {
        PyObject *text = PyObject_Repr(value);
        if (text == NULL)
            return give_up(w);
        double n = (double)PyUnicode_GET_LENGTH(text);
        Py_DECREF(text);
        return n;
    }
    if (subclassed(value))
        return give_up(w);
    return 16.0;
}

/* ``item == name`` for a str ``name``, as ``name in required`` asks it; -1: the Python must. */
static int same_text(PyObject *item, PyObject *name)
{
    if (item == name)
        return 1;
    if (!PyUnicode_CheckExact(item)) /* JSON's other values never equal a string */
        return subclassed(item) ? -1 : 0;
    Py_ssize_t length = PyUnicode_GET_LENGTH(item);
    return length == PyUnicode_GET_LENGTH(name) && PyUnicode_KIND(item) == PyUnicode_KIND(name) &&
           memcmp(PyUnicode_DATA(item), PyUnicode_DATA(name), (size_t)length * PyUnicode_KIND(name)) == 0;
}

static double walk_object(Walk *w, const Node *node, Py_ssize_t depth)
{
    PyObject *props = node->at[K_PROPERTIES], *required = node->at[K_REQUIRED];
    if (required != NULL && !PyList_CheckExact(required))
        required = NULL;
    else if (required != NULL && PyList_GET_SIZE(required) > 16)
        return give_up(w); /* long lists are read as sets in Python: not worth a second copy */
    double total = 2.0, keys = 0.0;
    if (props != NULL && PyDict_CheckExact(props) && PyDict_GET_SIZE(props) > 0) {
        if (PyDict_GET_SIZE(props) > w->z->max_nodes)
            return give_up(w);
        Py_ssize_t pos = 0;
        PyObject *name, *sub;
        while (PyDict_Next(props, &pos, &name, &sub)) {
            if (!PyUnicode_CheckExact(name))
                return give_up(w);
            double share = w->z->optional_share;
            for (Py_ssize_t i = 0; required != NULL && i < PyList_GET_SIZE(required); i++) {
                int same = same_text(PyList_GET_ITEM(required, i), name);
                if (same < 0)
                    return give_up(w);
                if (same) {
                    share = 1.0;
                    break;
                }
            }
            if (share <= 0)
                continue;
            double value;
            if (PyDict_CheckExact(sub)) {
                Node inner;
                if (read_node(w, sub, &inner) < 0)
                    return give_up(w);
                value = leaf_size(w->z, &inner);
                if (value > 0) /* plain leaves inline, as in the Python */
                    w->nodes++;
                else
                    value = size_node(w, sub, &inner, depth + 1);
            }
            else
                value = size_of(w, sub, depth + 1);
            if (w->stop)
                return 0.0;
            total += share * ((double)PyUnicode_GET_LENGTH(name) + 3.0 + value);
            keys += share;
        }
    }
    else if (props != NULL && props != Py_None && !PyDict_CheckExact(props))
        return give_up(w); /* 'properties' that is not an object: the Python notes it */
    else {
        PyObject *extra = node->at[K_ADDITIONAL];
        if (extra != Py_False) {
            double n = w->z->open_keys;
            double value = size_of(w, extra != NULL && PyDict_CheckExact(extra) ? extra : Py_True, depth + 1);
            total += n * (8.0 + 3.0 + value);
            keys += n;
        }
    }
    return total + (keys - 1.0 > 0.0 ? keys - 1.0 : 0.0);
}

static double walk_sequence(Walk *w, PyObject *list, Py_ssize_t depth)
{
    double sum = 0.0;
    Py_ssize_t n = PyList_GET_SIZE(list) < 64 ? PyList_GET_SIZE(list) : 64;
    for (Py_ssize_t i = 0; i < n && !w->stop; i++)
        sum += size_of(w, PyList_GET_ITEM(list, i), depth + 1) + 1.0;
    return 2.0 + sum;
}

static double walk_array(Walk *w, const Node *node, Py_ssize_t depth)
{
    PyObject *items = node->at[K_ITEMS], *prefix = node->at[K_PREFIX_ITEMS];
    double lo = bound(node->at[K_MIN_ITEMS]), hi = bound(node->at[K_MAX_ITEMS]);
    double count = w->z->array_items;
    if (lo >= 0 && lo > count)
        count = lo;
    if (hi >= 0 && hi < count)
        count = hi;
    if (prefix != NULL && PyList_CheckExact(prefix) && PyList_GET_SIZE(prefix) > 0)
        return walk_sequence(w, prefix, depth);
    if (items != NULL && PyList_CheckExact(items))
        return walk_sequence(w, items, depth);
    double value = size_of(w, items == NULL ? Py_True : items, depth + 1);
    return 2.0 + count * (value + 1.0);
}

static double walk_typed(Walk *w, const Node *node, Py_ssize_t depth)
{
    PyObject *kind = node->at[K_TYPE];
    if (kind != NULL && PyList_CheckExact(kind)) {
        PyObject *first = s_null;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kind); i++) {
            PyObject *k = PyList_GET_ITEM(kind, i);
            if (subclassed(k))
                return give_up(w);
            if (PyUnicode_CheckExact(k) && PyUnicode_CompareWithASCIIString(k, "null") != 0) {
                first = k;
                break;
            }
        }
        kind = first;
    }
    if (kind == NULL || !PyUnicode_CheckExact(kind)) /* no usable type: guessed from the keys */
        kind = node->at[K_PROPERTIES] != NULL ? s_object : (node->at[K_ITEMS] != NULL ? s_array : s_string);
    const TypeName *t = type_of(w->z, kind);
    switch (t == NULL ? T_UNKNOWN : t->kind) {
    case T_OBJECT:
        return walk_object(w, node, depth);
    case T_ARRAY:
        return walk_array(w, node, depth);
    case T_NUMBER:
        return w->z->number_chars;
    case T_BOOLEAN:
        return 4.5;
    case T_NULL:
        return 4.0;
    case T_STRING:
        break;
    default:
        return give_up(w); /* an unknown type: the Python notes it */
    }
    PyObject *fmt = node->at[K_FORMAT];
    if (fmt != NULL && PyUnicode_CheckExact(fmt)) {
        PyObject *size = PyDict_GetItemWithError(w->z->formats, fmt);
        if (size != NULL)
            return PyFloat_AsDouble(size) + 2.0;
        if (PyErr_Occurred())
            return give_up(w);
    }
    double size = w->z->string_chars;
    double most = bound(node->at[K_MAX_LENGTH]), least = bound(node->at[K_MIN_LENGTH]);
    if (most >= 0 && most < size)
        size = most;
    if (least >= 0 && least > size)
        size = least;
    return size + 2.0;
}

/* "#/a/b": the node it names under the walk's root, borrowed; NULL when it names none. */
static PyObject *resolve(PyObject *root, PyObject *ref)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(ref);
    if (n == 0 || PyUnicode_READ_CHAR(ref, 0) != '#' || PyUnicode_FindChar(ref, '~', 0, n, 1) != -1)
        return NULL; /* escaped parts are rare: left to the Python */
    PyObject *rest = PyUnicode_Substring(ref, 1, n);
    PyObject *parts = rest == NULL ? NULL : PyUnicode_Split(rest, s_slash, -1);
    Py_XDECREF(rest);
    if (parts == NULL)
        return NULL;
    PyObject *node = root;
    for (Py_ssize_t i = 0; node != NULL && i < PyList_GET_SIZE(parts); i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (PyUnicode_GET_LENGTH(part) == 0)
            continue;
        node = PyDict_CheckExact(node) ? PyDict_GetItemWithError(node, part) : NULL;
    }
    Py_DECREF(parts);
    return node;
}

static double walk_ref(Walk *w, PyObject *ref, Py_ssize_t depth)
{
    if (w->resolving == NULL && (w->resolving = PySet_New(NULL)) == NULL)
        return give_up(w);
    PyObject *target = PySet_Contains(w->resolving, ref) == 0 ? resolve(w->root, ref) : NULL;
    if (target == NULL || subclassed(target) || PySet_Add(w->resolving, ref) < 0)
        return give_up(w); /* recursive or dangling: the Python notes it */
    double size = size_of(w, target, depth + 1);
    PySet_Discard(w->resolving, ref);
    return size;
}

/* The summed sizes of anyOf, oneOf or allOf's first 16 options, and in ``count``
 * how many (0: not a non-empty list). */
static double sum_of_options(Walk *w, PyObject *options, Py_ssize_t depth, Py_ssize_t *count)
{
    *count = 0;
    if (options == NULL || !PyList_CheckExact(options) || PyList_GET_SIZE(options) == 0)
        return 0.0;
    *count = PyList_GET_SIZE(options) < 16 ? PyList_GET_SIZE(options) : 16;
    double sum = 0.0;
    for (Py_ssize_t i = 0; i < *count && !w->stop; i++)
        sum += size_of(w, PyList_GET_ITEM(options, i), depth + 1);
    return sum;
}

static double size_of(Walk *w, PyObject *schema, Py_ssize_t depth)
{
    if (w->stop)
        return 0.0;
    if (PyDict_CheckExact(schema)) {
        Node node;
        if (read_node(w, schema, &node) < 0)
            return give_up(w);
        return size_node(w, schema, &node, depth);
    }
    w->nodes++;
    if (schema != Py_True || w->nodes > w->z->max_nodes || depth > w->z->max_depth)
        return give_up(w); /* not a schema, or past a limit: the Python notes it */
    return w->z->string_chars;
}

static double size_node(Walk *w, PyObject *schema, const Node *node, Py_ssize_t depth)
{
    double leaf = leaf_size(w->z, node);
    w->nodes++;
    if (leaf >= 0)
        return leaf;
    /* 256: the C stack's own bound, whatever depth the priors allow */
    if (w->nodes > w->z->max_nodes || depth > w->z->max_depth || depth > 256)
        return give_up(w);
    if (PyDict_GET_SIZE(schema) == 0)
        return w->z->string_chars;
    PyObject *kind = node->at[K_TYPE];
    if (!node->shaping && kind != NULL && PyUnicode_CheckExact(kind) && PyUnicode_CompareWithASCIIString(kind, "object") == 0)
        return walk_object(w, node, depth);
    PyObject *ref = node->at[K_REF];
    if (ref != NULL && PyUnicode_CheckExact(ref))
        return walk_ref(w, ref, depth);
    if (node->at[K_CONST] != NULL)
        return compact_len(w, node->at[K_CONST]);
    PyObject *options = node->at[K_ENUM];
    if (options != NULL && PyList_CheckExact(options) && PyList_GET_SIZE(options) > 0) {
        Py_ssize_t n = PyList_GET_SIZE(options) < 256 ? PyList_GET_SIZE(options) : 256;
        int strings = 1;
        long long letters = 0;
        for (Py_ssize_t i = 0; i < n && strings; i++) {
            PyObject *v = PyList_GET_ITEM(options, i);
            strings = PyUnicode_CheckExact(v);
            letters += strings ? PyUnicode_GET_LENGTH(v) : 0;
        }
        if (strings)
            return (double)letters / (double)n + 2.0;
        double sum = 0.0;
        for (Py_ssize_t i = 0; i < n && !w->stop; i++)
            sum += compact_len(w, PyList_GET_ITEM(options, i));
        return sum / (double)n;
    }
    Py_ssize_t n;
    for (int k = K_ANY_OF; k <= K_ONE_OF; k++) {
        double sum = sum_of_options(w, node->at[k], depth, &n);
        if (n > 0)
            return sum / (double)n;
    }
    double sum = sum_of_options(w, node->at[K_ALL_OF], depth, &n);
    if (n > 0) {
        sum -= 2.0 * (double)(n - 1);
        return sum > 2.0 ? sum : 2.0;
    }
    return walk_typed(w, node, depth);
}

/* Sizes one tool: 1 with its name (borrowed) and size, 0 where the Python walk must. */
int size_tool(Walk *w, PyObject *tool, PyObject **name, double *size)
{
    PyObject *fn = PyDict_CheckExact(tool) ? PyDict_GetItemWithError(tool, s_function) : NULL;
    *name = fn != NULL && PyDict_CheckExact(fn) ? PyDict_GetItemWithError(fn, s_name) : NULL;
    if (*name == NULL || !PyUnicode_CheckExact(*name) || PyUnicode_GET_LENGTH(*name) == 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *params = PyDict_GetItemWithError(fn, s_parameters);
    w->root = params == NULL ? w->z->no_parameters : params;
    w->nodes = 0;
    w->stop = !PyDict_CheckExact(w->root); /* not an object: the Python notes it */
    *size = w->stop ? 0.0 : size_of(w, w->root, 0);
    if (w->resolving != NULL)
        PySet_Clear(w->resolving);
    PyErr_Clear();
    return !w->stop;
}

int schema_walk_init(void)
{
    const Interned names[] = {
        {&s_null, "null"}, {&s_object, "object"}, {&s_array, "array"}, {&s_string, "string"}, {&s_slash, "/"},
    };
    return INTERN_ALL(names);
}
