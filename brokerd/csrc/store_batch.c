/* brokerd._native.BatchAppender: the records of MessageStore.append_messages (a synchronous batch of
 * broker-originated messages, any mix of topics) written and dispatched from C. brokerd/store/batch_append.py
 * drives it and holds the reference, BatchAppender.run_python: both take one *run* (the messages from `start` that
 * fit the active segment) and answer the same Run; tests/unit/store/test_batch_append_diff.py feeds the same
 * batches through both and compares the commit log, consume queues, index files and results byte for byte.
 *
 *   BatchAppender(msg_type, host, cq_put, get_or_create, index_current, index_put, store_ip, store_port,
 *                 id_prefix, max_body, segment_size, schedule_topic, delay_levels)
 *   run(msgs, start, ts, next_qoff, queues, fd, base, wrote, size, dispatch) -> Run tuple (batch_append.py)
 *
 * A run first reads and checks every message from `start` (nothing is written when one is refused: the store's
 * validation, all or nothing), then lays the records out back to back from `wrote`, assigns queue offsets in call
 * order, writes them with one pwrite per stage (the first record's 8-byte header last, as the send lane: a torn
 * write leaves a zero header recovery stops at), and after each write puts their consume-queue entries (packed
 * into the queue's file, ConsumeQueue.put for what does not fit) and key-index entries (index_writer.h). It stops
 * before a record that does not fit the segment (the driver rolls and runs again). A message whose fields are not
 * what the store writes as they are (another type, a non-str property, an int out of range, an unusual DELAY) sends
 * the whole batch to Python (RUN_PYTHON and why); its results are the same. Reading and checking a message is
 * store_batch_prep.c's (store_batch.h). */
#include "store_batch.h"
#include "cq_attrs.h"

#include <errno.h>
#include <structmember.h>
#include <unistd.h>

#define BATCH_STAGE_MAX (4 << 20)

static const char *const FIELD_NAMES[N_FIELDS] = {
    "topic", "queue_id", "body", "flag", "properties", "sys_flag", "born_timestamp", "born_host", "reconsume_times",
    "prepared_transaction_offset", "tags_code", "store_timestamp"};

/* How a run ended (batch_append.py RunEnd). */
enum { RUN_DONE, RUN_ROLL, RUN_WRITE_FAILED, RUN_REFUSED, RUN_PYTHON };

typedef struct {  /* one run's state */
    long long ts, base, wrote, size;
    int fd, dispatch;
    PyObject *next_qoff, *queues;
    Py_ssize_t m, done;                   /* records prepared, written */
    long long end, dispatched_end;
    PyObject *dispatch_error, *write_error;
} Run;

/* ---------------------------------------------------------------- the run's queues */

/* The record's queue in the run's table (added with its next offset from next_qoff): 0, -1 an exception. */
static int queue_slot(Appender *a, Run *run, Rec *r) {
    Py_hash_t h = PyObject_Hash(r->topic);
    if (h == -1) return -1;
    uint64_t mix = (uint64_t)h ^ ((uint64_t)r->qid * 0x9E3779B97F4A7C15ULL);
    int mask = a->qtab_cap - 1, i = (int)(mix & (uint64_t)mask);
    for (; a->qtab[i] >= 0; i = (i + 1) & mask) {
        Queue *q = &a->qs[a->qtab[i]];
        if (q->hash == h && q->qid == r->qid && q->tn == r->tn && memcmp(q->tp, r->tp, r->tn) == 0) {
            r->qslot = a->qtab[i];
            return 0;
        }
    }
    Queue *q = &a->qs[a->nq];
    memset(q, 0, sizeof *q);
    q->key = PyTuple_Pack(2, r->topic, r->qid_obj);
    if (q->key == NULL) return -1;
    q->tp = r->tp; q->tn = r->tn; q->hash = h; q->qid = r->qid;
    PyObject *cur = PyDict_GetItemWithError(run->next_qoff, q->key);
    if (cur == NULL && PyErr_Occurred()) { Py_CLEAR(q->key); return -1; }
    q->next = q->committed = cur != NULL ? PyLong_AsLongLong(cur) : 0;
    if (q->next == -1 && PyErr_Occurred()) { Py_CLEAR(q->key); return -1; }
    a->qtab[i] = a->nq;
    r->qslot = a->nq++;
    return 0;
}

