/* The text a request's shape digest hashes: learner._shape_text in C.
 *
 * The learner keys every request by its shape (model, tool names with their
 * parameter names, tool_choice, output format, thinking, temperature band, last
 * role). The Python reads a dozen fields and joins the tool set; here the same
 * text is written in one pass. A value the Python would show through a
 * subclass's own methods is handed back (None) for the Python to write.
 */
#include "speedups.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_tools;
    PyObject *legacy; /* the guided_* fields, in the order the text names them */
} Shape;

static PyObject *s_model, *s_tools, *s_tool_choice, *s_response_format, *s_type, *s_structured_outputs,
    *s_chat_template_kwargs, *s_enable_thinking, *s_reasoning_effort, *s_temperature, *s_messages, *s_role,
    *s_bar, *s_open, *s_close, *s_comma, *s_semicolon, *s_unknown, *s_none, *s_dash, *s_invalid,
    *s_named, *s_named_as, *s_so, *s_guided, *s_default, *s_greedy, *s_low, *s_high, *s_greedy_below,
    *s_low_below;

/* The text being written: its pieces, each a str, held until they are copied out
 * at once (a list and a join cost more than the rest of the digest). */
typedef struct {
    PyObject **pieces, *few[128];
    Py_ssize_t count, room;
} Text;

/* Adds ``piece``, a new reference it takes (NULL: an error already set): 0, or -1. */
static int put_new(Text *out, PyObject *piece)
{
    if (piece == NULL)
        return -1;
    if (out->count == out->room) {
        Py_ssize_t room = 2 * out->room;
        PyObject **more = out->pieces == out->few ? PyMem_Malloc(sizeof(PyObject *) * (size_t)room)
                                                   : PyMem_Realloc(out->pieces, sizeof(PyObject *) * (size_t)room);
        if (more == NULL) {
            Py_DECREF(piece);
            PyErr_NoMemory();
            return -1;
        }
        if (out->pieces == out->few)
            memcpy(more, out->few, sizeof out->few);
        out->pieces = more;
        out->room = room;
    }
    out->pieces[out->count++] = piece;
    return 0;
}

static int put(Text *out, PyObject *piece)
{
    return put_new(out, Py_NewRef(piece));
}

/* The pieces as one str (NULL when not ``whole`` or on error); the pieces are let go. */
static PyObject *finish(Text *out, int whole)
{
    Py_ssize_t length = 0;
    Py_UCS4 widest = 0;
    for (Py_ssize_t i = 0; whole && i < out->count; i++) {
        length += PyUnicode_GET_LENGTH(out->pieces[i]);
        if (PyUnicode_MAX_CHAR_VALUE(out->pieces[i]) > widest)
            widest = PyUnicode_MAX_CHAR_VALUE(out->pieces[i]);
    }
    /* every piece is a canonical str, so the widest piece's kind is the text's */
    PyObject *text = whole ? PyUnicode_New(length, widest) : NULL;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; text != NULL && i < out->count; i++) {
        PyObject *piece = out->pieces[i];
        Py_ssize_t n = PyUnicode_GET_LENGTH(piece);
        if (PyUnicode_KIND(piece) == PyUnicode_KIND(text))
            memcpy((char *)PyUnicode_DATA(text) + at * PyUnicode_KIND(text), PyUnicode_DATA(piece),
                   (size_t)n * PyUnicode_KIND(text));
        else if (PyUnicode_CopyCharacters(text, at, piece, 0, n) < 0)
            Py_CLEAR(text);
        at += n;
    }
    for (Py_ssize_t i = 0; i < out->count; i++)
        Py_DECREF(out->pieces[i]);
    if (out->pieces != out->few)
        PyMem_Free(out->pieces);
    return text;
}

/* Adds str(value) (None for a missing value): 0, 1 when the Python must, -1 on error. */
static int put_str(Text *out, PyObject *value)
{
    if (value == NULL)
        return put(out, s_none);
    if (PyUnicode_CheckExact(value))
        return put(out, value);
    if (subclassed(value))
        return 1;
    return put_new(out, PyObject_Str(value));
}

/* One tool's "name(key,key)", or "?" without a function object. */
static int put_tool(Text *out, PyObject *tool)
{
    if (subclassed(tool))
        return 1;
    PyObject *fn = PyDict_CheckExact(tool) ? PyDict_GetItemWithError(tool, s_function) : NULL;
    if (PyErr_Occurred())
        return -1;
    if (fn == NULL || !PyDict_Check(fn))
        return put(out, s_unknown);
    if (!PyDict_CheckExact(fn))
        return 1;
    PyObject *params = PyDict_GetItemWithError(fn, s_parameters);
    PyObject *props = params != NULL && PyDict_CheckExact(params) ? PyDict_GetItemWithError(params, s_properties) : NULL;
    if (PyErr_Occurred())
        return -1;
    if ((params != NULL && subclassed(params)) || (props != NULL && subclassed(props)))
        return 1;
    int outcome = put_str(out, PyDict_GetItemWithError(fn, s_name));
    if (outcome != 0 || put(out, s_open) < 0)
        return outcome != 0 ? outcome : -1;
    if (props != NULL && PyDict_CheckExact(props)) {
        Py_ssize_t pos = 0, written = 0;
        PyObject *key, *value;
        while (PyDict_Next(props, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key))
                return 1;
            if ((written++ > 0 && put(out, s_comma) < 0) || put(out, key) < 0)
                return -1;
        }
    }
    return put(out, s_close);
}

