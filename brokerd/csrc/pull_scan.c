/* scan_pull: the loop of a pull's read (brokerd/store/reader.py _scan) over one consume-queue file's entries, for
 * the records in the commit log's mapped files. reader._step is the reference, entry for entry; the caller runs it
 * for an entry this code hands back (a record not readable from a mapped file: in the tier, removed, not yet
 * written) and for every entry when a record filter (SQL92) is set.
 *
 *   scan_pull(chunk, q0, i, state, limits, tag_filter, files, segment_size, buffers, qoffs) -> (i, stopped)
 *
 * chunk: consume-queue entries (20 bytes big-endian: phys int64, size int32, tags int64), the first at queue
 * offset q0; the walk starts at entry i. state: [total, count, next_begin, status, next_phy_file_start] (a list,
 * updated in place; status 0 NO_MATCHED_MESSAGE, 1 FOUND, 2 MESSAGE_WAS_REMOVING). limits: (offset, filter_bytes,
 * max_msg_nums, max_msg_bytes, max_mem_bytes, max_count). tag_filter: None or a callable on the tags code.
 * files / segment_size: the commit log's mapped files (base, wrote, mm) in order, each segment_size long. A found
 * record's bytes go to `buffers`, its queue offset to `qoffs`. Returns the first entry not handled and whether
 * the scan ended there (a limit reached); not ended and i < the entry count: the caller steps entry i itself. */
#include "native.h"

typedef struct {
    long long total, count, next_begin, status, next_phy;
} State;

typedef struct {
    PyObject *files;
    long long first_base, segment_size;
    Py_ssize_t idx;  /* the file `buf` maps, -1 none */
    long long base, wrote;
    Py_buffer buf;
} Log;

static void log_release(Log *g) {
    if (g->idx >= 0) PyBuffer_Release(&g->buf);
    g->idx = -1;
}

/* The record at phys (size bytes) as a new bytes object; NULL without an exception when it is not in a mapped file
 * (the caller's Python step reads it), NULL with one on an error. */
static PyObject *log_read(Log *g, long long phys, long long size) {
    Py_ssize_t n = PyList_GET_SIZE(g->files);
    if (n == 0 || phys < g->first_base) return NULL;
    Py_ssize_t idx = (Py_ssize_t)((phys - g->first_base) / g->segment_size);
    if (idx >= n) return NULL;
    if (idx != g->idx) {
        log_release(g);
        PyObject *f = PyList_GET_ITEM(g->files, idx);
        if (attr_ll(f, "base", &g->base) || attr_ll(f, "wrote", &g->wrote)) return NULL;
        PyObject *mm = PyObject_GetAttrString(f, "mm");
        if (mm == NULL) return NULL;
        int r = PyObject_GetBuffer(mm, &g->buf, PyBUF_SIMPLE);
        Py_DECREF(mm);
        if (r < 0) { PyErr_Clear(); return NULL; }  /* closed meanwhile: the Python step decides */
        g->idx = idx;
    }
    long long pos = phys - g->base;
    if (pos < 0 || pos + size > g->wrote || pos + size > g->buf.len) return NULL;
    return PyBytes_FromStringAndSize((const char *)g->buf.buf + pos, (Py_ssize_t)size);
}

static int state_get(PyObject *lst, State *s) {
    if (!PyList_Check(lst) || PyList_GET_SIZE(lst) != 5) {
        PyErr_SetString(PyExc_TypeError, "state must be a list of 5 ints");
        return -1;
    }
    long long *v[5] = {&s->total, &s->count, &s->next_begin, &s->status, &s->next_phy};
    for (int k = 0; k < 5; k++) {
        *v[k] = PyLong_AsLongLong(PyList_GET_ITEM(lst, k));
        if (*v[k] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static int state_put(PyObject *lst, const State *s) {
    long long v[5] = {s->total, s->count, s->next_begin, s->status, s->next_phy};
    for (int k = 0; k < 5; k++) {
        PyObject *o = PyLong_FromLongLong(v[k]);
        if (o == NULL || PyList_SetItem(lst, k, o) < 0) return -1;
    }
    return 0;
}

PyObject *scan_pull(PyObject *self, PyObject *args) {
    Py_buffer chunk;
    long long q0, seg, offset, filter_bytes, max_nums, max_bytes, max_mem, max_count;
    Py_ssize_t i;
    PyObject *state, *tag_filter, *files, *buffers, *qoffs;
    if (!PyArg_ParseTuple(args, "y*LnO!(LLLLLL)OO!LO!O!", &chunk, &q0, &i, &PyList_Type, &state, &offset,
                          &filter_bytes, &max_nums, &max_bytes, &max_mem, &max_count, &tag_filter, &PyList_Type,
                          &files, &seg, &PyList_Type, &buffers, &PyList_Type, &qoffs))
        return NULL;
    State s;
    Log g = {files, 0, seg, -1, 0, 0};
    Py_ssize_t n = chunk.len / 20;
    int stopped = 0, err = seg <= 0 || i < 0 || state_get(state, &s);
    if (seg <= 0 || i < 0) PyErr_SetString(PyExc_ValueError, "bad segment size or start");
    if (!err && PyList_GET_SIZE(files) > 0 && attr_ll(PyList_GET_ITEM(files, 0), "base", &g.first_base)) err = 1;
    const unsigned char *p = chunk.buf;
    for (; !err && i < n; i++) {
        const unsigned char *e = p + i * 20;
        long long qoff = q0 + i, phys = be64(e), tags = be64(e + 12);
        long long size = (int32_t)be32(e + 8);
        if ((qoff - offset) * 20 > filter_bytes ||
            (s.total && s.count && (s.count + 1 > max_nums || s.total + size > max_bytes ||
                                    s.total + size > max_mem || s.count > max_count - 1))) {
            stopped = 1;
            break;
        }
        if (size > 0 && phys >= s.next_phy && tag_filter != Py_None) {
            PyObject *t = PyLong_FromLongLong(tags), *r = t ? PyObject_CallOneArg(tag_filter, t) : NULL;
            int ok = r ? PyObject_IsTrue(r) : -1;
            Py_XDECREF(t); Py_XDECREF(r);
            if (ok < 0) { err = 1; break; }
            if (!ok) {
                s.next_begin = qoff + 1;
                if (!s.total) s.status = 0;
                continue;
            }
        }
        if (size <= 0 || phys < s.next_phy) { s.next_begin = qoff + 1; continue; }
        PyObject *data = log_read(&g, phys, size);
        if (data == NULL) {
            if (PyErr_Occurred()) err = 1;
            break;  /* the Python step reads it (tier, removed, unwritten) */
        }
        PyObject *qo = PyLong_FromLongLong(qoff);
        int bad = qo == NULL || PyList_Append(buffers, data) < 0 || PyList_Append(qoffs, qo) < 0;
        Py_DECREF(data); Py_XDECREF(qo);
        if (bad) { err = 1; break; }
        s.next_begin = qoff + 1;
        s.total += size;
        s.count++;
        s.status = 1;
        s.next_phy = -1;
    }
    log_release(&g);
    PyBuffer_Release(&chunk);
    if (err || state_put(state, &s)) return NULL;
    return Py_BuildValue("(ni)", i, stopped);
}
