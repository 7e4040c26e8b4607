/* Reading and checking one message of a store batch (store_batch.c's runs): its MessageInner slots read by offset,
 * its properties encoded as encode_properties writes them, the store's validation (_validate) and the consume-queue
 * tags code and key-index hashes its dispatch needs. What the store would write otherwise is left to Python. */
#include "store_batch.h"

int batch_grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * item);
    if (q == NULL) { PyErr_NoMemory(); return -1; }
    *p = q;
    *cap = c;
    return 0;
}

/* ---------------------------------------------------------------- reading a message */

/* An int field within [lo, hi]: 0 ok, 1 not one (Python decides), -1 an exception. */
static int get_ll(PyObject *v, long long lo, long long hi, long long *out) {
    if (v == NULL || !PyLong_Check(v)) return 1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || x < lo || x > hi) return 1;
    *out = x;
    return 0;
}

static int arena_put(Appender *a, const char *p, Py_ssize_t n) {
    if (a->arena_n + n > a->arena_cap && batch_grow((void **)&a->arena, &a->arena_cap, a->arena_n + n, 1)) return -1;
    memcpy(a->arena + a->arena_n, p, n);
    a->arena_n += n;
    return 0;
}

/* The properties as encode_properties writes them (name 0x01 value 0x02, None values left out) into the arena;
 * TAGS, KEYS, UNIQ_KEY and DELAY noted. 0 ok, 1 Python (a non-str name or value, one UTF-8 cannot encode), 2 too
 * long (PROPERTIES_SIZE_EXCEEDED), -1 an exception. */
static int encode_props(Appender *a, Rec *r, PyObject *d, Py_ssize_t *delay_at, Py_ssize_t *delay_n,
                        Py_ssize_t *tags_at, Py_ssize_t *tags_n) {
    if (!PyDict_CheckExact(d)) return 1;
    r->props_at = a->arena_n;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (v == Py_None) continue;
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v)) return 1;
        Py_ssize_t kn, vn;
        const char *kp = PyUnicode_AsUTF8AndSize(k, &kn), *vp;
        if (kp == NULL || (vp = PyUnicode_AsUTF8AndSize(v, &vn)) == NULL) { PyErr_Clear(); return 1; }
        if (arena_put(a, kp, kn) || arena_put(a, "\x01", 1)) return -1;
        Py_ssize_t at = a->arena_n;
        if (arena_put(a, vp, vn) || arena_put(a, "\x02", 1)) return -1;
        if (kn == 4 && memcmp(kp, "TAGS", 4) == 0) { *tags_at = at; *tags_n = vn; }
        else if (kn == 4 && memcmp(kp, "KEYS", 4) == 0) { r->keys_at = at; r->keys_n = vn; }
        else if (kn == 8 && memcmp(kp, "UNIQ_KEY", 8) == 0) { r->uniq_at = at; r->uniq_n = vn; }
        else if (kn == 5 && memcmp(kp, "DELAY", 5) == 0) { *delay_at = at; *delay_n = vn; }
        if (a->arena_n - r->props_at > MAX_PROPS_LEN) return 2;
    }
    r->props_n = a->arena_n - r->props_at;
    return 0;
}

/* "a.b.c.d" (decimal, no leading zeros) into ip: 1, else 0 (the encoder's host() decides). */
static int dotted_quad(const char *s, Py_ssize_t n, unsigned char *ip) {
    int part = 0, digits = 0, v = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (digits == 0 || part > 3) return 0;
            ip[part++] = (unsigned char)v;
            v = digits = 0;
        } else if (s[i] >= '0' && s[i] <= '9') {
            if (digits > 0 && v == 0) return 0;
            v = v * 10 + (s[i] - '0');
            if (++digits > 3 || v > 255) return 0;
        } else {
            return 0;
        }
    }
    return part == 4;
}

