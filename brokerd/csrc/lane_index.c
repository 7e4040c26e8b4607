/* The key index entries of the lane's records, written into the store's current index file from C.
 * IndexService.put_keys (brokerd/store/index.py) is the reference and the slow path: a run takes the current
 * IndexFile once (the l->index_current callback), holds its slot and entry views as buffers, keeps its count and
 * ends here, and writes them back to the IndexFile's attributes when the run ends or before put_keys runs. A
 * record goes to put_keys when there is no current file, when its entries do not fit in the file or in its
 * reserved space (put_keys reserves more or rolls to a new file), or when a key is not valid UTF-8 (Python hashes
 * its replacement characters). The entries are the ones native index_put (index.c) writes for the same keys.
 * A record's keys are hashed before the record is written (lane_index_keys), and their slots fetched into the
 * cache then: the slot table is 20 MB, so a slot read was a cache miss, ~60 % of the put's time; now it overlaps
 * the record's CRC and copy. */
#include "lane.h"

/* The hash of "<topic>#": crc32 of the topic's UTF-8 then '#', cached for the last topic (a strong reference: the
 * same object is the same name). 0 ok, -1 a Python exception. */
static int topic_seed(Lane *l, PyObject *topic, uint32_t *seed) {
    if (topic != l->ix.seed_topic) {
        Py_ssize_t tn;
        const char *t = PyUnicode_AsUTF8AndSize(topic, &tn);
        if (t == NULL) return -1;
        l->ix.seed = crc32_update(crc32_update(0, (const unsigned char *)t, tn), (const unsigned char *)"#", 1);
        Py_XSETREF(l->ix.seed_topic, Py_NewRef(topic));
    }
    *seed = l->ix.seed;
    return 0;
}

typedef struct { IndexKeys *ik; uint32_t seed; } Hashing;

/* each_index_key's callback: the key's hash into the list, unless it is full or the key is not valid UTF-8 (1). */
static int hash_key(void *ctx, const char *p, Py_ssize_t n) {
    Hashing *c = ctx;
    if (c->ik->n == MAX_INDEX_KEYS || !utf8_valid((const unsigned char *)p, n)) return 1;
    c->ik->h[c->ik->n++] = crc32_update(c->seed, (const unsigned char *)p, n);
    return 0;
}

void lane_index_keys(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, IndexKeys *ik) {
    Hashing c = {ik, 0};
    ik->n = 0;
    if (topic_seed(l, topic, &c.seed) || each_index_key(keys, uniq, hash_key, &c)) {
        PyErr_Clear();  /* the reference decides (and raises what it raises) */
        ik->n = -1;
        return;
    }
    if (l->ix.file == NULL) return;
    const uint32_t *slot = (const uint32_t *)l->ix.sv.buf;
    for (int k = 0; k < ik->n; k++) __builtin_prefetch(&slot[ik->h[k] % (uint32_t)l->ix.slots], 1);
}

static int get_buffer(PyObject *o, const char *name, Py_buffer *b) {
    PyObject *a = PyObject_GetAttrString(o, name);
    if (a == NULL) return -1;
    int r = PyObject_GetBuffer(a, b, PyBUF_WRITABLE);
    Py_DECREF(a);
    return r;
}

