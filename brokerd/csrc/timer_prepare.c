/* timer_prepare: the timer firing's preparation of a due timer from its parked record's bytes, in C. The Python code
 * of brokerd/timer/deliver.py prepare is the reference and takes every record this code leaves to it;
 * tests/unit/timer/test_deliver_prepare.py compares both with decode_record + delivery on generated records.
 *
 *   timer_prepare(raw, qoff, due, roll, now, timer_topic, msg_type)
 *       -> the message to store (a msg_type), None (no real topic: resolved without a delivery), False (not the
 *          parked record of that timer: stale) or NotImplemented (a layout or a value Python reads its own way)
 *
 * Taken here: magic V1, IPv4 hosts, lengths that add up, UTF-8 properties, TIMER_OUT_MS / TIMER_ROLL_TIMES as plain
 * decimal integers, REAL_QID plain ASCII. The message is the one RocketMQ's TimerMessageStore.convert builds: the
 * parked properties with TIMER_ENQUEUE_MS (kept, or the parked store time), TIMER_DEQUEUE_MS (now), then for a
 * delivery REAL_QID and REAL_TOPIC removed (its topic and queue), for a roll TIMER_ROLL_TIMES + 1 (the timer topic,
 * queue 0). */
#include "send.h"

#define REC_HEADER 88
#define MAGIC_V1 0xDAA320A7u

static PyObject *s_out_ms, *s_enq, *s_deq, *s_roll, *s_real_topic, *s_real_qid, *s_tags, *s_zero;

static int intern_keys(void) {
    if (s_zero != NULL) return 0;
    s_out_ms = PyUnicode_InternFromString("TIMER_OUT_MS");
    s_enq = PyUnicode_InternFromString("TIMER_ENQUEUE_MS");
    s_deq = PyUnicode_InternFromString("TIMER_DEQUEUE_MS");
    s_roll = PyUnicode_InternFromString("TIMER_ROLL_TIMES");
    s_real_topic = PyUnicode_InternFromString("REAL_TOPIC");
    s_real_qid = PyUnicode_InternFromString("REAL_QID");
    s_tags = PyUnicode_InternFromString("TAGS");
    s_zero = PyUnicode_InternFromString("0");
    return s_out_ms && s_enq && s_deq && s_roll && s_real_topic && s_real_qid && s_tags && s_zero ? 0 : -1;
}

/* A property value as int() reads it, in the form taken here ([+-]?[0-9]{1,18}): 1 read, 0 absent, -1 another
 * form (Python decides). */
static int plain_int(PyObject *v, long long *out) {
    if (v == NULL) return 0;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (s == NULL) { PyErr_Clear(); return -1; }
    Py_ssize_t i = n > 0 && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (n - i < 1 || n - i > 18) return -1;
    long long x = 0;
    for (Py_ssize_t k = i; k < n; k++) {
        if (s[k] < '0' || s[k] > '9') return -1;
        x = x * 10 + (s[k] - '0');
    }
    *out = s[0] == '-' ? -x : x;
    return 1;
}

/* REAL_QID as `int(qid) if qid.isdigit() else 0` reads it: 1 (*out set), -1 Python decides (non-ASCII, long). */
static int queue_id(PyObject *v, long long *out) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (s == NULL) { PyErr_Clear(); return -1; }
    long long x = 0;
    int digits = n > 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if ((unsigned char)s[k] >= 0x80) return -1;
        if (s[k] < '0' || s[k] > '9') digits = 0;
        else x = x * 10 + (s[k] - '0');
    }
    if (digits && n > 18) return -1;
    *out = digits ? x : 0;
    return 1;
}

static int set_ll(PyObject *d, PyObject *k, long long v) {
    PyObject *s = PyUnicode_FromFormat("%lld", v);
    int r = s == NULL ? -1 : PyDict_SetItem(d, k, s);
    Py_XDECREF(s);
    return r;
}

static PyObject *hosts;  /* (ip << 32 | port) -> the (ip, port) tuple: a few hosts recur */

