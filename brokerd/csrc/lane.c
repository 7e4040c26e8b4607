/* brokerd._native.SendLane: the Python type around lane_one (lane_send.c). Depends on lane_send.c through
 * lane.h only; lane_send.c knows nothing of this file. */
#include "lane.h"

static int Lane_traverse(Lane *l, visitproc visit, void *arg) {
    Py_VISIT(l->topics); Py_VISIT(l->resolve); Py_VISIT(l->next_qoff); Py_VISIT(l->listeners); Py_VISIT(l->index_put); Py_VISIT(l->index_current); Py_VISIT(l->cq_put); Py_VISIT(l->error); Py_VISIT(l->write_error); Py_VISIT(l->last_entry); Py_VISIT(l->last_topic_obj);
    Py_VISIT(l->ix.seed_topic);
    Py_VISIT(l->acl); Py_VISIT(l->acl_key);
    Py_VISIT(l->delay_entry); Py_VISIT(l->delay_topic); Py_VISIT(l->half_entry); Py_VISIT(l->half_topic);
    return 0;
}

static int Lane_clear(Lane *l) {
    Py_CLEAR(l->topics); Py_CLEAR(l->resolve); Py_CLEAR(l->next_qoff); Py_CLEAR(l->listeners); Py_CLEAR(l->index_put); Py_CLEAR(l->index_current); Py_CLEAR(l->cq_put); Py_CLEAR(l->error); Py_CLEAR(l->write_error);
    Py_CLEAR(l->ix.seed_topic);
    Py_CLEAR(l->acl); Py_CLEAR(l->acl_key);
    Py_CLEAR(l->delay_entry); Py_CLEAR(l->delay_topic); Py_CLEAR(l->half_entry); Py_CLEAR(l->half_topic);
    lane_clear_cache(l);
    return 0;
}

static void Lane_dealloc(Lane *l) {
    PyObject_GC_UnTrack(l);
    Lane_clear(l);
    PyMem_Free(l->stage);
    Py_TYPE(l)->tp_free((PyObject *)l);
}

static int copy_utf8(PyObject *s, char *dst, Py_ssize_t cap, Py_ssize_t *n, const char *what) {
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(s, &len);
    if (u == NULL) return -1;
    if (len > cap) { PyErr_Format(PyExc_ValueError, "%s is too long", what); return -1; }
    memcpy(dst, u, len);
    *n = len;
    return 0;
}

/* Lane(next_qoff, listeners, index_put, cluster, id_prefix, region, trace_on, store_ip, store_port,
 *      max_body, segment_size, uniq_prefix) */
static int Lane_init(Lane *l, PyObject *args, PyObject *kw) {
    PyObject *next_qoff, *listeners, *index_put, *cluster, *id_prefix, *region, *store_ip, *uniq_prefix;
    int trace_on, store_port;
    long long max_body, segment_size;
    if (!PyArg_ParseTuple(args, "O!O!OUUUpSiLLU", &PyDict_Type, &next_qoff, &PyList_Type, &listeners, &index_put,
                          &cluster, &id_prefix, &region, &trace_on, &store_ip, &store_port, &max_body,
                          &segment_size, &uniq_prefix))
        return -1;
    if (PyBytes_GET_SIZE(store_ip) != 4) { PyErr_SetString(PyExc_ValueError, "store_ip must be 4 bytes"); return -1; }
    Py_ssize_t n;
    if (copy_utf8(cluster, l->cluster, 200, &l->cluster_n, "cluster name")) return -1;
    if (copy_utf8(id_prefix, l->id_prefix, 16, &n, "id prefix")) return -1;
    if (n != 16) { PyErr_SetString(PyExc_ValueError, "id prefix must be 16 characters"); return -1; }
    if (copy_utf8(uniq_prefix, l->uniq_prefix, 20, &n, "uniq prefix")) return -1;
    if (n != 20) { PyErr_SetString(PyExc_ValueError, "uniq prefix must be 20 characters"); return -1; }
    Py_ssize_t rn;
    const char *r = PyUnicode_AsUTF8AndSize(region, &rn);
    if (r == NULL) return -1;
    if (rn > 40) { PyErr_SetString(PyExc_ValueError, "region is too long"); return -1; }
    Out o; out_init(&o);
    if (out_jstr(&o, r, rn)) { out_free(&o); return -1; }
    memcpy(l->region, o.p, o.n); l->region_n = o.n;
    out_free(&o);
    l->topics = PyDict_New();
    if (l->topics == NULL) return -1;
    Py_INCREF(next_qoff); l->next_qoff = next_qoff;
    Py_INCREF(listeners); l->listeners = listeners;
    Py_INCREF(index_put); l->index_put = index_put;
    l->trace_on = trace_on;
    memcpy(l->store_ip, PyBytes_AS_STRING(store_ip), 4);
    l->store_port = store_port;
    l->max_body = max_body;
    l->segment_size = segment_size;
    l->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)l;
    l->last_topic_n = -1;
    return 0;
}

