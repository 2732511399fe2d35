/* The estimate's two hot loops in C: sizing tool schemas, and the relevance test.
 *
 * They run on every request with tools, beside parsing its body, and in Python
 * they cost more than the parse. Each function here follows a Python one step
 * by step (schema_length.SchemaWalk, relevance.unrelated_to_tools) and gives up
 * wherever the Python would note something in the reasons, or meets a type it
 * does not expect: the Python then does that part. So the Python stays the
 * definition, and tests/test_speedups.py holds the two to the same answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

static PyObject *s_type, *s_properties, *s_required, *s_additional, *s_ref, *s_const, *s_enum, *s_any_of,
    *s_one_of, *s_all_of, *s_items, *s_prefix_items, *s_min_items, *s_max_items, *s_format, *s_max_length,
    *s_min_length, *s_function, *s_name, *s_parameters, *s_description, *s_null, *s_slash;

typedef struct {
    PyObject *leaf, *plain, *shaping, *aliases, *formats; /* the Python walk's own tables */
    double string_chars, number_chars, optional_share, open_keys, array_items;
    Py_ssize_t max_nodes, max_depth;
    PyObject *root, *resolving;
    Py_ssize_t nodes;
    int stop; /* gave up: the Python walk sizes this schema */
} Walk;

static double chars(Walk *w, PyObject *schema, Py_ssize_t depth);

static double give_up(Walk *w)
{
    PyErr_Clear(); /* whatever went wrong, the Python walk meets it again and says so */
    w->stop = 1;
    return 0.0;
}

static int subclassed(PyObject *o)
{
    return (PyDict_Check(o) && !PyDict_CheckExact(o)) || (PyList_Check(o) && !PyList_CheckExact(o)) ||
           (PyUnicode_Check(o) && !PyUnicode_CheckExact(o)) ||
           (PyLong_Check(o) && !PyLong_CheckExact(o) && !PyBool_Check(o)) || (PyFloat_Check(o) && !PyFloat_CheckExact(o));
}

/* schema.get(key), borrowed; NULL when absent. A subclassed value stops the walk. */
static PyObject *get(Walk *w, PyObject *dict, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL) {
        if (PyErr_Occurred())
            give_up(w);
        return NULL;
    }
    if (subclassed(value)) {
        give_up(w);
        return NULL;
    }
    return value;
}

static int keys_within(PyObject *dict, PyObject *set)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value))
        if (PySet_Contains(set, key) != 1)
            return 0;
    return 1;
}

static int keys_meet(PyObject *dict, PyObject *set)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value))
        if (PySet_Contains(set, key) == 1)
            return 1;
    return 0;
}