/* born_host (ip, port): 0 ok, 1 Python, -1 an exception. */
static int born_host(Appender *a, Rec *r, PyObject *h) {
    if (h == NULL || !PyTuple_Check(h) || PyTuple_GET_SIZE(h) < 2) return 1;
    PyObject *ip = PyTuple_GET_ITEM(h, 0);
    int rc = get_ll(PyTuple_GET_ITEM(h, 1), INT32_MIN, INT32_MAX, &r->born_port);
    if (rc) return rc;
    if (!PyUnicode_CheckExact(ip)) return 1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(ip, &n);
    if (s == NULL) { PyErr_Clear(); return 1; }
    if (dotted_quad(s, n, r->born_ip)) return 0;
    PyObject *b = PyObject_CallOneArg(a->host_fn, ip);
    if (b == NULL) return -1;
    rc = PyBytes_Check(b) && PyBytes_GET_SIZE(b) == 4 ? 0 : 1;
    if (rc == 0) memcpy(r->born_ip, PyBytes_AS_STRING(b), 4);
    Py_DECREF(b);
    return rc;
}

/* The tags code of a record with a consume-queue entry, as Dispatcher.dispatch_inline computes it (the schedule
 * topic's: the delivery time of its DELAY level). 0 ok, 1 Python (a DELAY int() would read otherwise), -1. */
static int tags_code(Appender *a, Rec *r, long long msg_tags, Py_ssize_t delay_at, Py_ssize_t delay_n,
                     Py_ssize_t tags_at, Py_ssize_t tags_n) {
    int sched = PyUnicode_Compare(r->topic, a->sched) == 0;
    if (sched && PyErr_Occurred()) return -1;
    if (sched && delay_at >= 0 && delay_n > 0) {
        const char *d = a->arena + delay_at;
        long long v = 0;
        int dashes = 0, digits = 0;
        for (Py_ssize_t i = 0; i < delay_n; i++) {
            char c = d[i];
            if (c == '-' && digits == 0 && dashes == i) dashes++;
            else if (c >= '0' && c <= '9') { if (++digits > 18) return 1; v = v * 10 + (c - '0'); }
            else if ((unsigned char)c >= 0x80) return 1;  /* str.isdigit / int() of non-ASCII digits */
            else { digits = -1; break; }
        }
        if (digits > 0 && dashes > 1) return 1;  /* int("--5") raises: the reference's error */
        if (digits > 0 && dashes == 0 && v > 0 && a->n_levels > 0) {
            r->tags = r->store_ts + a->levels[(v < a->n_levels ? v : a->n_levels) - 1];
            return 0;
        }
        msg_tags = 0;
    } else if (sched) {
        msg_tags = 0;
    }
    r->tags = msg_tags;
    if (msg_tags == 0 && tags_at >= 0)
        r->tags = java_hash((const unsigned char *)a->arena + tags_at, tags_n);
    return 0;
}

#define FIELD(msg, i) (*(PyObject **)((char *)(msg) + a->off[i]))
#define READ_LL(i, lo, hi, dst) do { int rc_ = get_ll(FIELD(msg, i), lo, hi, dst); if (rc_) { *why = WHY_FIELDS; return rc_ < 0 ? -1 : 2; } } while (0)

/* The topic as _validate checks it: 0 ok, 1 refused, 2 Python. */
static int check_topic(Rec *r) {
    if (!PyUnicode_CheckExact(r->topic)) return 2;
    r->tp = PyUnicode_AsUTF8AndSize(r->topic, &r->tn);
    if (r->tp == NULL) { PyErr_Clear(); return 2; }
    if (r->tn == 0 || r->tn > 32767 || memchr(r->tp, '/', r->tn) || memchr(r->tp, 0, r->tn) ||
        (r->tn == 1 && r->tp[0] == '.') || (r->tn == 2 && r->tp[0] == '.' && r->tp[1] == '.'))
        return 1;
    return 0;
}

/* One message read and checked into r (nothing written): 0 ok, 1 refused (*why = BAD_*), 2 Python (*why =
 * WHY_*), -1 an exception. */