static PyObject *Lane_add_topic(Lane *l, PyObject *args) {
    PyObject *topic, *entry;
    if (!PyArg_ParseTuple(args, "UO!", &topic, &PyTuple_Type, &entry) || lane_check_entry(entry)) return NULL;
    if (PyDict_SetItem(l->topics, topic, entry) < 0) return NULL;
    lane_clear_cache(l);
    Py_RETURN_NONE;
}

/* A re-targeted send's topic and entry into *topic_slot / *entry_slot. */
static void set_target(PyObject **topic_slot, PyObject **entry_slot, PyObject *topic, PyObject *entry) {
    Py_INCREF(entry); Py_XSETREF(*entry_slot, entry);
    Py_INCREF(topic); Py_XSETREF(*topic_slot, topic);
}

/* set_delay(topic, entry, levels_ms): delayed sends are stored in `topic` (an entry as add_topic's) */
static PyObject *Lane_set_delay(Lane *l, PyObject *args) {
    PyObject *topic, *entry, *levels;
    if (!PyArg_ParseTuple(args, "UO!O!", &topic, &PyTuple_Type, &entry, &PyTuple_Type, &levels) || lane_check_entry(entry))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(levels);
    if (n < 1 || n > MAX_LEVELS) {
        PyErr_SetString(PyExc_ValueError, "levels must be 1..64 delays");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        l->delay_ms[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(levels, i));
        if (PyErr_Occurred()) return NULL;
    }
    l->n_levels = (int)n;
    set_target(&l->delay_topic, &l->delay_entry, topic, entry);
    Py_RETURN_NONE;
}

/* set_half(topic, entry): prepared transactional sends are stored in `topic` (an entry as add_topic's) */
static PyObject *Lane_set_half(Lane *l, PyObject *args) {
    PyObject *topic, *entry;
    if (!PyArg_ParseTuple(args, "UO!", &topic, &PyTuple_Type, &entry) || lane_check_entry(entry)) return NULL;
    set_target(&l->half_topic, &l->half_entry, topic, entry);
    Py_RETURN_NONE;
}

/* Also called from the resolve callback while run() is in C (a metadata hook): the send in progress holds its own
 * references (Send.entry / topic_obj), nothing else is borrowed from the table or the cache across a call. */
static PyObject *Lane_clear_topics(Lane *l, PyObject *unused) {
    PyDict_Clear(l->topics);
    Py_CLEAR(l->delay_entry);
    Py_CLEAR(l->half_entry);
    lane_clear_cache(l);
    Py_RETURN_NONE;
}

/* set_acl(table): ACL on, sends must be signed by an account of `table` admitted for their topic ({access key:
 * (secret bytes, inner pad sha1, outer pad sha1, set of topics)}, filled as Python admits them); set_acl(None):
 * off. */
static PyObject *Lane_set_acl(Lane *l, PyObject *table) {
    if (table != Py_None && !PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "set_acl(dict) or set_acl(None)");
        return NULL;
    }
    Py_CLEAR(l->acl); Py_CLEAR(l->acl_key);
    if (table != Py_None) l->acl = Py_NewRef(table);
    Py_RETURN_NONE;
}

static PyObject *Lane_acl_misses(Lane *l, PyObject *unused) {
    return Py_BuildValue("{sLsLsLsL}", "no_access_key", l->acl_miss[ACL_NO_KEY], "not_admitted",
                         l->acl_miss[ACL_NOT_ADMITTED], "signature_mismatch", l->acl_miss[ACL_BAD_SIG],
                         "unsupported_header", l->acl_miss[ACL_UNSUPPORTED]);
}

static PyObject *take(PyObject **slot) {
    PyObject *e = *slot;
    *slot = NULL;
    if (e == NULL) Py_RETURN_NONE;
    return e;
}

static PyObject *Lane_take_error(Lane *l, PyObject *unused) { return take(&l->error); }

static PyObject *Lane_take_write_error(Lane *l, PyObject *unused) { return take(&l->write_error); }

