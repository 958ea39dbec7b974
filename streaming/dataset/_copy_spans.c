/* Copy a batch's values out of the shards' maps into a shared-memory slot: an optional speed-up.
 *
 * copy_spans(dest, at, sources, part, starts, stops): for each i, the bytes
 * sources[part[i]][starts[i]:stops[i]] go to dest[at[i]:at[i] + stops[i] - starts[i]].
 * ``at``, ``part``, ``starts``, ``stops``: C-contiguous int64 buffers of one length; ``sources``:
 * a list of objects with the buffer protocol (the shards' mmaps), each asked for its buffer
 * once, when first used. A span outside its source or its destination raises ValueError
 * before anything of that value is copied.
 *
 * streaming/dataset/handoff.py (``Scattered.copy_into``) does the same with memoryview slices
 * when this module is not built; tests/dataset/test_copy_spans.py checks both give the same
 * bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int int64_buffer(PyObject *obj, Py_buffer *view, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "l") != 0 && strcmp(view->format, "q") != 0 &&
         strcmp(view->format, "<q") != 0 && strcmp(view->format, "<l") != 0 &&
         strcmp(view->format, "=q") != 0)) {
        PyErr_Format(PyExc_TypeError, "copy_spans: %s must be an int64 array", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *copy_spans(PyObject *self, PyObject *args) {
    PyObject *dest_obj, *at_obj, *sources, *part_obj, *starts_obj, *stops_obj;
    if (!PyArg_ParseTuple(args, "OOO!OOO", &dest_obj, &at_obj, &PyList_Type, &sources,
                          &part_obj, &starts_obj, &stops_obj))
        return NULL;
    Py_buffer dest, at, part, starts, stops;
    if (PyObject_GetBuffer(dest_obj, &dest, PyBUF_WRITABLE) < 0)
        return NULL;
    int got = 0;  /* How many of at, part, starts, stops are held. */
    Py_buffer *arrays[4] = {&at, &part, &starts, &stops};
    PyObject *objects[4] = {at_obj, part_obj, starts_obj, stops_obj};
    const char *names[4] = {"at", "part", "starts", "stops"};
    Py_ssize_t num_sources = PyList_GET_SIZE(sources);
    Py_buffer *held = NULL;
    char *have = NULL;
    PyObject *result = NULL;
    for (; got < 4; got++)
        if (int64_buffer(objects[got], arrays[got], names[got]) < 0)
            goto done;
    Py_ssize_t count = at.len / 8;
    if (part.len / 8 != count || starts.len / 8 != count || stops.len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "copy_spans: at, part, starts, stops differ in length");
        goto done;
    }
    held = PyMem_Calloc(num_sources ? num_sources : 1, sizeof(Py_buffer));
    have = PyMem_Calloc(num_sources ? num_sources : 1, 1);
    if (held == NULL || have == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *at_v = at.buf, *part_v = part.buf, *start_v = starts.buf, *stop_v = stops.buf;
    char *out = dest.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t p = part_v[i], a = start_v[i], b = stop_v[i], to = at_v[i];
        if (p < 0 || p >= num_sources) {
            PyErr_Format(PyExc_ValueError, "copy_spans: value %zd names source %lld of %zd", i,
                         (long long)p, num_sources);
            goto done;
        }
        if (!have[p]) {
            if (PyObject_GetBuffer(PyList_GET_ITEM(sources, p), &held[p], PyBUF_SIMPLE) < 0)
                goto done;
            have[p] = 1;
        }
        if (a < 0 || b < a || b > held[p].len || to < 0 || to + (b - a) > dest.len) {
            PyErr_Format(PyExc_ValueError,
                         "copy_spans: value %zd (bytes %lld:%lld of a source of %zd, to %lld "
                         "of %zd) is out of bounds", i, (long long)a, (long long)b, held[p].len,
                         (long long)to, dest.len);
            goto done;
        }
        memcpy(out + to, (const char *)held[p].buf + a, (size_t)(b - a));
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (held != NULL && have != NULL)
        for (Py_ssize_t k = 0; k < num_sources; k++)
            if (have[k])
                PyBuffer_Release(&held[k]);
    PyMem_Free(held);
    PyMem_Free(have);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(arrays[k]);
    PyBuffer_Release(&dest);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_spans", copy_spans, METH_VARARGS,
     "copy_spans(dest, at, sources, part, starts, stops): copy byte spans of sources into dest."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_copy_spans", NULL, -1, methods};

PyMODINIT_FUNC PyInit__copy_spans(void) { return PyModule_Create(&module); }