/* A host as decode_record reads it: ("a.b.c.d", port), a new reference. */
static PyObject *host(const unsigned char *ip, const unsigned char *port) {
    if (hosts == NULL && (hosts = PyDict_New()) == NULL) return NULL;
    PyObject *key = PyLong_FromUnsignedLongLong((uint64_t)(uint32_t)be32(ip) << 32 | (uint32_t)be32(port));
    if (key == NULL) return NULL;
    PyObject *t = PyDict_GetItemWithError(hosts, key);
    if (t != NULL || PyErr_Occurred()) { Py_DECREF(key); return Py_XNewRef(t); }
    PyObject *s = PyUnicode_FromFormat("%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
    t = s ? Py_BuildValue("(Oi)", s, be32(port)) : NULL;
    Py_XDECREF(s);
    if (t != NULL && PyDict_GET_SIZE(hosts) < 4096 && PyDict_SetItem(hosts, key, t) < 0) Py_CLEAR(t);
    Py_DECREF(key);
    return t;
}

#define DECIDE_IN_PYTHON() do { Py_DECREF(props); return Py_NewRef(Py_NotImplemented); } while (0)

/* The properties edited into the message's (RocketMQ's convert), the message built: see the file's comment. */
static PyObject *build(const unsigned char *r, Py_ssize_t n, PyObject *props, long long store_ts, int roll,
                       long long now, PyObject *timer_topic, PyObject *msg_type) {
    PyObject *topic = PyDict_GetItemWithError(props, s_real_topic);  /* borrowed */
    if (topic == NULL) { Py_DECREF(props); return PyErr_Occurred() ? NULL : Py_NewRef(Py_None); }
    long long qid = 0, rolls = 0;
    PyObject *rq = PyDict_GetItemWithError(props, s_real_qid);
    if ((roll && plain_int(PyDict_GetItemWithError(props, s_roll), &rolls) < 0) ||
        (!roll && rq != NULL && queue_id(rq, &qid) < 0))
        DECIDE_IN_PYTHON();
    if (PyErr_Occurred()) { Py_DECREF(props); return NULL; }
    Py_INCREF(topic);  /* removed from the dict below */
    int rc = PyDict_GetItemWithError(props, s_enq) == NULL ? (PyErr_Occurred() ? -1 : set_ll(props, s_enq, store_ts)) : 0;
    rc = rc ? rc : set_ll(props, s_deq, now);
    if (rc == 0 && roll) {
        rc = set_ll(props, s_roll, rolls + 1);
        Py_SETREF(topic, Py_NewRef(timer_topic));
        qid = 0;
    } else if (rc == 0) {
        rc = (rq != NULL && PyDict_DelItem(props, s_real_qid) < 0) || PyDict_DelItem(props, s_real_topic) < 0 ? -1 : 0;
    }
    PyObject *tags = rc ? NULL : PyDict_GetItemWithError(props, s_tags);
    long long blen = be32(r + 84);
    PyObject *a[12] = {topic, rc || PyErr_Occurred() ? NULL : PyLong_FromLongLong(qid),
                       PyBytes_FromStringAndSize((const char *)r + REC_HEADER, blen), PyLong_FromLong(be32(r + 16)),
                       props, PyLong_FromLong(be32(r + 36)), PyLong_FromLongLong(be64(r + 40)), host(r + 48, r + 52),
                       host(r + 64, r + 68), PyLong_FromLong(be32(r + 72)), PyLong_FromLong(0), NULL};
    if (a[1] != NULL) {
        Py_ssize_t tn = 0;
        const char *t = tags != NULL ? PyUnicode_AsUTF8AndSize(tags, &tn) : "";
        a[11] = t != NULL ? PyLong_FromLong(tn ? java_hash((const unsigned char *)t, tn) : 0) : NULL;
    }
    PyObject *msg = NULL;
    int ok = 1;
    for (int i = 0; i < 12; i++) ok = ok && a[i] != NULL;
    if (ok) msg = PyObject_Vectorcall(msg_type, a, 12, NULL);
    for (int i = 0; i < 12; i++) Py_XDECREF(a[i]);  /* topic and props included */
    (void)n;
    return msg;
}

PyObject *timer_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "timer_prepare(raw, qoff, due, roll, now, timer_topic, msg_type)");
        return NULL;
    }
    if (intern_keys()) return NULL;
    const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]), tn;
    long long qoff = PyLong_AsLongLong(args[1]), due = PyLong_AsLongLong(args[2]), now = PyLong_AsLongLong(args[4]);
    int roll = PyObject_IsTrue(args[3]);
    const char *timer_topic = PyUnicode_AsUTF8AndSize(args[5], &tn);
    if (PyErr_Occurred()) return NULL;
    if (n <= REC_HEADER + 3) return Py_NewRef(Py_NotImplemented);
    long long size = be32(r), blen = be32(r + 84), p = REC_HEADER + blen;
    if ((uint32_t)be32(r + 4) != MAGIC_V1 || size != n || (be32(r + 36) & 0x30) || blen < 0 || p >= n)
        return Py_NewRef(Py_NotImplemented);
    long long t_end = p + 1 + r[p];
    long long plen = t_end + 2 <= n ? (int16_t)(r[t_end] << 8 | r[t_end + 1]) : -1;
    if (plen < 0 || t_end + 2 + plen != n) return Py_NewRef(Py_NotImplemented);
    if (be64(r + 20) != qoff || r[p] != tn || memcmp(r + p + 1, timer_topic, tn) != 0) Py_RETURN_FALSE;
    PyObject *props = props_dict((const char *)r + t_end + 2, plen);
    if (props == NULL) return NULL;
    if (props == Py_None) return Py_NewRef(Py_NotImplemented);  /* the reference decodes it with replacements */
    long long store_ts = be64(r + 56), out_ms = store_ts;
    int got = plain_int(PyDict_GetItemWithError(props, s_out_ms), &out_ms);
    if (PyErr_Occurred()) { Py_DECREF(props); return NULL; }
    if (got < 0) DECIDE_IN_PYTHON();
    if (out_ms != due) { Py_DECREF(props); Py_RETURN_FALSE; }
    return build(r, n, props, store_ts, roll, now, args[5], args[6]);
}