int batch_prep_one(Appender *a, Rec *r, PyObject *msg, long long ts, int *why) {
    if (Py_TYPE(msg) != (PyTypeObject *)a->msg_type) { *why = WHY_TYPE; return 2; }
    PyObject *topic = FIELD(msg, F_TOPIC), *body = FIELD(msg, F_BODY), *qid = FIELD(msg, F_QID);
    if (topic == NULL || body == NULL || qid == NULL) { *why = WHY_FIELDS; return 2; }
    r->topic = Py_NewRef(topic); r->body = Py_NewRef(body); r->qid_obj = Py_NewRef(qid);  /* released by clear_run */
    if (!PyBytes_CheckExact(r->body)) { *why = WHY_BODY; return 2; }
    long long msg_tags, store_ts;
    READ_LL(F_QID, LLONG_MIN, INT32_MAX, &r->qid);
    READ_LL(F_FLAG, INT32_MIN, INT32_MAX, &r->flag);
    READ_LL(F_SYSFLAG, LLONG_MIN, LLONG_MAX, &r->sysflag);
    READ_LL(F_BORN_TS, LLONG_MIN, LLONG_MAX, &r->born_ts);
    READ_LL(F_RECONSUME, INT32_MIN, INT32_MAX, &r->reconsume);
    READ_LL(F_PREP, LLONG_MIN, LLONG_MAX, &r->prep);
    READ_LL(F_TAGS, LLONG_MIN, LLONG_MAX, &msg_tags);
    READ_LL(F_STORE_TS, LLONG_MIN, LLONG_MAX, &store_ts);
    long long stored_flag = r->sysflag & ~0x30LL;
    if (stored_flag < INT32_MIN || stored_flag > INT32_MAX) { *why = WHY_FIELDS; return 2; }
    r->store_ts = store_ts ? store_ts : ts;
    Py_ssize_t blen = PyBytes_GET_SIZE(r->body);
    if (blen > a->max_body || r->qid < 0) { *why = BAD_ILLEGAL; return 1; }
    Py_ssize_t delay_at = -1, delay_n = 0, tags_at = -1, tags_n = 0;
    r->keys_at = r->uniq_at = -1;
    int rc = encode_props(a, r, FIELD(msg, F_PROPS), &delay_at, &delay_n, &tags_at, &tags_n);
    if (rc) { *why = rc == 2 ? BAD_PROPS_SIZE : WHY_PROPS; return rc < 0 ? -1 : rc == 2 ? 1 : 2; }
    if ((rc = check_topic(r)) != 0) { *why = rc == 1 ? BAD_ILLEGAL : WHY_TOPIC; return rc; }
    r->size = REC_HEADER + blen + (r->tn > 127 ? 2 : 1) + r->tn + 2 + r->props_n;
    if (r->size + 8 > a->segment_size) { *why = BAD_ILLEGAL; return 1; }
    if ((rc = born_host(a, r, FIELD(msg, F_BORN_HOST))) != 0) { *why = WHY_HOST; return rc < 0 ? -1 : 2; }
    r->qslot = (r->sysflag & 0x4) ? -1 : 0;
    if (r->qslot == 0 && (rc = tags_code(a, r, msg_tags, delay_at, delay_n, tags_at, tags_n)) != 0) {
        *why = WHY_DELAY;
        return rc < 0 ? -1 : 2;
    }
    r->nh = 0;
    if (a->index_put != Py_None && (r->sysflag & 0xC) != 0xC) {
        if (a->hashes_n + KEYS_CAP > a->hashes_cap &&
            batch_grow((void **)&a->hashes, &a->hashes_cap, a->hashes_n + KEYS_CAP, sizeof(uint32_t)))
            return -1;
        Prop keys = {"KEYS", 4, a->arena + r->keys_at, r->keys_n}, uniq = {"UNIQ_KEY", 8, a->arena + r->uniq_at,
                                                                           r->uniq_n};
        r->h_at = a->hashes_n;
        r->nh = ixw_hash(&a->ix, r->topic, r->keys_at >= 0 && r->keys_n > 0 ? &keys : NULL,
                         r->uniq_at >= 0 && r->uniq_n > 0 ? &uniq : NULL, a->hashes + r->h_at, KEYS_CAP);
        if (r->nh > 0) a->hashes_n += r->nh;
    }
    return 0;
}