/* The queue's file taken for direct writes (1), not (0: its put decides), -1 an exception. */
static int cq_take(Queue *q) {
    PyObject *files = PyObject_GetAttr(q->cq, cq_files);
    if (files == NULL) return -1;
    int r = 0;
    if (PyList_Check(files) && PyList_GET_SIZE(files) > 0) {
        PyObject *f = PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1), *mm;
        PyObject *owner[4] = {f, f, f, q->cq}, *name[4] = {cq_base, cq_size, cq_reserved, cq_max_offset};
        long long *dst[4] = {&q->base, &q->fsize, &q->reserved, &q->max_offset};
        r = 1;
        for (int i = 0; i < 4 && r == 1; i++) {
            PyObject *v = PyObject_GetAttr(owner[i], name[i]);
            if (v == NULL || ((*dst[i] = PyLong_AsLongLong(v)) == -1 && PyErr_Occurred())) r = -1;
            Py_XDECREF(v);
        }
        if (r == 1) {
            mm = PyObject_GetAttr(f, cq_mm);
            if (mm == NULL || PyObject_GetBuffer(mm, &q->buf, PyBUF_WRITABLE) < 0) r = -1;
            Py_XDECREF(mm);
        }
    }
    Py_DECREF(files);
    q->held = r == 1;
    q->max_dirty = 0;
    return r;
}

/* The held file's max offset written back to the queue and the mapping released. */
static int cq_settle(Queue *q) {
    if (!q->held) return 0;
    q->held = 0;
    PyBuffer_Release(&q->buf);
    if (!q->max_dirty) return 0;
    PyObject *m = PyLong_FromLongLong(q->max_offset);
    int r = m == NULL ? -1 : PyObject_SetAttr(q->cq, cq_max_offset, m);
    Py_XDECREF(m);
    return r;
}

/* The record's consume-queue entry (ConsumeQueue.put's, packed into its file when it lands in the last file's
 * reserved space). 0 ok, -1 an exception. */
static int cq_put(Appender *a, Run *run, Queue *q, const Rec *r) {
    if (q->cq == NULL) {  /* queues.get(key) or get_or_create(topic, queue_id) */
        PyObject *cq = PyDict_GetItemWithError(run->queues, q->key);
        if (cq != NULL) q->cq = Py_NewRef(cq);
        else if (PyErr_Occurred()) return -1;
        else if ((q->cq = PyObject_CallFunctionObjArgs(a->get_or_create, PyTuple_GET_ITEM(q->key, 0),
                                                       PyTuple_GET_ITEM(q->key, 1), NULL)) == NULL) return -1;
    }
    if (!q->held && cq_take(q) < 0) return -1;
    long long byte_pos = r->qoff * 20, pos = byte_pos - q->base;
    if (q->held && r->qoff >= 0 && pos >= 0 && byte_pos < q->base + q->fsize && pos + 20 <= q->reserved &&
        pos + 20 <= q->buf.len) {
        unsigned char *p = (unsigned char *)q->buf.buf + pos;
        be64w(p, (uint64_t)r->phys);
        put_be32((char *)p + 8, (uint32_t)r->size);
        be64w(p + 12, (uint64_t)r->tags);
        if (r->qoff >= q->max_offset) { q->max_offset = r->qoff + 1; q->max_dirty = 1; }
        return 0;
    }
    if (cq_settle(q)) return -1;
    PyObject *args[5] = {q->cq, PyLong_FromLongLong(r->qoff), PyLong_FromLongLong(r->phys),
                         PyLong_FromLongLong(r->size), PyLong_FromLongLong(r->tags)};
    PyObject *res = args[1] && args[2] && args[3] && args[4] ? PyObject_Vectorcall(a->cq_put, args, 5, NULL) : NULL;
    for (int i = 1; i < 5; i++) Py_XDECREF(args[i]);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

/* ---------------------------------------------------------------- writing */

static void encode(const Appender *a, const Rec *r, uint32_t crc, unsigned char *p) {
    Py_ssize_t blen = PyBytes_GET_SIZE(r->body);
    put_be32((char *)p, (uint32_t)r->size);
    put_be32((char *)p + 4, r->tn > 127 ? MAGIC_V2 : MAGIC_V1);
    put_be32((char *)p + 8, crc & 0x7FFFFFFF);
    put_be32((char *)p + 12, (uint32_t)r->qid);
    put_be32((char *)p + 16, (uint32_t)r->flag);
    be64w(p + 20, (uint64_t)r->qoff);
    be64w(p + 28, (uint64_t)r->phys);
    put_be32((char *)p + 36, (uint32_t)(r->sysflag & ~0x30LL));
    be64w(p + 40, (uint64_t)r->born_ts);
    memcpy(p + 48, r->born_ip, 4);
    put_be32((char *)p + 52, (uint32_t)r->born_port);
    be64w(p + 56, (uint64_t)r->store_ts);
    memcpy(p + 64, a->store_ip, 4);
    put_be32((char *)p + 68, (uint32_t)a->store_port);
    put_be32((char *)p + 72, (uint32_t)r->reconsume);
    be64w(p + 76, (uint64_t)r->prep);
    put_be32((char *)p + 84, (uint32_t)blen);
    memcpy(p + REC_HEADER, PyBytes_AS_STRING(r->body), blen);
    unsigned char *t = p + REC_HEADER + blen;
    if (r->tn > 127) { be16w(t, (int)r->tn); t += 2; } else { *t++ = (unsigned char)r->tn; }
    memcpy(t, r->tp, r->tn);
    t += r->tn;
    be16w(t, (int)r->props_n);
    memcpy(t + 2, a->arena + r->props_at, r->props_n);
}

static int pwrite_all(int fd, const unsigned char *p, Py_ssize_t n, long long at) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, (size_t)n, (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (w == 0) errno = EIO; return -1; }
        p += w; n -= w; at += w;
    }
    return 0;
}

