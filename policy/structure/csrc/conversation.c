/* Reading the conversation: estimator._read_conversation in C.
 *
 * Every chat request is read for its messages (is the last a tool result, did an
 * earlier assistant turn call tools, what did the user last ask, how long is the
 * prompt), and agents resend long histories; in Python the pass cost more than
 * everything else the estimate does for a short request.
 */
#include "speedups.h"

typedef struct {
    PyObject_HEAD
    Py_ssize_t recent, chars_per_call, chars_per_message;
} Reader;

static PyObject *s_role, *s_content, *s_tool_calls, *s_text;

/* ``value == text`` for a JSON value, as Python compares them; -1: the Python must. */
static int equals(PyObject *value, const char *text)
{
    if (value == NULL || !PyUnicode_Check(value))
        return value != NULL && subclassed(value) ? -1 : 0;
    if (!PyUnicode_CheckExact(value))
        return -1;
    return PyUnicode_CompareWithASCIIString(value, text) == 0;
}

/* The characters of a message's content parts: len(str(part.get("text", ""))) each. */
static Py_ssize_t part_chars(PyObject *parts)
{
    Py_ssize_t chars = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (!PyDict_Check(part))
            continue;
        if (!PyDict_CheckExact(part))
            return -1;
        PyObject *text = PyDict_GetItemWithError(part, s_text);
        if (text == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if (PyUnicode_CheckExact(text)) {
            chars += PyUnicode_GET_LENGTH(text);
            continue;
        }
        if (subclassed(text)) /* str() of a subclass may be anything */
            return -1;
        PyObject *shown = PyObject_Str(text);
        if (shown == NULL)
            return -1;
        chars += PyUnicode_GET_LENGTH(shown);
        Py_DECREF(shown);
    }
    return chars;
}

PyDoc_STRVAR(read_doc,
"read(messages) -> (after_tool, agent_called, question, chars) | None\n\n"
"The messages as the estimate reads them; None where the Python must.");

static PyObject *reader_read(Reader *r, PyObject *messages)
{
    if (subclassed(messages))
        Py_RETURN_NONE;
    if (!PyList_Check(messages) || PyList_GET_SIZE(messages) == 0) /* no conversation */
        return Py_BuildValue("(OOOn)", Py_False, Py_False, Py_None, (Py_ssize_t)0);
    Py_ssize_t n = PyList_GET_SIZE(messages), recent = n - r->recent, chars = 0;
    int agent_called = 0;
    PyObject *question = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        if (!PyDict_Check(m))
            continue;
        if (!PyDict_CheckExact(m))
            Py_RETURN_NONE;
        PyObject *role = PyDict_GetItemWithError(m, s_role), *content = PyDict_GetItemWithError(m, s_content);
        PyObject *calls = PyDict_GetItemWithError(m, s_tool_calls);
        if (PyErr_Occurred() || (content != NULL && subclassed(content)) || (calls != NULL && subclassed(calls)))
            goto python;
        if (content != NULL && PyUnicode_Check(content))
            chars += PyUnicode_GET_LENGTH(content);
        else if (content != NULL && PyList_Check(content)) {
            Py_ssize_t parts = part_chars(content);
            if (parts < 0)
                goto python;
            chars += parts;
        }
        if (calls != NULL && PyList_Check(calls))
            chars += r->chars_per_call * PyList_GET_SIZE(calls);
        chars += r->chars_per_message;
        int user = equals(role, "user");
        if (user < 0)
            goto python;
        if (user) {
            question = content;
            continue;
        }
        int assistant = i >= recent && calls != NULL ? equals(role, "assistant") : 0;
        int called = assistant > 0 ? PyObject_IsTrue(calls) : 0;
        if (assistant < 0 || called < 0)
            goto python;
        agent_called |= called;
    }
    PyObject *last = PyList_GET_ITEM(messages, n - 1);
    int after_tool = 0;
    if (PyDict_CheckExact(last)) {
        PyObject *role = PyDict_GetItemWithError(last, s_role);
        int tool = equals(role, "tool"), function = tool == 0 ? equals(role, "function") : 0;
        if (tool < 0 || function < 0 || PyErr_Occurred())
            goto python;
        after_tool = tool || function;
    }
    else if (PyDict_Check(last))
        goto python;
    if (question == NULL || !PyUnicode_CheckExact(question) || PyUnicode_GET_LENGTH(question) == 0)
        question = Py_None;
    return Py_BuildValue("(OOOn)", after_tool ? Py_True : Py_False, agent_called ? Py_True : Py_False, question,
                         chars);
python:
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t recent, chars_per_call, chars_per_message;
    if (!PyArg_ParseTuple(args, "nnn:ConversationReader", &recent, &chars_per_call, &chars_per_message))
        return NULL;
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r != NULL) {
        r->recent = recent;
        r->chars_per_call = chars_per_call;
        r->chars_per_message = chars_per_message;
    }
    return (PyObject *)r;
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)reader_read, METH_O, read_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(reader_doc,
"ConversationReader(recent, chars_per_call, chars_per_message)\n\n"
"The estimate's reading of a chat request's messages, with its constants.");

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "policy.structure._speedups.ConversationReader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = reader_doc,
    .tp_new = reader_new,
    .tp_methods = reader_methods,
};

int add_conversation_reader(PyObject *module)
{
    const Interned names[] = {
        {&s_role, "role"}, {&s_content, "content"}, {&s_tool_calls, "tool_calls"}, {&s_text, "text"},
    };
    return INTERN_ALL(names) < 0 ? -1 : PyModule_AddType(module, &ReaderType);
}
