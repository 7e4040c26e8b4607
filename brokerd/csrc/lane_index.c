/* The key index entries written into the store's current index file from C: the IndexWriter (index_writer.h) the
 * send lane and the store's batch append (store_batch.c) share, and the lane's use of it.
 * IndexService.put_keys (brokerd/store/index.py) is the reference and the slow path: a run takes the current
 * IndexFile once (the `current` callback), holds its slot and entry views as buffers, keeps its count and ends
 * here, and writes them back to the IndexFile's attributes when the run ends or before put_keys runs. A record
 * goes to put_keys when there is no current file, when its entries do not fit in the file or in its reserved
 * space (put_keys reserves more or rolls to a new file), or when a key is not valid UTF-8 (Python hashes its
 * replacement characters). The entries are the ones native index_put (index.c) writes for the same keys.
 * A record's keys are hashed before the record is written (ixw_hash), and their slots fetched into the cache then
 * (ixw_prefetch): the slot table is 20 MB, so a slot read was a cache miss, ~60 % of the put's time; now it
 * overlaps the record's CRC and copy. */
#include "lane.h"

/* The hash of "<topic>#": crc32 of the topic's UTF-8 then '#', cached for the last topic (a strong reference: the
 * same object is the same name). 0 ok, -1 a Python exception. */
static int topic_seed(IndexWriter *w, PyObject *topic, uint32_t *seed) {
    if (topic != w->seed_topic) {
        Py_ssize_t tn;
        const char *t = PyUnicode_AsUTF8AndSize(topic, &tn);
        if (t == NULL) return -1;
        w->seed = crc32_update(crc32_update(0, (const unsigned char *)t, tn), (const unsigned char *)"#", 1);
        Py_XSETREF(w->seed_topic, Py_NewRef(topic));
    }
    *seed = w->seed;
    return 0;
}

typedef struct { uint32_t *h; int n, cap; uint32_t seed; } Hashing;

/* each_index_key's callback: the key's hash into the list, unless it is full or the key is not valid UTF-8 (1). */
static int hash_key(void *ctx, const char *p, Py_ssize_t n) {
    Hashing *c = ctx;
    if (c->n == c->cap || !utf8_valid((const unsigned char *)p, n)) return 1;
    c->h[c->n++] = crc32_update(c->seed, (const unsigned char *)p, n);
    return 0;
}

int ixw_hash(IndexWriter *w, PyObject *topic, const Prop *keys, const Prop *uniq, uint32_t *h, int cap) {
    Hashing c = {h, 0, cap, 0};
    if (topic_seed(w, topic, &c.seed) || each_index_key(keys, uniq, hash_key, &c)) {
        PyErr_Clear();  /* the reference decides (and raises what it raises) */
        return -1;
    }
    return c.n;
}

void ixw_prefetch(const IndexWriter *w, const uint32_t *h, int n) {
    if (w->file == NULL) return;
    const uint32_t *slot = (const uint32_t *)w->sv.buf;
    for (int k = 0; k < n; k++) __builtin_prefetch(&slot[h[k] % (uint32_t)w->slots], 1);
}

static int get_buffer(PyObject *o, const char *name, Py_buffer *b) {
    PyObject *a = PyObject_GetAttrString(o, name);
    if (a == NULL) return -1;
    int r = PyObject_GetBuffer(a, b, PyBUF_WRITABLE);
    Py_DECREF(a);
    return r;
}

/* The current index file into w (1), or none (0: no file, or a Python exception). */
static int take_file(IndexWriter *w, PyObject *current) {
    PyObject *f = PyObject_CallNoArgs(current);
    if (f == NULL || f == Py_None) { Py_XDECREF(f); return 0; }
    long long entries_pos, max_entries;
    PyObject *mf = PyObject_GetAttrString(f, "mf");
    long long reserved = 0;
    int bad = mf == NULL || attr_ll(mf, "reserved", &reserved);
    Py_XDECREF(mf);
    bad = bad || attr_ll(f, "slots", &w->slots) || attr_ll(f, "max_entries", &max_entries) ||
          attr_ll(f, "entries_pos", &entries_pos) || attr_ll(f, "count", &w->count) ||
          attr_ll(f, "begin_ts", &w->begin_ts) || attr_ll(f, "begin_phy", &w->begin_phy);
    if (bad || get_buffer(f, "slot_view", &w->sv)) { Py_DECREF(f); return 0; }
    if (get_buffer(f, "ent_view", &w->ev)) { PyBuffer_Release(&w->sv); Py_DECREF(f); return 0; }
    long long room = (reserved - entries_pos) / 24;
    w->limit = room < max_entries ? room : max_entries;
    if (w->slots <= 0 || w->slots > UINT32_MAX || w->sv.len < w->slots * 4 ||
        w->ev.len < max_entries * 24 || w->count < 1) {
        PyBuffer_Release(&w->sv); PyBuffer_Release(&w->ev); Py_DECREF(f);
        return 0;  /* not a layout this code knows: put_keys */
    }
    w->file = f;
    w->wrote = 0;
    return 1;
}