static int put_tools(const Shape *shape, Text *out, PyObject *tools)
{
    int truthy = tools == NULL ? 0 : PyObject_IsTrue(tools);
    if (truthy <= 0)
        return truthy < 0 ? -1 : put(out, s_dash);
    if (!PyList_Check(tools))
        return subclassed(tools) ? 1 : put(out, s_invalid);
    if (!PyList_CheckExact(tools))
        return 1;
    Py_ssize_t n = PyList_GET_SIZE(tools) < shape->max_tools ? PyList_GET_SIZE(tools) : shape->max_tools;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i > 0 && put(out, s_semicolon) < 0)
            return -1;
        int outcome = put_tool(out, PyList_GET_ITEM(tools, i));
        if (outcome != 0)
            return outcome;
    }
    return 0;
}

static int put_choice(Text *out, PyObject *choice)
{
    if (choice == NULL || !PyDict_Check(choice))
        return put_str(out, choice);
    if (!PyDict_CheckExact(choice))
        return 1;
    PyObject *fn = PyDict_GetItemWithError(choice, s_function);
    if (fn == NULL || !PyDict_Check(fn))
        return PyErr_Occurred() ? -1 : put(out, s_named);
    if (!PyDict_CheckExact(fn))
        return 1;
    if (put(out, s_named_as) < 0)
        return -1;
    PyObject *name = PyDict_GetItemWithError(fn, s_name);
    return PyErr_Occurred() ? -1 : put_str(out, name);
}

/* response_format's type, "+so:" and the structured_outputs keys set, "+guided:" and the guided_* set. */
static int put_format(const Shape *shape, Text *out, PyObject *body)
{
    PyObject *fmt = PyDict_GetItemWithError(body, s_response_format);
    int outcome;
    if (fmt != NULL && PyDict_CheckExact(fmt))
        outcome = put_str(out, PyDict_GetItemWithError(fmt, s_type));
    else
        outcome = fmt != NULL && subclassed(fmt) ? 1 : put(out, s_dash);
    if (outcome != 0)
        return outcome;
    PyObject *structured = PyDict_GetItemWithError(body, s_structured_outputs);
    if (structured != NULL && PyDict_Check(structured)) {
        if (!PyDict_CheckExact(structured))
            return 1;
        PyObject *keys = PyList_New(0), *key, *value;
        Py_ssize_t pos = 0;
        while (keys != NULL && PyDict_Next(structured, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                Py_DECREF(keys);
                return 1;
            }
            if (value != Py_None && PyList_Append(keys, key) < 0)
                Py_CLEAR(keys);
        }
        PyObject *joined = keys == NULL || PyList_Sort(keys) < 0 ? NULL : PyUnicode_Join(s_comma, keys);
        Py_XDECREF(keys);
        if (joined == NULL || put(out, s_so) < 0 || put_new(out, joined) < 0)
            return -1;
    }
    else if (structured != NULL && subclassed(structured))
        return 1;
    int present = 0, written = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape->legacy); i++)
        if (PyDict_Contains(body, PyTuple_GET_ITEM(shape->legacy, i)) == 1)
            present = 1;
    if (present && put(out, s_guided) < 0)
        return -1;
    for (Py_ssize_t i = 0; present && i < PyTuple_GET_SIZE(shape->legacy); i++) {
        PyObject *name = PyTuple_GET_ITEM(shape->legacy, i), *value = PyDict_GetItemWithError(body, name);
        if (value == NULL || value == Py_None)
            continue;
        if ((written++ > 0 && put(out, s_comma) < 0) || put(out, name) < 0)
            return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* The temperature band: default (not a number), greedy, low or high. */
static int put_band(Text *out, PyObject *temperature)
{
    if (temperature == NULL || !(PyLong_Check(temperature) || PyFloat_Check(temperature)))
        return temperature != NULL && subclassed(temperature) ? 1 : put(out, s_default);
    if (subclassed(temperature))
        return 1;
    int greedy = PyObject_RichCompareBool(temperature, s_greedy_below, Py_LE);
    int low = greedy == 0 ? PyObject_RichCompareBool(temperature, s_low_below, Py_LE) : 0;
    if (greedy < 0 || low < 0)
        return -1;
    return put(out, greedy ? s_greedy : (low ? s_low : s_high));
}

static int put_last_role(Text *out, PyObject *messages)
{
    if (messages == NULL || !PyList_Check(messages))
        return messages != NULL && subclassed(messages) ? 1 : put(out, s_dash);
    if (!PyList_CheckExact(messages))
        return 1;
    PyObject *last = PyList_GET_SIZE(messages) > 0 ? PyList_GET_ITEM(messages, PyList_GET_SIZE(messages) - 1) : NULL;
    if (last == NULL || !PyDict_Check(last))
        return put(out, s_dash);
    if (!PyDict_CheckExact(last))
        return 1;
    PyObject *role = PyDict_GetItemWithError(last, s_role);
    return PyErr_Occurred() ? -1 : put_str(out, role);
}

PyDoc_STRVAR(text_doc,
"text(body, model, temperature) -> str | None\n\n"
"What the shape digest hashes; None where the Python must write it.");

static PyObject *shape_text(Shape *shape, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "text(body, model, temperature)");
        return NULL;
    }
    PyObject *body = args[0], *model = args[1], *temperature = args[2];
    if (!PyDict_CheckExact(body))
        Py_RETURN_NONE;
    int truthy = PyObject_IsTrue(model);
    if (truthy == 0)
        model = PyDict_GetItemWithError(body, s_model);
    if (temperature == Py_None)
        temperature = PyDict_GetItemWithError(body, s_temperature);
    PyObject *kwargs = PyDict_GetItemWithError(body, s_chat_template_kwargs);
    PyObject *thinking = kwargs != NULL && PyDict_CheckExact(kwargs) ? PyDict_GetItemWithError(kwargs, s_enable_thinking) : NULL;
    Text out = {.room = 128};
    out.pieces = out.few;
    int outcome = truthy < 0 || PyErr_Occurred() ? -1 : (kwargs != NULL && subclassed(kwargs)) ? 1 : 0;
    /* model|tools|choice|format|thinking|effort|band|last role */
    if (outcome == 0)
        outcome = put_str(&out, model);
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_tools(shape, &out, PyDict_GetItemWithError(body, s_tools));
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_choice(&out, PyDict_GetItemWithError(body, s_tool_choice));
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_format(shape, &out, body);
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_str(&out, thinking);
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_str(&out, PyDict_GetItemWithError(body, s_reasoning_effort));
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_band(&out, temperature);
    if (outcome == 0)
        outcome = put(&out, s_bar) < 0 ? -1 : put_last_role(&out, PyDict_GetItemWithError(body, s_messages));
    PyObject *text = finish(&out, outcome == 0 && !PyErr_Occurred());
    if (text == NULL) { /* whatever went wrong, the Python meets it again and says so */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return text;
}

