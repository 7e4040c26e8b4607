/* props_decode: a stored record's properties string (name 0x01 value 0x02 ...) as a dict, as
 * brokerd.message.properties.decode_properties reads it (the reference; tests/unit/store/test_batch_append_diff.py
 * compares both on generated strings): segments split on 0x02, a segment counts only with a 0x01 after a non-empty
 * name and a non-empty value after it (the value keeps any further 0x01), a later duplicate replaces the value in
 * place.
 *
 *   props_decode(buf, start, end) -> dict, or None when buf[start:end] is not valid UTF-8 (the reference decodes
 *   it with replacement characters); props_dict (native.h) the same for C callers (timer_prepare.c)
 */
#include "native.h"

PyObject *props_dict(const char *p, Py_ssize_t n) {
    const char *stop = p + n;
    if (!utf8_valid((const unsigned char *)p, n)) return Py_NewRef(Py_None);
    PyObject *d = PyDict_New();
    while (d != NULL && p < stop) {
        const char *seg_end = memchr(p, 2, stop - p);
        if (seg_end == NULL) seg_end = stop;
        const char *sep = memchr(p, 1, seg_end - p);
        if (sep != NULL && sep > p && sep + 1 < seg_end) {
            PyObject *k = PyUnicode_DecodeUTF8(p, sep - p, NULL);
            PyObject *v = k ? PyUnicode_DecodeUTF8(sep + 1, seg_end - sep - 1, NULL) : NULL;
            if (v == NULL || PyDict_SetItem(d, k, v) < 0) Py_CLEAR(d);
            Py_XDECREF(k); Py_XDECREF(v);
        }
        p = seg_end + 1;
    }
    return d;
}

PyObject *props_decode(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &start, &end)) return NULL;
    PyObject *d = NULL;
    if (start < 0 || end > b.len || start > end)
        PyErr_SetString(PyExc_ValueError, "props_decode: range outside the buffer");
    else
        d = props_dict((const char *)b.buf + start, end - start);
    PyBuffer_Release(&b);
    return d;
}