/* run(buf, pos, fd, base, wrote, limit, born_ip, born_port, out, max_frame, notes[, busy]) -> (pos, stop)
 * Handles consecutive common-case sends from buf[pos:], writing their records at position `wrote` of the
 * segment file `fd` (starting at log offset `base`; records must end by `limit`; written with pwrite, not
 * through the mapping: see lane_write) and appending their response frames to `out`. Stops at the first
 * frame it does not handle (stop=1), at a full segment (2), after a dispatch failure (3, see take_error),
 * after a failed write (4, see take_write_error; the unwritten records are not stored and not answered) or at
 * the end of the complete frames (0). Staged records are written before it returns, also when it raises.
 * Results: .wrote .msgs .bytes .last_ts .dispatched_end; `notes` gets {(topic, qid): (last queue offset, its
 * tags code)} for the dispatch listeners, which the caller runs once the store's positions are settled (a
 * listener may read the new message at once). With `busy` (a str), the run stores nothing: every send is
 * answered SYSTEM_BUSY with that remark (overload; .refused counts them). */
static PyObject *Lane_run(Lane *l, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 11 || nargs > 12 || !PyDict_Check(args[10])) {
        PyErr_SetString(PyExc_TypeError, "run takes 11 or 12 arguments, the 11th a dict");
        return NULL;
    }
    l->busy = NULL;
    l->refused = 0;
    if (nargs == 12 && args[11] != Py_None) {
        l->busy = PyUnicode_AsUTF8AndSize(args[11], &l->busy_n);  /* the str outlives the run */
        if (l->busy == NULL) return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), max_frame = PyLong_AsSsize_t(args[9]);
    long fd = PyLong_AsLong(args[2]);
    long long base = PyLong_AsLongLong(args[3]), wrote = PyLong_AsLongLong(args[4]), limit = PyLong_AsLongLong(args[5]);
    long long born_port = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX) { PyErr_SetString(PyExc_ValueError, "fd must be a file descriptor"); return NULL; }
    if (!PyBytes_Check(args[6]) || PyBytes_GET_SIZE(args[6]) != 4 || !PyList_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "born_ip must be 4 bytes and out a list");
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0) return NULL;
    l->why = WHY_NONE;
    l->wrote = wrote; l->msgs = 0; l->bytes = 0; l->last_ts = 0; l->dispatched_end = -1; l->pos = pos;
    l->fd = (int)fd; l->base = base;
    l->stage_n = 0; l->stage_at = wrote; l->stage_out = PyList_GET_SIZE(args[8]); l->stage_msgs = l->stage_bytes = 0;
    const unsigned char *b = in.buf;
    int stop = STOP_END;
    PyObject *res = NULL;
    while (pos >= 0 && in.len - pos >= 8) {
        int32_t total = be32(b + pos);
        if (total < 4 || total > max_frame) { stop = STOP_FRAME; break; }
        if (in.len - pos - 4 < total) break;
        int r = lane_one(l, b + pos, total, base, limit, (const unsigned char *)PyBytes_AS_STRING(args[6]),
                         born_port, args[8], args[10]);
        if (r < 0) {  /* keep what was stored: write it, then raise */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            lane_write(l, args[8]);
            PyErr_Restore(et, ev, tb);
            goto done;
        }
        if (r == 0) { stop = STOP_FRAME; break; }
        if (r == 2) { stop = STOP_ROLL; break; }
        if (r == 3) { stop = STOP_WRITE_FAILED; break; }
        pos += 4 + total;
        l->pos = pos;
        if (l->error != NULL) { stop = STOP_ERROR; break; }
    }
    if (lane_write(l, args[8])) stop = STOP_WRITE_FAILED;
    res = Py_BuildValue("(ni)", pos, stop);
done:
    lane_index_settle(l);
    l->busy = NULL;
    PyBuffer_Release(&in);
    return res;
}

static int Lane_set_sync(Lane *l, PyObject *v, void *unused) {
    int b = v == NULL ? 0 : PyObject_IsTrue(v);
    if (b < 0) return -1;
    l->sync = b;
    return 0;
}

static PyObject *Lane_get_sync(Lane *l, void *unused) { return PyBool_FromLong(l->sync); }

static int Lane_set_resolver(Lane *l, PyObject *v, void *unused) {
    if (v != NULL && v != Py_None && !PyCallable_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "resolver must be callable or None");
        return -1;
    }
    Py_XSETREF(l->resolve, v != NULL && v != Py_None ? Py_NewRef(v) : NULL);
    return 0;
}

static PyObject *Lane_get_resolver(Lane *l, void *unused) { return Py_NewRef(l->resolve ? l->resolve : Py_None); }

/* The callable attributes (index_current, cq_put): None or a callable. */
static int Lane_set_callable(Lane *l, PyObject *v, void *which) {
    if (v != NULL && v != Py_None && !PyCallable_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "must be callable or None");
        return -1;
    }
    PyObject **slot = which ? &l->cq_put : &l->index_current;
    Py_XSETREF(*slot, v != NULL && v != Py_None ? Py_NewRef(v) : NULL);
    return 0;
}