static PyObject *fetch_error(void) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (ev != NULL && tb != NULL) PyException_SetTraceback(ev, tb);
    Py_XDECREF(et); Py_XDECREF(tb);
    return ev ? ev : Py_NewRef(Py_None);
}

/* The queue offsets of records [lo, hi) (written) into next_qoff. 0, -1 an exception. */
static int commit_offsets(Appender *a, Run *run, Py_ssize_t lo, Py_ssize_t hi) {
    for (Py_ssize_t j = lo; j < hi; j++) {
        const Rec *r = &a->recs[j];
        if (r->qslot < 0) continue;
        a->qs[r->qslot].committed = r->qoff + 1;
        a->qs[r->qslot].dirty = 1;
    }
    for (int i = 0; i < a->nq; i++) {
        Queue *q = &a->qs[i];
        if (!q->dirty) continue;
        q->dirty = 0;
        PyObject *v = PyLong_FromLongLong(q->committed);
        if (v == NULL || PyDict_SetItem(run->next_qoff, q->key, v) < 0) { Py_XDECREF(v); return -1; }
        Py_DECREF(v);
    }
    return 0;
}

/* Consume-queue and index entries of the written records [lo, hi), in order; the first failure is kept in
 * run->dispatch_error and dispatching stops (the store sets WRITE_LOGICS_QUEUE_ERROR). */
static void dispatch(Appender *a, Run *run, Py_ssize_t lo, Py_ssize_t hi) {
    for (Py_ssize_t j = lo; j < hi && run->dispatch_error == NULL; j++) {
        const Rec *r = &a->recs[j];
        Queue *q = r->qslot >= 0 ? &a->qs[r->qslot] : NULL;
        if (j + 2 < hi && a->recs[j + 2].nh > 0) ixw_prefetch(&a->ix, a->hashes + a->recs[j + 2].h_at, a->recs[j + 2].nh);
        int rc = q != NULL ? cq_put(a, run, q, r) : 0;
        if (rc == 0 && r->nh != 0) {
            Prop keys = {"KEYS", 4, a->arena + r->keys_at, r->keys_n}, uniq = {"UNIQ_KEY", 8, a->arena + r->uniq_at,
                                                                               r->uniq_n};
            rc = ixw_put(&a->ix, a->index_current, a->index_put, r->topic, r->keys_at >= 0 && r->keys_n > 0 ? &keys : NULL,
                         r->uniq_at >= 0 && r->uniq_n > 0 ? &uniq : NULL, a->hashes + r->h_at, r->nh, r->phys,
                         r->store_ts);
        }
        if (rc) { run->dispatch_error = fetch_error(); return; }
        run->dispatched_end = r->phys + r->size;
        if (q != NULL) { q->noted = 1; q->note_qoff = r->qoff; q->note_tags = r->tags; q->note_end = r->phys + r->size; }
    }
}

/* Write the staged records [lo, hi) at segment position `at`, then commit and dispatch them. 0 ok, 1 the write
 * failed (run->write_error), -1 an exception. */
