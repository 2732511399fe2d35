/* The ToolSizer type: the walk's tables, built once for one set of priors from
 * the Python walk's own, and the calls the estimate makes (size, by_name). */
#include "schema_size.h"

/* The keyword each slot of a node holds, as the Python walk spells it. */
static const char *const slot_names[K_SLOTS] = {
    "type", "properties", "required", "additionalProperties", "$ref", "const", "enum", "anyOf", "oneOf",
    "allOf", "items", "prefixItems", "minItems", "maxItems", "format", "maxLength", "minLength",
};

static int copy_name(Name *row, PyObject *name)
{
    if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_COMPACT_ASCII(name) ||
        PyUnicode_GET_LENGTH(name) >= (Py_ssize_t)sizeof row->text) {
        PyErr_Format(PyExc_ValueError, "table entry %R is not a short ASCII string", name);
        return -1;
    }
    row->length = PyUnicode_GET_LENGTH(name);
    memcpy(row->text, PyUnicode_DATA(name), (size_t)row->length);
    return 0;
}

/* The row of ``name`` in a table of ``*count`` rows of ``stride`` bytes, each
 * beginning with its Name; added, zeroed but for the name, when new (``*added``).
 * NULL on error. */
static void *row_of(void *rows, size_t stride, int *count, int most, PyObject *name, int *added)
{
    int i = find(rows, stride, *count, name);
    *added = i < 0;
    if (i >= 0)
        return (char *)rows + (size_t)i * stride;
    if (*count == most) {
        PyErr_Format(PyExc_ValueError, "more than %d names in a table", most);
        return NULL;
    }
    char *row = (char *)rows + (size_t)*count * stride;
    memset(row, 0, stride);
    if (copy_name((Name *)row, name) < 0)
        return NULL;
    (*count)++;
    return row;
}

static Keyword *keyword_row(Sizer *z, PyObject *name)
{
    int added;
    Keyword *k = row_of(z->keywords, sizeof(Keyword), &z->keyword_count, MAX_KEYWORDS, name, &added);
    if (k != NULL && added)
        k->slot = -1;
    return k;
}

static TypeName *type_row(Sizer *z, PyObject *name)
{
    int added;
    TypeName *t = row_of(z->types, sizeof(TypeName), &z->type_count, MAX_TYPES, name, &added);
    if (t != NULL && added) {
        t->kind = T_UNKNOWN;
        t->leaf = -1.0;
    }
    return t;
}

