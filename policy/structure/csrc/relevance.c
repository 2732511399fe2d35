/* The relevance test: relevance.question_unrelated in C.
 *
 * A word is a run of four or more ASCII letters, case folded, and is compared on
 * its first five letters; anything else separates words, as the Python's byte
 * translation makes it a space. Words are packed into integers, so the stop
 * words and the question's words are compared as numbers, not looked up.
 */
#include "speedups.h"

#include <stdint.h>

/* A word as a key: its first five letters (or all four) and how many. */
typedef uint64_t Stem;

static Stem stem_of(const char *letters, Py_ssize_t length)
{
    Stem key = (Stem)(length < 5 ? length : 5) << 40;
    for (Py_ssize_t i = 0; i < length && i < 5; i++)
        key |= (Stem)(unsigned char)letters[i] << (8 * i);
    return key;
}

typedef struct {
    PyObject_HEAD
    Py_ssize_t question_chars, description_chars, max_tools;
    Stem *stop;
    Py_ssize_t stop_count;
} WordTest;

/* The question's content words, at most one per five characters it may hold. */
typedef struct {
    const WordTest *test;
    Stem *stems;
    Py_ssize_t count, room;
} Question;

/* Each byte as a word letter (folded to lower case), or 0 where it separates words. */
static unsigned char letter_of[256];

/* Calls ``found(stem)`` for each word of text[:limit]; stops, returning 1, when it returns 1. */
static int each_stem(PyObject *text, Py_ssize_t limit, int (*found)(Stem, void *), void *state)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text) < limit ? PyUnicode_GET_LENGTH(text) : limit, length = 0;
    Stem letters = 0; /* the word's first five, packed as stem_of packs them */
    for (Py_ssize_t i = 0; i <= n; i++) {
        Py_UCS4 c = i == n ? ' ' : kind == PyUnicode_1BYTE_KIND ? ((const Py_UCS1 *)data)[i] : PyUnicode_READ(kind, data, i);
        unsigned char letter = c < 256 ? letter_of[c] : 0;
        if (letter) {
            if (length < 5)
                letters |= (Stem)letter << (8 * length);
            length++;
            continue;
        }
        if (length >= 4 && found(letters | (Stem)(length < 5 ? length : 5) << 40, state))
            return 1;
        length = 0;
        letters = 0;
    }
    return 0;
}

static int add_stem(Stem stem, void *state)
{
    Question *q = state;
    for (Py_ssize_t i = 0; i < q->test->stop_count; i++)
        if (q->test->stop[i] == stem)
            return 0;
    if (q->count < q->room)
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
"shares_no_word(question, tools) -> bool | None\n\n"
"True when the question has content words and none is in a tool's name or\n"
"description; None where the Python must answer.");

static PyObject *shares_no_word(WordTest *test, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "shares_no_word(question: str, tools: list)");
        return NULL;
    }
    PyObject *text = args[0], *tools = args[1];
    /* a word and what ends it take five characters or more */
    Py_ssize_t read = PyUnicode_GET_LENGTH(text) < test->question_chars ? PyUnicode_GET_LENGTH(text) : test->question_chars;
    Question q = {.test = test, .room = read / 5 + 1};
    Stem few[64];
    q.stems = q.room <= 64 ? few : PyMem_Malloc(sizeof(Stem) * (size_t)q.room);
    if (q.stems == NULL)
        return PyErr_NoMemory();
    each_stem(text, test->question_chars, add_stem, &q);
    PyObject *answer = Py_False;
    if (q.count > 0) {
        answer = Py_True;
        Py_ssize_t n = PyList_GET_SIZE(tools) < test->max_tools ? PyList_GET_SIZE(tools) : test->max_tools;
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
                (words != NULL && PyUnicode_Check(words) && each_stem(words, test->description_chars, asked, &q)))
                answer = Py_False;
        }
        if (PyErr_Occurred()) {
            PyErr_Clear();
            answer = Py_None;
        }
    }
    if (q.stems != few)
        PyMem_Free(q.stems);
    return Py_NewRef(answer);
}

static PyObject *word_test_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t question_chars, description_chars, max_tools;
    PyObject *stop_stems;
    if (!PyArg_ParseTuple(args, "nnnO!:WordTest", &question_chars, &description_chars, &max_tools,
                          &PyFrozenSet_Type, &stop_stems))
        return NULL;
    if (question_chars < 0 || description_chars < 0 || max_tools < 0) {
        PyErr_SetString(PyExc_ValueError, "limits must not be negative");
        return NULL;
    }
    WordTest *test = (WordTest *)type->tp_alloc(type, 0);
    if (test == NULL)
        return NULL;
    test->question_chars = question_chars;
    test->description_chars = description_chars;
    test->max_tools = max_tools;
    test->stop = PyMem_Malloc(sizeof(Stem) * (size_t)(PySet_GET_SIZE(stop_stems) + 1));
    if (test->stop == NULL) {
        Py_DECREF(test);
        return PyErr_NoMemory();
    }
    PyObject *stems = PyObject_GetIter(stop_stems), *stem;
    if (stems == NULL) {
        Py_DECREF(test);
        return NULL;
    }
    while ((stem = PyIter_Next(stems)) != NULL) {
        int word = PyBytes_Check(stem) && PyBytes_GET_SIZE(stem) <= 5;
        if (word)
            test->stop[test->stop_count++] = stem_of(PyBytes_AS_STRING(stem), PyBytes_GET_SIZE(stem));
        Py_DECREF(stem);
        if (!word) {
            PyErr_SetString(PyExc_ValueError, "a stop stem is bytes of at most five letters");
            break;
        }
    }
    Py_DECREF(stems);
    if (PyErr_Occurred()) {
        Py_DECREF(test);
        return NULL;
    }
    return (PyObject *)test;
}

static void word_test_dealloc(WordTest *test)
{
    PyMem_Free(test->stop);
    Py_TYPE(test)->tp_free((PyObject *)test);
}

static PyMethodDef word_test_methods[] = {
    {"shares_no_word", (PyCFunction)(void (*)(void))shares_no_word, METH_FASTCALL, shares_no_word_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(word_test_doc,
"WordTest(question_chars, description_chars, max_tools, stop_stems)\n\n"
"The relevance test, built once with its limits and stop words.");

static PyTypeObject WordTestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "policy.structure._speedups.WordTest",
    .tp_basicsize = sizeof(WordTest),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = word_test_doc,
    .tp_new = word_test_new,
    .tp_dealloc = (destructor)word_test_dealloc,
    .tp_methods = word_test_methods,
};

int add_word_test(PyObject *module)
{
    for (int c = 'a'; c <= 'z'; c++)
        letter_of[c] = letter_of[c - 'a' + 'A'] = (unsigned char)c;
    return PyModule_AddType(module, &WordTestType);
}