/* The leaf size of a plain {"type": ..., "description": ...} node, or -1. */
static double plain_leaf(Walk *w, PyObject *schema)
{
    PyObject *kind = PyDict_GetItemWithError(schema, s_type);
    if (kind == NULL || !PyUnicode_CheckExact(kind) || !keys_within(schema, w->plain))
        return -1.0;
    PyObject *size = PyDict_GetItemWithError(w->leaf, kind);
    return size == NULL || !PyFloat_CheckExact(size) ? -1.0 : PyFloat_AS_DOUBLE(size);
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

static double walk_object(Walk *w, PyObject *schema, Py_ssize_t depth)
{
    PyObject *props = get(w, schema, s_properties), *required = get(w, schema, s_required);
    if (w->stop)
        return 0.0;
    if (required != NULL && !PyList_CheckExact(required))
        required = NULL;
    else if (required != NULL && PyList_GET_SIZE(required) > 16)
        return give_up(w); /* long lists are read as sets in Python: not worth a second copy */
    double total = 2.0, keys = 0.0;
    if (props != NULL && PyDict_CheckExact(props) && PyDict_GET_SIZE(props) > 0) {
        if (PyDict_GET_SIZE(props) > w->max_nodes)
            return give_up(w);
        Py_ssize_t pos = 0;
        PyObject *name, *sub;
        while (PyDict_Next(props, &pos, &name, &sub)) {
            if (!PyUnicode_CheckExact(name))
                return give_up(w);
            double share = w->optional_share;
            for (Py_ssize_t i = 0; required != NULL && i < PyList_GET_SIZE(required); i++) {
                int same = PyObject_RichCompareBool(PyList_GET_ITEM(required, i), name, Py_EQ);
                if (same < 0)
                    return give_up(w);
                if (same) {
                    share = 1.0;
                    break;
                }
            }
            if (share <= 0)
                continue;
            double value = PyDict_CheckExact(sub) ? plain_leaf(w, sub) : -1.0;
            if (value > 0)
                w->nodes++;
            else if ((value = chars(w, sub, depth + 1)), w->stop)
                return 0.0;
            total += share * ((double)PyUnicode_GET_LENGTH(name) + 3.0 + value);
            keys += share;
        }
    }
    else if (props != NULL && props != Py_None && !PyDict_CheckExact(props))
        return give_up(w); /* 'properties' that is not an object: the Python notes it */
    else {
        PyObject *extra = get(w, schema, s_additional);
        if (w->stop)
            return 0.0;
        if (extra != Py_False) {
            double n = w->open_keys;
            double value = chars(w, extra != NULL && PyDict_CheckExact(extra) ? extra : Py_True, depth + 1);
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
        sum += chars(w, PyList_GET_ITEM(list, i), depth + 1) + 1.0;
    return 2.0 + sum;
}

static double walk_array(Walk *w, PyObject *schema, Py_ssize_t depth)
{
    PyObject *items = get(w, schema, s_items), *prefix = get(w, schema, s_prefix_items);
    double lo = bound(get(w, schema, s_min_items)), hi = bound(get(w, schema, s_max_items));
    if (w->stop)
        return 0.0;
    double count = w->array_items;
    if (lo >= 0 && lo > count)
        count = lo;
    if (hi >= 0 && hi < count)
        count = hi;
    if (prefix != NULL && PyList_CheckExact(prefix) && PyList_GET_SIZE(prefix) > 0)
        return walk_sequence(w, prefix, depth);
    if (items != NULL && PyList_CheckExact(items))
        return walk_sequence(w, items, depth);
    double value = chars(w, items == NULL ? Py_True : items, depth + 1);
    return 2.0 + count * (value + 1.0);
}

static double walk_typed(Walk *w, PyObject *schema, Py_ssize_t depth)
{
    PyObject *kind = get(w, schema, s_type);
    if (w->stop)
        return 0.0;
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
    if (kind == NULL || !PyUnicode_CheckExact(kind)) { /* no usable type: guessed from the keys */
        if (PyDict_Contains(schema, s_properties) == 1)
            return walk_object(w, schema, depth);
        if (PyDict_Contains(schema, s_items) == 1)
            return walk_array(w, schema, depth);
        kind = NULL; /* a string */
    }
    else {
        PyObject *alias = PyDict_GetItemWithError(w->aliases, kind);
        if (alias != NULL)
            kind = alias;
        else if (PyErr_Occurred())
            return give_up(w);
        if (PyUnicode_CompareWithASCIIString(kind, "object") == 0)
            return walk_object(w, schema, depth);
        if (PyUnicode_CompareWithASCIIString(kind, "array") == 0)
            return walk_array(w, schema, depth);
        if (PyUnicode_CompareWithASCIIString(kind, "integer") == 0 || PyUnicode_CompareWithASCIIString(kind, "number") == 0)
            return w->number_chars;
        if (PyUnicode_CompareWithASCIIString(kind, "boolean") == 0)
            return 4.5;
        if (PyUnicode_CompareWithASCIIString(kind, "null") == 0)
            return 4.0;
        if (PyUnicode_CompareWithASCIIString(kind, "string") != 0)
            return give_up(w); /* an unknown type: the Python notes it */
    }
    PyObject *fmt = get(w, schema, s_format);
    if (w->stop)
        return 0.0;
    if (fmt != NULL && PyUnicode_CheckExact(fmt)) {
        PyObject *size = PyDict_GetItemWithError(w->formats, fmt);
        if (size != NULL)
            return PyFloat_AsDouble(size) + 2.0;
        if (PyErr_Occurred())
            return give_up(w);
    }
    double size = w->string_chars;
    double most = bound(get(w, schema, s_max_length)), least = bound(get(w, schema, s_min_length));
    if (w->stop)
        return 0.0;
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
    double size = chars(w, target, depth + 1);
    PySet_Discard(w->resolving, ref);
    return size;
}

static double chars(Walk *w, PyObject *schema, Py_ssize_t depth)
{
    if (w->stop)
        return 0.0;
    if (PyDict_CheckExact(schema)) {
        double leaf = plain_leaf(w, schema);
        if (leaf >= 0) {
            w->nodes++;
            return leaf;
        }
    }
    w->nodes++;
    /* 256: the C stack's own bound, whatever depth the priors allow */
    if (w->nodes > w->max_nodes || depth > w->max_depth || depth > 256 || subclassed(schema))
        return give_up(w);
    if (schema == Py_True)
        return w->string_chars;
    if (!PyDict_CheckExact(schema))
        return give_up(w);
    if (PyDict_GET_SIZE(schema) == 0)
        return w->string_chars;
    PyObject *kind = get(w, schema, s_type);
    if (w->stop)
        return 0.0;
    if (kind != NULL && PyUnicode_CheckExact(kind) && PyUnicode_CompareWithASCIIString(kind, "object") == 0 &&
        !keys_meet(schema, w->shaping))
        return walk_object(w, schema, depth);
    PyObject *ref = get(w, schema, s_ref);
    if (w->stop)
        return 0.0;
    if (ref != NULL && PyUnicode_CheckExact(ref))
        return walk_ref(w, ref, depth);
    PyObject *constant = get(w, schema, s_const);
    if (w->stop)
        return 0.0;
    if (constant != NULL)
        return compact_len(w, constant);
    PyObject *options = get(w, schema, s_enum);
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
    PyObject *either[2] = {s_any_of, s_one_of};
    for (int k = 0; k < 2; k++) {
        options = get(w, schema, either[k]);
        if (options != NULL && PyList_CheckExact(options) && PyList_GET_SIZE(options) > 0) {
            Py_ssize_t n = PyList_GET_SIZE(options) < 16 ? PyList_GET_SIZE(options) : 16;
            double sum = 0.0;
            for (Py_ssize_t i = 0; i < n && !w->stop; i++)
                sum += chars(w, PyList_GET_ITEM(options, i), depth + 1);
            return sum / (double)n;
        }
    }
    options = get(w, schema, s_all_of);
    if (options != NULL && PyList_CheckExact(options) && PyList_GET_SIZE(options) > 0) {
        Py_ssize_t n = PyList_GET_SIZE(options) < 16 ? PyList_GET_SIZE(options) : 16;
        double sum = 0.0;
        for (Py_ssize_t i = 0; i < n && !w->stop; i++)
            sum += chars(w, PyList_GET_ITEM(options, i), depth + 1);
        sum -= 2.0 * (double)(n - 1);
        return sum > 2.0 ? sum : 2.0;
    }
    if (w->stop)
        return 0.0;
    return walk_typed(w, schema, depth);
}

PyDoc_STRVAR(size_tools_doc,
"size_tools(tools, limit, tables, numbers) -> list\n\n"
"For each of the first ``limit`` tools, (name, expected argument characters), or\n"
"None where the Python walk must size it (it has something to note).");

static PyObject *size_tools(PyObject *module, PyObject *args)
{
    Walk w = {0};
    PyObject *tools, *no_parameters;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!n(O!O!O!O!O!O!)(dddddnn)", &PyList_Type, &tools, &limit, &PyDict_Type, &w.leaf,
                          &PyFrozenSet_Type, &w.plain, &PyFrozenSet_Type, &w.shaping, &PyDict_Type, &w.aliases,
                          &PyDict_Type, &w.formats, &PyDict_Type, &no_parameters, &w.string_chars, &w.number_chars,
                          &w.optional_share, &w.open_keys, &w.array_items, &w.max_nodes, &w.max_depth))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(tools) < limit ? PyList_GET_SIZE(tools) : limit;
    PyObject *sizes = PyList_New(n);
    for (Py_ssize_t i = 0; sizes != NULL && i < n; i++) {
        PyObject *tool = PyList_GET_ITEM(tools, i), *entry = NULL;
        PyObject *fn = PyDict_CheckExact(tool) ? PyDict_GetItemWithError(tool, s_function) : NULL;
        PyObject *name = fn != NULL && PyDict_CheckExact(fn) ? PyDict_GetItemWithError(fn, s_name) : NULL;
        if (name != NULL && PyUnicode_CheckExact(name) && PyUnicode_GET_LENGTH(name) > 0) {
            PyObject *params = PyDict_GetItemWithError(fn, s_parameters);
            w.root = params == NULL ? no_parameters : params;
            w.nodes = 0;
            w.stop = !PyDict_CheckExact(w.root); /* not an object: the Python notes it */
            double size = chars(&w, w.root, 0);
            if (!w.stop)
                entry = Py_BuildValue("(Od)", name, size);
            if (w.resolving != NULL)
                PySet_Clear(w.resolving);
        }
        PyErr_Clear();
        if (entry == NULL)
            entry = Py_NewRef(Py_None);
        PyList_SET_ITEM(sizes, i, entry);
    }
    Py_XDECREF(w.resolving);
    return sizes;
}

/* ------------------------------------------------------------------ relevance */

/* A word as a key: its first five letters (or all four) and how many. */
typedef uint64_t Stem;

static Stem stem_of(const char *letters, Py_ssize_t length)
{
    Stem key = (Stem)(length < 5 ? length : 5) << 40;
    for (Py_ssize_t i = 0; i < length && i < 5; i++)
        key |= (Stem)(unsigned char)letters[i] << (8 * i);
    return key;
}

/* Calls ``found(stem)`` for each word of four or more ASCII letters in text[:limit];
 * stops, returning 1, when it returns 1. */
static int each_stem(PyObject *text, Py_ssize_t limit, int (*found)(Stem, void *), void *state)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text) < limit ? PyUnicode_GET_LENGTH(text) : limit, length = 0;
    char letters[5];
    for (Py_ssize_t i = 0; i <= n; i++) {
        Py_UCS4 c = i < n ? PyUnicode_READ(kind, data, i) : ' ';
        if (c >= 'A' && c <= 'Z')
            c += 32;
        if (c >= 'a' && c <= 'z') {
            if (length < 5)
                letters[length] = (char)c;
            length++;
            continue;
        }
        if (length >= 4 && found(stem_of(letters, length), state))
            return 1;
        length = 0;
    }
    return 0;
}