static int flush_stage(Appender *a, Run *run, Py_ssize_t n, long long at, Py_ssize_t lo, Py_ssize_t hi) {
    if (n == 0) return 0;
    if (pwrite_all(run->fd, a->stage + 8, n - 8, at + 8) || pwrite_all(run->fd, a->stage, 8, at)) {
        PyErr_SetFromErrno(PyExc_OSError);
        run->write_error = fetch_error();
        return 1;
    }
    run->done = hi;
    run->end = at + n;
    if (commit_offsets(a, run, lo, hi)) return -1;
    if (run->dispatch) dispatch(a, run, lo, hi);
    return 0;
}

/* Lay out, write and dispatch the prepared records that fit the segment: RUN_DONE / RUN_ROLL / RUN_WRITE_FAILED,
 * -1 an exception. */
static int write_run(Appender *a, Run *run) {
    long long pos = run->wrote, at = pos;
    Py_ssize_t staged = 0, first = 0, j;
    int roll = 0;
    for (j = 0; j < run->m; j++) {
        Rec *r = &a->recs[j];
        if (pos + r->size + 8 > run->size) { roll = 1; break; }
        if (staged > 0 && staged + r->size > BATCH_STAGE_MAX) {
            int rc = flush_stage(a, run, staged, at, first, j);
            if (rc) return rc < 0 ? -1 : RUN_WRITE_FAILED;
            at = pos; staged = 0; first = j;
        }
        if (batch_grow((void **)&a->stage, &a->stage_cap, staged + r->size, 1)) return -1;
        uint32_t crc;
        if (crc_of(PyBytes_AS_STRING(r->body), PyBytes_GET_SIZE(r->body), &crc)) return -1;
        r->qoff = r->qslot >= 0 ? a->qs[r->qslot].next++ : 0;
        r->phys = run->base + pos;
        encode(a, r, crc, a->stage + staged);
        staged += r->size;
        pos += r->size;
    }
    int rc = flush_stage(a, run, staged, at, first, j);
    if (rc) return rc < 0 ? -1 : RUN_WRITE_FAILED;
    return roll ? RUN_ROLL : RUN_DONE;
}

/* ---------------------------------------------------------------- the run */

static void clear_run(Appender *a, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_CLEAR(a->recs[j].topic); Py_CLEAR(a->recs[j].body); Py_CLEAR(a->recs[j].qid_obj);
    }
    for (int i = 0; i < a->nq; i++) {
        Queue *q = &a->qs[i];
        if (q->held) { q->held = 0; PyBuffer_Release(&q->buf); }
        Py_CLEAR(q->cq); Py_CLEAR(q->key);
    }
    a->nq = 0;
    ixw_settle(&a->ix);
    if (a->arena_cap > (16 << 20)) { PyMem_Free(a->arena); a->arena = NULL; a->arena_cap = 0; }
    if (a->stage_cap > BATCH_STAGE_MAX * 2) { PyMem_Free(a->stage); a->stage = NULL; a->stage_cap = 0; }
}

/* Read and check every message from `start`: 0 ok; RUN_REFUSED / RUN_PYTHON with *info; -1 an exception. */
static int prep_all(Appender *a, Run *run, PyObject *msgs, Py_ssize_t start, int *info) {
    Py_ssize_t m = PyList_GET_SIZE(msgs) - start;
    if (batch_grow((void **)&a->recs, &a->recs_cap, m, sizeof(Rec))) return -1;
    if (batch_grow((void **)&a->qs, &a->qs_cap, m, sizeof(Queue))) return -1;
    int tab = 16;
    while (tab < 2 * m) tab *= 2;
    if (tab > a->qtab_cap) {
        int *t = PyMem_Realloc(a->qtab, (size_t)tab * sizeof(int));
        if (t == NULL) { PyErr_NoMemory(); return -1; }
        a->qtab = t;
        a->qtab_cap = tab;
    }
    memset(a->qtab, 0xFF, (size_t)a->qtab_cap * sizeof(int));
    a->arena_n = a->hashes_n = 0;
    a->nq = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        Rec *r = &a->recs[j];
        memset(r, 0, sizeof *r);
        run->m = j + 1;  /* cleared by clear_run from here */
        int why = 0, rc = batch_prep_one(a, r, PyList_GET_ITEM(msgs, start + j), run->ts, &why);
        if (rc) { *info = why; return rc < 0 ? -1 : rc == 1 ? RUN_REFUSED : RUN_PYTHON; }
        if (r->qslot >= 0 && queue_slot(a, run, r)) return -1;
    }
    return 0;
}

