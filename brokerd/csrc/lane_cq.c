/* The consume-queue entries of the lane's records, written from C. ConsumeQueue.put (brokerd/store/consume_queue.py)
 * is the reference and the slow path: a queue's put in the lane's topic entry is the bound method `cq.put`; when
 * its function is l->cq_put (ConsumeQueue.put) and the entry lands in the queue's last file, inside the space that
 * file has reserved, this code packs it into the file's mapping and moves cq.max_offset exactly as put does.
 * Anything else (a new file, more reserved space, a hole before the first file, a first put's creating callable)
 * is the Python call. */
#include "lane.h"
#include "cq_attrs.h"

PyObject *cq_files, *cq_base, *cq_size, *cq_reserved, *cq_mm, *cq_max_offset;  /* cq_attrs.h */

int cq_intern_names(void) {
    if (cq_files != NULL) return 0;
    cq_files = PyUnicode_InternFromString("files");
    cq_base = PyUnicode_InternFromString("base");
    cq_size = PyUnicode_InternFromString("size");
    cq_reserved = PyUnicode_InternFromString("reserved");
    cq_mm = PyUnicode_InternFromString("mm");
    cq_max_offset = PyUnicode_InternFromString("max_offset");
    return cq_files && cq_base && cq_size && cq_reserved && cq_mm && cq_max_offset ? 0 : -1;
}

static int attr_ll_i(PyObject *o, PyObject *name, long long *v) {  /* attr_ll with an interned name */
    PyObject *a = PyObject_GetAttr(o, name);
    if (a == NULL) return -1;
    *v = PyLong_AsLongLong(a);
    Py_DECREF(a);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* 1 written, 0 the Python put must do it, -1 an exception. */
static int put_fast(PyObject *cq, long long qoff, long long phys, long long size, long long tags) {
    if (cq_intern_names()) return -1;
    PyObject *files = PyObject_GetAttr(cq, cq_files);
    if (files == NULL) return -1;
    int r = 0;
    if (PyList_Check(files) && PyList_GET_SIZE(files) > 0) {
        PyObject *f = PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1);
        long long base, fsize, reserved, max_offset;
        if (attr_ll_i(f, cq_base, &base) || attr_ll_i(f, cq_size, &fsize) || attr_ll_i(f, cq_reserved, &reserved) ||
            attr_ll_i(cq, cq_max_offset, &max_offset)) {
            r = -1;
        } else {
            long long byte_pos = qoff * 20, pos = byte_pos - base;
            if (qoff >= 0 && pos >= 0 && byte_pos < base + fsize && pos + 20 <= reserved) {
                PyObject *mm = PyObject_GetAttr(f, cq_mm);
                Py_buffer b;
                if (mm == NULL || PyObject_GetBuffer(mm, &b, PyBUF_WRITABLE) < 0) {
                    r = -1;
                } else {
                    if (pos + 20 <= b.len) {
                        unsigned char *p = (unsigned char *)b.buf + pos;
                        be64w(p, (uint64_t)phys);
                        put_be32((char *)p + 8, (uint32_t)size);
                        be64w(p + 12, (uint64_t)tags);
                        r = 1;
                    }
                    PyBuffer_Release(&b);
                }
                Py_XDECREF(mm);
                if (r == 1 && qoff >= max_offset) {
                    PyObject *m = PyLong_FromLongLong(qoff + 1);
                    if (m == NULL || PyObject_SetAttr(cq, cq_max_offset, m) < 0) r = -1;
                    Py_XDECREF(m);
                }
            }
        }
    }
    Py_DECREF(files);
    return r;
}

int lane_cq_put(Lane *l, PyObject *put, long long qoff, long long phys, long long size, long long tags) {
    if (l->cq_put != NULL && PyMethod_Check(put) && PyMethod_GET_FUNCTION(put) == l->cq_put) {
        int r = put_fast(PyMethod_GET_SELF(put), qoff, phys, size, tags);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    PyObject *a[4] = {PyLong_FromLongLong(qoff), PyLong_FromLongLong(phys), PyLong_FromLongLong(size),
                      PyLong_FromLongLong(tags)};
    PyObject *res = a[0] && a[1] && a[2] && a[3] ? PyObject_Vectorcall(put, a, 4, NULL) : NULL;
    for (int i = 0; i < 4; i++) Py_XDECREF(a[i]);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}