static PyObject *shape_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t max_tools;
    PyObject *legacy;
    if (!PyArg_ParseTuple(args, "nO!:ShapeText", &max_tools, &PyTuple_Type, &legacy))
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(legacy); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(legacy, i))) {
            PyErr_SetString(PyExc_TypeError, "the guided fields are names");
            return NULL;
        }
    Shape *shape = (Shape *)type->tp_alloc(type, 0);
    if (shape != NULL) {
        shape->max_tools = max_tools;
        shape->legacy = Py_NewRef(legacy);
    }
    return (PyObject *)shape;
}

static void shape_dealloc(Shape *shape)
{
    Py_XDECREF(shape->legacy);
    Py_TYPE(shape)->tp_free((PyObject *)shape);
}

static PyMethodDef shape_methods[] = {
    {"text", (PyCFunction)(void (*)(void))shape_text, METH_FASTCALL, text_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(shape_doc,
"ShapeText(max_tools, guided_fields)\n\n"
"The shape digest's text, built once with how many tools it names and the\n"
"guided_* fields it reports.");

static PyTypeObject ShapeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "policy.structure._speedups.ShapeText",
    .tp_basicsize = sizeof(Shape),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = shape_doc,
    .tp_new = shape_new,
    .tp_dealloc = (destructor)shape_dealloc,
    .tp_methods = shape_methods,
};

int add_shape_text(PyObject *module)
{
    const Interned names[] = {
        {&s_model, "model"}, {&s_tools, "tools"}, {&s_tool_choice, "tool_choice"},
        {&s_response_format, "response_format"}, {&s_type, "type"}, {&s_structured_outputs, "structured_outputs"},
        {&s_chat_template_kwargs, "chat_template_kwargs"}, {&s_enable_thinking, "enable_thinking"},
        {&s_reasoning_effort, "reasoning_effort"}, {&s_temperature, "temperature"}, {&s_messages, "messages"},
        {&s_role, "role"}, {&s_bar, "|"}, {&s_open, "("}, {&s_close, ")"}, {&s_comma, ","}, {&s_semicolon, ";"},
        {&s_unknown, "?"}, {&s_none, "None"}, {&s_dash, "-"}, {&s_invalid, "invalid"},
        {&s_named, "named"}, {&s_named_as, "named:"}, {&s_so, "+so:"}, {&s_guided, "+guided:"},
        {&s_default, "default"}, {&s_greedy, "greedy"}, {&s_low, "low"}, {&s_high, "high"},
    };
    if (INTERN_ALL(names) < 0)
        return -1;
    if ((s_greedy_below = PyFloat_FromDouble(0.05)) == NULL || (s_low_below = PyFloat_FromDouble(0.7)) == NULL)
        return -1;
    return PyModule_AddType(module, &ShapeType);
}