static PyObject *notes_of(Appender *a) {
    PyObject *notes = PyDict_New();
    for (int i = 0; notes != NULL && i < a->nq; i++) {
        Queue *q = &a->qs[i];
        if (!q->noted) continue;
        PyObject *v = Py_BuildValue("(LLL)", q->note_qoff, q->note_tags, q->note_end);
        if (v == NULL || PyDict_SetItem(notes, q->key, v) < 0) Py_CLEAR(notes);
        Py_XDECREF(v);
    }
    return notes;
}

/* The records' offset message ids joined with commas (what the store's batch result carries). */
static PyObject *ids_of(Appender *a, Py_ssize_t n) {
    static const char HX[] = "0123456789ABCDEF";
    if (n == 0) return PyUnicode_New(0, 127);
    PyObject *s = PyUnicode_New(n * 33 - 1, 127);
    if (s == NULL) return NULL;
    char *p = (char *)PyUnicode_DATA(s);
    for (Py_ssize_t j = 0; j < n; j++) {
        if (j) *p++ = ',';
        memcpy(p, a->id_prefix, 16);
        uint64_t v = (uint64_t)a->recs[j].phys;
        for (int i = 15; i >= 0; i--, v >>= 4) p[16 + i] = HX[v & 15];
        p += 32;
    }
    return s;
}

/* (end, info, done, wrote_end, dispatched_end, last_ts, first_phys, nbytes, first_qoff, ids, notes,
 *  dispatch_error, write_error): batch_append.Run */
static PyObject *result(Appender *a, Run *run, int end, PyObject *info) {
    long long nbytes = 0;
    for (Py_ssize_t j = 0; j < run->done; j++) nbytes += a->recs[j].size;
    const Rec *f = run->done ? &a->recs[0] : NULL, *l = run->done ? &a->recs[run->done - 1] : NULL;
    PyObject *ids = ids_of(a, run->done), *notes = notes_of(a);
    PyObject *res = NULL;
    if (ids != NULL && notes != NULL)
        res = Py_BuildValue("(iOnLLLLLLOOOO)", end, info, run->done, run->end, run->dispatched_end,
                            l ? l->store_ts : 0LL, f ? f->phys : 0LL, nbytes, f ? f->qoff : 0LL, ids, notes,
                            run->dispatch_error ? run->dispatch_error : Py_None,
                            run->write_error ? run->write_error : Py_None);
    Py_XDECREF(ids); Py_XDECREF(notes);
    return res;
}

static PyObject *Appender_run(Appender *a, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10 || !PyList_Check(args[0]) || !PyDict_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "run(msgs, start, ts, next_qoff, queues, fd, base, wrote, size, dispatch)");
        return NULL;
    }
    if (cq_intern_names()) return NULL;
    Run run = {0};
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    run.ts = PyLong_AsLongLong(args[2]);
    run.fd = (int)PyLong_AsLong(args[5]);
    run.base = PyLong_AsLongLong(args[6]);
    run.wrote = PyLong_AsLongLong(args[7]);
    run.size = PyLong_AsLongLong(args[8]);
    run.dispatch = PyObject_IsTrue(args[9]);
    if (PyErr_Occurred()) return NULL;
    if (start < 0 || start > PyList_GET_SIZE(args[0]) || run.wrote < 0 || run.wrote > run.size) {
        PyErr_SetString(PyExc_ValueError, "run: start or segment position out of range");
        return NULL;
    }
    run.next_qoff = args[3];
    run.queues = args[4];
    run.end = run.wrote;
    run.dispatched_end = -1;
    PyObject *msgs = Py_NewRef(args[0]);  /* the list may be changed by a callback: its items are held by recs */
    int info = 0, end = prep_all(a, &run, msgs, start, &info);
    PyObject *res = NULL;
    if (end == 0) end = write_run(a, &run);
    if (end >= 0) {
        for (int i = 0; i < a->nq; i++)
            if (cq_settle(&a->qs[i]) && run.dispatch_error == NULL) run.dispatch_error = fetch_error();
        ixw_settle(&a->ix);
        PyObject *io = end == RUN_PYTHON || end == RUN_REFUSED ? PyLong_FromLong(info) : Py_NewRef(Py_None);
        if (io != NULL) res = result(a, &run, end, io);
        Py_XDECREF(io);
    }
    clear_run(a, run.m);
    Py_XDECREF(run.dispatch_error);
    Py_XDECREF(run.write_error);
    Py_DECREF(msgs);
    return res;
}