/* The current index file into l->ix (1), or none (0: no file, or a Python exception). */
static int take_file(Lane *l) {
    PyObject *f = PyObject_CallNoArgs(l->index_current);
    if (f == NULL || f == Py_None) { Py_XDECREF(f); return 0; }
    long long entries_pos, max_entries;
    PyObject *mf = PyObject_GetAttrString(f, "mf");
    long long reserved = 0;
    int bad = mf == NULL || attr_ll(mf, "reserved", &reserved);
    Py_XDECREF(mf);
    bad = bad || attr_ll(f, "slots", &l->ix.slots) || attr_ll(f, "max_entries", &max_entries) ||
          attr_ll(f, "entries_pos", &entries_pos) || attr_ll(f, "count", &l->ix.count) ||
          attr_ll(f, "begin_ts", &l->ix.begin_ts) || attr_ll(f, "begin_phy", &l->ix.begin_phy);
    if (bad || get_buffer(f, "slot_view", &l->ix.sv)) { Py_DECREF(f); return 0; }
    if (get_buffer(f, "ent_view", &l->ix.ev)) { PyBuffer_Release(&l->ix.sv); Py_DECREF(f); return 0; }
    long long room = (reserved - entries_pos) / 24;
    l->ix.limit = room < max_entries ? room : max_entries;
    if (l->ix.slots <= 0 || l->ix.slots > UINT32_MAX || l->ix.sv.len < l->ix.slots * 4 ||
        l->ix.ev.len < max_entries * 24 || l->ix.count < 1) {
        PyBuffer_Release(&l->ix.sv); PyBuffer_Release(&l->ix.ev); Py_DECREF(f);
        return 0;  /* not a layout this code knows: put_keys */
    }
    l->ix.file = f;
    l->ix.wrote = 0;
    return 1;
}

static int set_ll(PyObject *o, const char *name, long long v) {
    PyObject *a = PyLong_FromLongLong(v);
    int r = a == NULL ? -1 : PyObject_SetAttrString(o, name, a);
    Py_XDECREF(a);
    return r;
}

void lane_index_settle(Lane *l) {
    PyObject *f = l->ix.file;
    if (f == NULL) return;
    l->ix.file = NULL;
    PyBuffer_Release(&l->ix.sv);
    PyBuffer_Release(&l->ix.ev);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* a run ending with an exception still settles */
    if (l->ix.wrote && (set_ll(f, "count", l->ix.count) || set_ll(f, "begin_ts", l->ix.begin_ts) ||
                        set_ll(f, "begin_phy", l->ix.begin_phy) || set_ll(f, "end_ts", l->ix.end_ts) ||
                        set_ll(f, "end_phy", l->ix.end_phy)))
        PyErr_Clear();  /* MemoryError only: the count is recovered by a scan when the file is opened again */
    PyErr_Restore(et, ev, tb);
    Py_DECREF(f);
}

/* put_keys(topic, keys, phys, ts), the reference, with the file's state written back first. */
static int python_put(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, long long phys, long long ts) {
    lane_index_settle(l);
    PyObject *kl = index_keys(keys, uniq), *po = PyLong_FromLongLong(phys), *tso = PyLong_FromLongLong(ts);
    PyObject *res = NULL;
    if (kl && po && tso) {
        PyObject *args[4] = {topic, kl, po, tso};
        res = PyObject_Vectorcall(l->index_put, args, 4, NULL);
    }
    Py_XDECREF(kl); Py_XDECREF(po); Py_XDECREF(tso);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

int lane_index_put(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, const IndexKeys *ik,
                   long long phys, long long ts) {
    int nk = ik->n;  /* none: python_put, as put_keys does with no keys */
    if (nk <= 0 || l->index_current == NULL || (l->ix.file == NULL && !take_file(l))) {
        if (PyErr_Occurred()) return -1;
        return python_put(l, topic, keys, uniq, phys, ts);
    }
    if (l->ix.count + nk > l->ix.limit) return python_put(l, topic, keys, uniq, phys, ts);
    uint32_t *slot = (uint32_t *)l->ix.sv.buf;
    uint64_t *ent = (uint64_t *)l->ix.ev.buf;
    long long n = l->ix.count;
    if (n == 1) { l->ix.begin_ts = ts; l->ix.begin_phy = phys; }
    for (int k = 0; k < nk; k++, n++) {
        uint32_t h = ik->h[k], s = h % (uint32_t)l->ix.slots, prev = slot[s];
        ent[n * 3] = ((uint64_t)h << 32) | (uint64_t)((long long)prev < n ? prev : 0);
        ent[n * 3 + 1] = (uint64_t)phys;
        ent[n * 3 + 2] = (uint64_t)ts;
        slot[s] = (uint32_t)n;
    }
    l->ix.count = n;
    l->ix.end_ts = ts;
    l->ix.end_phy = phys;
    l->ix.wrote = 1;
    return 0;
}