static int kind_named(PyObject *name)
{
    static const struct { const char *text; int kind; } kinds[] = {
        {"object", T_OBJECT}, {"array", T_ARRAY}, {"string", T_STRING}, {"integer", T_NUMBER},
        {"number", T_NUMBER}, {"boolean", T_BOOLEAN}, {"null", T_NULL},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (PyUnicode_CompareWithASCIIString(name, kinds[i].text) == 0)
            return kinds[i].kind;
    return T_UNKNOWN;
}

/* Keywords: the walk's slots, then whatever else the plain and shaping sets name. */
static int build_keywords(Sizer *z, PyObject *plain, PyObject *shaping)
{
    for (int slot = 0; slot < K_SLOTS; slot++) {
        PyObject *name = PyUnicode_InternFromString(slot_names[slot]);
        Keyword *k = name == NULL ? NULL : keyword_row(z, name);
        Py_XDECREF(name);
        if (k == NULL)
            return -1;
        k->slot = slot;
    }
    PyObject *sets[2] = {plain, shaping};
    for (int s = 0; s < 2; s++) {
        PyObject *names = PyObject_GetIter(sets[s]), *name;
        if (names == NULL)
            return -1;
        while ((name = PyIter_Next(names)) != NULL) {
            Keyword *k = keyword_row(z, name);
            Py_DECREF(name);
            if (k == NULL)
                break;
            *(s == 0 ? &k->plain : &k->shaping) = 1;
        }
        Py_DECREF(names);
        if (PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* Types: the kinds the walk knows (first: they are the common ones, and the table
 * is scanned in order), then every name the aliases map and the leaf sizes size. */
static int build_types(Sizer *z, PyObject *leaf_sizes, PyObject *aliases)
{
    const char *known[] = {"string", "number", "integer", "boolean", "object", "array", "null"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        PyObject *text = PyUnicode_InternFromString(known[i]);
        TypeName *t = text == NULL ? NULL : type_row(z, text);
        if (t != NULL)
            t->kind = kind_named(text);
        Py_XDECREF(text);
        if (t == NULL)
            return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(aliases, &pos, &name, &value)) { /* an alias of a known name wins, as in the Python */
        TypeName *t = type_row(z, name);
        if (t == NULL)
            return -1;
        if (!PyUnicode_Check(value)) {
            PyErr_SetString(PyExc_ValueError, "a type alias must name a type");
            return -1;
        }
        t->kind = kind_named(value);
    }
    pos = 0;
    while (PyDict_Next(leaf_sizes, &pos, &name, &value)) {
        TypeName *t = type_row(z, name);
        if (t == NULL)
            return -1;
        if ((t->leaf = PyFloat_AsDouble(value)) == -1.0 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *sizer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *leaf, *plain, *shaping, *aliases, *formats, *no_parameters;
    double string_chars, number_chars, optional_share, open_keys, array_items;
    Py_ssize_t max_nodes, max_depth, max_tools;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!(dddddnnn):ToolSizer", &PyDict_Type, &leaf, &PyFrozenSet_Type, &plain,
                          &PyFrozenSet_Type, &shaping, &PyDict_Type, &aliases, &PyDict_Type, &formats,
                          &PyDict_Type, &no_parameters, &string_chars, &number_chars, &optional_share, &open_keys,
                          &array_items, &max_nodes, &max_depth, &max_tools))
        return NULL;
    Sizer *z = (Sizer *)type->tp_alloc(type, 0);
    if (z == NULL)
        return NULL;
    z->formats = Py_NewRef(formats);
    z->no_parameters = Py_NewRef(no_parameters);
    z->string_chars = string_chars;
    z->number_chars = number_chars;
    z->optional_share = optional_share;
    z->open_keys = open_keys;
    z->array_items = array_items;
    z->max_nodes = max_nodes;
    z->max_depth = max_depth;
    z->max_tools = max_tools;
    if (build_keywords(z, plain, shaping) < 0 || build_types(z, leaf, aliases) < 0) {
        Py_DECREF(z);
        return NULL;
    }
    return (PyObject *)z;
}

static void sizer_dealloc(Sizer *z)
{
    Py_XDECREF(z->formats);
    Py_XDECREF(z->no_parameters);
    Py_TYPE(z)->tp_free((PyObject *)z);
}

PyDoc_STRVAR(size_doc,
"size(tools) -> list\n\n"
"For each of the first ``max_tools`` tools, (name, expected argument characters),\n"
"or None where the Python walk must size it (it has something to note).");

static PyObject *sizer_size(Sizer *z, PyObject *tools)
{
    if (!PyList_CheckExact(tools)) {
        PyErr_SetString(PyExc_TypeError, "tools must be a list");
        return NULL;
    }
    Walk w = {.z = z};
    Py_ssize_t n = PyList_GET_SIZE(tools) < z->max_tools ? PyList_GET_SIZE(tools) : z->max_tools;
    PyObject *sizes = PyList_New(n);
    for (Py_ssize_t i = 0; sizes != NULL && i < n; i++) {
        PyObject *name, *entry = NULL;
        double size;
        if (size_tool(&w, PyList_GET_ITEM(tools, i), &name, &size)) {
            PyObject *chars = PyFloat_FromDouble(size);
            if (chars != NULL && (entry = PyTuple_New(2)) != NULL) {
                PyTuple_SET_ITEM(entry, 0, Py_NewRef(name));
                PyTuple_SET_ITEM(entry, 1, chars);
            }
            else
                Py_XDECREF(chars);
        }
        if (entry == NULL) {
            PyErr_Clear();
            entry = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(sizes, i, entry);
    }
    Py_XDECREF(w.resolving);
    return sizes;
}

PyDoc_STRVAR(by_name_doc,
"by_name(tools) -> (dict, float) | None\n\n"
"Every tool's expected argument characters by name, as dict(size(tools)) has them,\n"
"and the sum over that dict of len(name) + characters; None where the Python must\n"
"size some tool, or there are more than ``max_tools``.");

static PyObject *sizer_by_name(Sizer *z, PyObject *tools)
{
    if (!PyList_CheckExact(tools)) {
        PyErr_SetString(PyExc_TypeError, "tools must be a list");
        return NULL;
    }
    if (PyList_GET_SIZE(tools) > z->max_tools)
        Py_RETURN_NONE;
    Walk w = {.z = z};
    PyObject *sizes = PyDict_New();
    for (Py_ssize_t i = 0; sizes != NULL && i < PyList_GET_SIZE(tools); i++) {
        PyObject *name, *chars;
        double size;
        int sized = size_tool(&w, PyList_GET_ITEM(tools, i), &name, &size);
        if (!sized || (chars = PyFloat_FromDouble(size)) == NULL || PyDict_SetItem(sizes, name, chars) < 0) {
            if (sized)
                Py_XDECREF(chars);
            Py_CLEAR(sizes);
            break;
        }
        Py_DECREF(chars);
    }
    Py_XDECREF(w.resolving);
    if (sizes == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    double total = 0.0; /* in the dict's order, as the Python adds them */
    Py_ssize_t pos = 0;
    PyObject *name, *chars;
    while (PyDict_Next(sizes, &pos, &name, &chars))
        total += (double)PyUnicode_GET_LENGTH(name) + PyFloat_AS_DOUBLE(chars);
    return Py_BuildValue("(Nd)", sizes, total);
}

static PyMethodDef sizer_methods[] = {
    {"size", (PyCFunction)sizer_size, METH_O, size_doc},
    {"by_name", (PyCFunction)sizer_by_name, METH_O, by_name_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(sizer_doc,
"ToolSizer(leaf_sizes, plain_keys, shaping_keys, type_aliases, format_chars, no_parameters,\n"
"          (string_chars, number_chars, optional_share, open_keys, array_items,\n"
"           max_nodes, max_depth, max_tools))\n\n"
"SchemaWalk's sizing of tool schemas, built once for one set of priors.");

static PyTypeObject SizerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "policy.structure._speedups.ToolSizer",
    .tp_basicsize = sizeof(Sizer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = sizer_doc,
    .tp_new = sizer_new,
    .tp_dealloc = (destructor)sizer_dealloc,
    .tp_methods = sizer_methods,
};

int add_tool_sizer(PyObject *module)
{
    return schema_walk_init() < 0 ? -1 : PyModule_AddType(module, &SizerType);
}