static PyObject *Lane_get_callable(Lane *l, void *which) {
    PyObject *v = which ? l->cq_put : l->index_current;
    return Py_NewRef(v ? v : Py_None);
}

static PyObject *Lane_get(Lane *l, void *which) {
    switch ((intptr_t)which) {
        case 0: return PyLong_FromLongLong(l->wrote);
        case 1: return PyLong_FromLongLong(l->msgs);
        case 2: return PyLong_FromLongLong(l->bytes);
        case 3: return PyLong_FromLongLong(l->last_ts);
        case 4: return PyLong_FromLongLong(l->dispatched_end);
        case 6: return PyLong_FromSsize_t(l->pos);
        case 7: return PyLong_FromLong(l->why);
        case 8: return PyLong_FromLongLong(l->refused);
        case 9: return Py_BuildValue("(LL)", l->hc.hits, l->hc.misses);
        default: return PyLong_FromSsize_t(PyDict_GET_SIZE(l->topics));
    }
}

static PyGetSetDef Lane_getset[] = {
    {"wrote", (getter)Lane_get, NULL, "segment position after the last run", (void *)0},
    {"msgs", (getter)Lane_get, NULL, "messages stored by the last run", (void *)1},
    {"bytes", (getter)Lane_get, NULL, "record bytes stored by the last run", (void *)2},
    {"last_ts", (getter)Lane_get, NULL, "store timestamp of the last record of the last run", (void *)3},
    {"dispatched_end", (getter)Lane_get, NULL, "end of the last dispatched record of the last run (-1: none)", (void *)4},
    {"topic_count", (getter)Lane_get, NULL, "topics the lane handles", (void *)5},
    {"pos", (getter)Lane_get, NULL, "buffer position after the last frame the last run handled", (void *)6},
    {"why", (getter)Lane_get, NULL, "why the last run left the frame it stopped at to Python (an index into "
     "send_lane.FALLBACK_REASONS)", (void *)7},
    {"refused", (getter)Lane_get, NULL, "sends the last run answered SYSTEM_BUSY (run with busy)", (void *)8},
    {"header_cache", (getter)Lane_get, NULL, "(hits, misses): JSON headers parsed by their differences from a cached "
     "one of the same length, and the others (hcache.c)", (void *)9},
    {"sync", (getter)Lane_get_sync, (setter)Lane_set_sync, "SYNC_FLUSH: WAIT=false sends go to Python", NULL},
    {"resolver", (getter)Lane_get_resolver, (setter)Lane_set_resolver,
     "resolver(topic, default_topic, default_queue_nums, queue_id, batch) -> entry or None: asked once for a send "
     "whose topic is not in the table (ACL off); the entry it returns is added to the table", NULL},
    {"index_current", (getter)Lane_get_callable, (setter)Lane_set_callable,
     "index_current() -> the store's current IndexFile or None: the key index entries are written into it from C "
     "(index_put is called when they do not fit); None: index_put only", NULL},
    {"cq_put", (getter)Lane_get_callable, (setter)Lane_set_callable,
     "ConsumeQueue.put: a topic entry's put bound to it is done in C when the entry lands in the queue's last file "
     "and its reserved space (the method is called otherwise); None: always called", (void *)1},
    {NULL},
};

static PyMethodDef Lane_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Lane_run, METH_FASTCALL, "process common-case sends"},
    {"add_topic", (PyCFunction)Lane_add_topic, METH_VARARGS, "add_topic(topic, entry)"},
    {"clear_topics", (PyCFunction)Lane_clear_topics, METH_NOARGS, "forget every topic (and the delay topic)"},
    {"set_acl", (PyCFunction)Lane_set_acl, METH_O, "set_acl(table): ACL on (None: off)"},
    {"acl_misses", (PyCFunction)Lane_acl_misses, METH_NOARGS, "ACL sends left to Python, by reason"},
    {"set_delay", (PyCFunction)Lane_set_delay, METH_VARARGS, "set_delay(schedule_topic, entry, levels_ms)"},
    {"set_half", (PyCFunction)Lane_set_half, METH_VARARGS, "set_half(half_topic, entry)"},
    {"take_error", (PyCFunction)Lane_take_error, METH_NOARGS, "the dispatch exception of the last run, or None"},
    {"take_write_error", (PyCFunction)Lane_take_write_error, METH_NOARGS,
     "the OSError of the last run's failed segment write, or None"},
    {NULL},
};

PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "brokerd._native.SendLane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lane_init,
    .tp_dealloc = (destructor)Lane_dealloc,
    .tp_traverse = (traverseproc)Lane_traverse,
    .tp_clear = (inquiry)Lane_clear,
    .tp_methods = Lane_methods,
    .tp_getset = Lane_getset,
    .tp_doc = "The common-case send path in C (see brokerd/native.py).",
};

