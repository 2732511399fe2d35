/* policy.structure._speedups: the estimate's hot loops in C (speedups.py says why).
 *
 * Four parts: sizing tool schemas (schema_walk.c, and schema_sizer.c for its
 * Python type), the relevance test (relevance.c), reading the conversation
 * (conversation.c) and writing the text the shape digest hashes (shape.c).
 * This file makes the module of them.
 */
#include "speedups.h"

PyObject *s_function, *s_name, *s_parameters, *s_properties, *s_description;

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The estimate's hot loops in C (policy/structure/speedups.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    const Interned names[] = {
        {&s_function, "function"}, {&s_name, "name"}, {&s_parameters, "parameters"},
        {&s_properties, "properties"}, {&s_description, "description"},
    };
    if (INTERN_ALL(names) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (add_tool_sizer(m) < 0 || add_word_test(m) < 0 || add_shape_text(m) < 0 ||
        add_conversation_reader(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
