/* What the parts of policy.structure._speedups share.
 *
 * Each part follows a Python function step by step and hands a case back
 * (None) wherever the Python would note something in the reasons, or meets a
 * type it does not expect: the Python then answers. So the Python stays the
 * definition, and tests/test_speedups.py holds the two to the same answers.
 */
#ifndef DRAFTGATE_SPEEDUPS_H
#define DRAFTGATE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Keys the parts look up in a tool definition, interned at import. */
extern PyObject *s_function, *s_name, *s_parameters, *s_properties, *s_description;

/* A value of a subclassed built-in type: only Python callers make one, and its
 * methods may do anything, so the Python handles it. The exact types come
 * first: they are what JSON gives, and PyFloat_Check on anything else asks the
 * type's whole ancestry. */
static inline int subclassed(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyUnicode_Type || t == &PyDict_Type || t == &PyList_Type || t == &PyLong_Type ||
        t == &PyFloat_Type || t == &PyBool_Type || o == Py_None)
        return 0;
    return PyDict_Check(o) || PyList_Check(o) || PyUnicode_Check(o) || PyLong_Check(o) || PyFloat_Check(o);
}

/* Names the parts compare with or write, interned when the module is made. */
typedef struct {
    PyObject **slot;
    const char *text;
} Interned;

static inline int intern_all(const Interned *names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

#define INTERN_ALL(names) intern_all((names), sizeof(names) / sizeof((names)[0]))

/* The parts: each adds its type or function to the module. */
int add_tool_sizer(PyObject *module);
int add_word_test(PyObject *module);
int add_shape_text(PyObject *module);
int add_conversation_reader(PyObject *module);

#endif