/* ---------------------------------------------------------------- the type */

static int Appender_init(Appender *a, PyObject *args, PyObject *kw) {
    PyObject *msg_type, *host_fn, *cq_put, *get_or_create, *index_current, *index_put, *id_prefix, *sched, *levels;
    Py_buffer ip;
    long long store_port, max_body, segment_size;
    if (!PyArg_ParseTuple(args, "O!OOOOOy*LULLUO!", &PyType_Type, &msg_type, &host_fn, &cq_put, &get_or_create,
                          &index_current, &index_put, &ip, &store_port, &id_prefix, &max_body, &segment_size, &sched,
                          &PyList_Type, &levels))
        return -1;
    int bad = ip.len != 4;
    if (!bad) memcpy(a->store_ip, ip.buf, 4);
    PyBuffer_Release(&ip);
    Py_ssize_t n;
    const char *idp = PyUnicode_AsUTF8AndSize(id_prefix, &n);
    if (bad || idp == NULL || n != 16 || PyList_GET_SIZE(levels) > 64) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "store ip (4 bytes), id prefix (16), levels (<= 64)");
        return -1;
    }
    memcpy(a->id_prefix, idp, 16);
    for (int i = 0; i < N_FIELDS; i++) {  /* MessageInner's slots, read by offset (the exact type is checked) */
        PyObject *d = PyObject_GetAttrString(msg_type, FIELD_NAMES[i]);
        if (d == NULL) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) a->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) { PyErr_Format(PyExc_TypeError, "%s is not a slot of the message type", FIELD_NAMES[i]); return -1; }
    }
    a->n_levels = (int)PyList_GET_SIZE(levels);
    for (int i = 0; i < a->n_levels; i++)
        if ((a->levels[i] = PyLong_AsLongLong(PyList_GET_ITEM(levels, i))) == -1 && PyErr_Occurred()) return -1;
    a->store_port = store_port;
    a->max_body = max_body;
    a->segment_size = segment_size;
    Py_XSETREF(a->msg_type, Py_NewRef(msg_type));
    Py_XSETREF(a->host_fn, Py_NewRef(host_fn));
    Py_XSETREF(a->cq_put, Py_NewRef(cq_put));
    Py_XSETREF(a->get_or_create, Py_NewRef(get_or_create));
    Py_XSETREF(a->index_current, Py_NewRef(index_current));
    Py_XSETREF(a->index_put, Py_NewRef(index_put));
    Py_XSETREF(a->sched, Py_NewRef(sched));
    return 0;
}

static int Appender_traverse(Appender *a, visitproc visit, void *arg) {
    Py_VISIT(a->msg_type); Py_VISIT(a->host_fn); Py_VISIT(a->cq_put); Py_VISIT(a->get_or_create);
    Py_VISIT(a->index_current); Py_VISIT(a->index_put); Py_VISIT(a->sched); Py_VISIT(a->ix.seed_topic);
    return 0;
}

static int Appender_clear(Appender *a) {
    Py_CLEAR(a->msg_type); Py_CLEAR(a->host_fn); Py_CLEAR(a->cq_put); Py_CLEAR(a->get_or_create);
    Py_CLEAR(a->index_current); Py_CLEAR(a->index_put); Py_CLEAR(a->sched); Py_CLEAR(a->ix.seed_topic);
    return 0;
}

static void Appender_dealloc(Appender *a) {
    PyObject_GC_UnTrack(a);
    Appender_clear(a);
    PyMem_Free(a->recs); PyMem_Free(a->arena); PyMem_Free(a->hashes); PyMem_Free(a->qs); PyMem_Free(a->qtab);
    PyMem_Free(a->stage);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyMethodDef Appender_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Appender_run, METH_FASTCALL,
     "run(msgs, start, ts, next_qoff, queues, fd, base, wrote, size, dispatch) -> Run tuple (batch_append.py)"},
    {NULL},
};

PyTypeObject BatchAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "brokerd._native.BatchAppender",
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The store's batch append of broker-originated messages (brokerd/store/batch_append.py)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Appender_init,
    .tp_traverse = (traverseproc)Appender_traverse,
    .tp_clear = (inquiry)Appender_clear,
    .tp_dealloc = (destructor)Appender_dealloc,
    .tp_methods = Appender_methods,
};