static int set_ll(PyObject *o, const char *name, long long v) {
    PyObject *a = PyLong_FromLongLong(v);
    int r = a == NULL ? -1 : PyObject_SetAttrString(o, name, a);
    Py_XDECREF(a);
    return r;
}

void ixw_settle(IndexWriter *w) {
    PyObject *f = w->file;
    if (f == NULL) return;
    w->file = NULL;
    PyBuffer_Release(&w->sv);
    PyBuffer_Release(&w->ev);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* a run ending with an exception still settles */
    if (w->wrote && (set_ll(f, "count", w->count) || set_ll(f, "begin_ts", w->begin_ts) ||
                     set_ll(f, "begin_phy", w->begin_phy) || set_ll(f, "end_ts", w->end_ts) ||
                     set_ll(f, "end_phy", w->end_phy)))
        PyErr_Clear();  /* MemoryError only: the count is recovered by a scan when the file is opened again */
    PyErr_Restore(et, ev, tb);
    Py_DECREF(f);
}

/* put(topic, keys, phys, ts), the reference, with the file's state written back first. */
static int python_put(IndexWriter *w, PyObject *put, PyObject *topic, const Prop *keys, const Prop *uniq,
                      long long phys, long long ts) {
    ixw_settle(w);
    PyObject *kl = index_keys(keys, uniq), *po = PyLong_FromLongLong(phys), *tso = PyLong_FromLongLong(ts);
    PyObject *res = NULL;
    if (kl && po && tso) {
        PyObject *args[4] = {topic, kl, po, tso};
        res = PyObject_Vectorcall(put, args, 4, NULL);
    }
    Py_XDECREF(kl); Py_XDECREF(po); Py_XDECREF(tso);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

int ixw_put(IndexWriter *w, PyObject *current, PyObject *put, PyObject *topic, const Prop *keys, const Prop *uniq,
            const uint32_t *h, int n, long long phys, long long ts) {
    if (n <= 0 || current == NULL || (w->file == NULL && !take_file(w, current))) {
        if (PyErr_Occurred()) return -1;
        return python_put(w, put, topic, keys, uniq, phys, ts);
    }
    if (w->count + n > w->limit) return python_put(w, put, topic, keys, uniq, phys, ts);
    uint32_t *slot = (uint32_t *)w->sv.buf;
    uint64_t *ent = (uint64_t *)w->ev.buf;
    long long c = w->count;
    if (c == 1) { w->begin_ts = ts; w->begin_phy = phys; }
    for (int k = 0; k < n; k++, c++) {
        uint32_t hk = h[k], s = hk % (uint32_t)w->slots, prev = slot[s];
        ent[c * 3] = ((uint64_t)hk << 32) | (uint64_t)((long long)prev < c ? prev : 0);
        ent[c * 3 + 1] = (uint64_t)phys;
        ent[c * 3 + 2] = (uint64_t)ts;
        slot[s] = (uint32_t)c;
    }
    w->count = c;
    w->end_ts = ts;
    w->end_phy = phys;
    w->wrote = 1;
    return 0;
}

/* ---- the send lane's use (lane.h) */

void lane_index_keys(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, IndexKeys *ik) {
    ik->n = ixw_hash(&l->ix, topic, keys, uniq, ik->h, MAX_INDEX_KEYS);
    if (ik->n > 0) ixw_prefetch(&l->ix, ik->h, ik->n);
}

int lane_index_put(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, const IndexKeys *ik,
                   long long phys, long long ts) {
    return ixw_put(&l->ix, l->index_current, l->index_put, topic, keys, uniq, ik->h, ik->n, phys, ts);
}

void lane_index_settle(Lane *l) { ixw_settle(&l->ix); }