typedef struct {
    Stem *stems;
    Py_ssize_t count, room;
    PyObject *stop_words;
} Question;

static int add_stem(Stem stem, void *state)
{
    Question *q = state;
    char letters[5];
    Py_ssize_t length = (Py_ssize_t)(stem >> 40);
    for (Py_ssize_t i = 0; i < length; i++)
        letters[i] = (char)(stem >> (8 * i));
    PyObject *word = PyBytes_FromStringAndSize(letters, length);
    int stop = word == NULL ? -1 : PySet_Contains(q->stop_words, word);
    Py_XDECREF(word);
    if (stop < 0)
        return 1;
    if (!stop && q->count < q->room)
        q->stems[q->count++] = stem;
    return 0;
}

static int asked(Stem stem, void *state)
{
    Question *q = state;
    for (Py_ssize_t i = 0; i < q->count; i++)
        if (q->stems[i] == stem)
            return 1;
    return 0;
}

PyDoc_STRVAR(shares_no_word_doc,
"shares_no_word(question, tools, limits, stop_stems) -> bool | None\n\n"
"True when the question has content words and none is in a tool's name or\n"
"description; None where the Python must answer.");

static PyObject *shares_no_word(PyObject *module, PyObject *args)
{
    PyObject *text, *tools;
    Py_ssize_t question_chars, description_chars, max_tools;
    Question q = {0};
    if (!PyArg_ParseTuple(args, "UO!(nnn)O!", &text, &PyList_Type, &tools, &question_chars, &description_chars,
                          &max_tools, &PyFrozenSet_Type, &q.stop_words))
        return NULL;
    q.room = question_chars / 5 + 1;
    q.stems = PyMem_Malloc(sizeof(Stem) * q.room);
    if (q.stems == NULL)
        return PyErr_NoMemory();
    PyObject *answer = Py_False;
    if (each_stem(text, question_chars, add_stem, &q)) {
        answer = Py_None; /* an error: the Python answers */
        PyErr_Clear();
    }
    else if (q.count > 0) {
        answer = Py_True;
        Py_ssize_t n = PyList_GET_SIZE(tools) < max_tools ? PyList_GET_SIZE(tools) : max_tools;
        for (Py_ssize_t i = 0; i < n && answer == Py_True; i++) {
            PyObject *tool = PyList_GET_ITEM(tools, i);
            if (subclassed(tool)) {
                answer = Py_None;
                break;
            }
            PyObject *fn = PyDict_CheckExact(tool) ? PyDict_GetItemWithError(tool, s_function) : NULL;
            if (fn == NULL || !PyDict_Check(fn))
                continue;
            PyObject *name = PyDict_GetItemWithError(fn, s_name), *words = PyDict_GetItemWithError(fn, s_description);
            if ((name != NULL && PyUnicode_Check(name) && each_stem(name, PY_SSIZE_T_MAX, asked, &q)) ||
                (words != NULL && PyUnicode_Check(words) && each_stem(words, description_chars, asked, &q)))
                answer = Py_False;
        }
        if (PyErr_Occurred()) {
            PyErr_Clear();
            answer = Py_None;
        }
    }
    PyMem_Free(q.stems);
    return Py_NewRef(answer);
}

static PyMethodDef methods[] = {
    {"size_tools", size_tools, METH_VARARGS, size_tools_doc},
    {"shares_no_word", shares_no_word, METH_VARARGS, shares_no_word_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_type, "type"}, {&s_properties, "properties"}, {&s_required, "required"},
        {&s_additional, "additionalProperties"}, {&s_ref, "$ref"}, {&s_const, "const"}, {&s_enum, "enum"},
        {&s_any_of, "anyOf"}, {&s_one_of, "oneOf"}, {&s_all_of, "allOf"}, {&s_items, "items"},
        {&s_prefix_items, "prefixItems"}, {&s_min_items, "minItems"}, {&s_max_items, "maxItems"},
        {&s_format, "format"}, {&s_max_length, "maxLength"}, {&s_min_length, "minLength"},
        {&s_function, "function"}, {&s_name, "name"}, {&s_parameters, "parameters"},
        {&s_description, "description"}, {&s_null, "null"}, {&s_slash, "/"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
