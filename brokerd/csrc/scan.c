/* scan_log: validate a buffer of raw commit-log bytes and parse what dispatch needs, in one pass.
 *
 * The slave applies the master's log bytes with MessageStore.append_raw. The Python reference does that in two
 * walks: brokerd/store/maintenance.py validate_raw (+ brokerd/message/record.py verify_record / record_layout)
 * checks every record, then Dispatcher.reput parses each one again (queue_store.parse_for_dispatch +
 * properties.decode_properties). This file does both at once, with the same rules and the same error messages:
 *
 *   scan_log(buf, base, segment_size, verify) -> (end, records)
 *
 * buf holds log bytes starting at physical offset base. Records are walked as validate_raw walks them: a blank
 * end-of-segment marker must be exactly as long as the room left in its segment, a record must not cross a
 * segment, a record must have magic V1/V2, a sane size, consistent inner lengths and (verify true) the stored
 * body CRC; an incomplete tail ends the walk (not an error). Corrupt data raises ValueError with validate_raw's
 * message. end is the physical end of the complete records (blank markers included); records has one tuple per
 * complete non-blank record:
 *
 *   (phys, size, topic, queue_id, queue_offset, sys_flag, store_timestamp, TAGS, KEYS, UNIQ_KEY, DELAY)
 *
 * the four property values as decode_properties would give them (str or None): the properties are split on
 * 0x02, a pair needs a non-empty name before its first 0x01 and a non-empty value after it, a later duplicate
 * wins, and values are decoded as UTF-8 with errors="replace" (0x01 and 0x02 are ASCII, so splitting the bytes
 * before decoding gives what decoding first gives). Every read is bounds-checked against the buffer: any input
 * gives a result or a ValueError. */
#include "native.h"
#include "send.h"

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define MAGIC_BLANK ((int32_t)0xCBD43194)
#define RECORD_OVERHEAD_V1 91
#define MSG_MAX 256

enum { P_TAGS, P_KEYS, P_UNIQ, P_DELAY, P_N };

typedef struct { const unsigned char *p; Py_ssize_t n; } Span;  /* p NULL: absent */

typedef struct {
    const unsigned char *b;
    Py_ssize_t n;           /* the buffer's length: the bound of every read */
    long long base, seg;
    int verify;
    PyObject *topic;        /* one-entry cache: the last topic's bytes and str (most records share a topic) */
    Span topic_raw;
    PyObject *tags;         /* the same for the TAGS value */
    Span tags_raw;
} Scan;

typedef struct { int32_t sysflag; Py_ssize_t body, blen, topic, tlen, props, plen; } Layout;


/* ---- CRC32 of a body: crc_of (crc.c), zlib.crc32's value; g_crc32 is its fallback without zlib's header */

static int body_crc(const unsigned char *p, Py_ssize_t n, uint32_t *out) {
    if (g_crc32 == NULL) {  /* setup() not called yet (the codec sets it): take zlib.crc32 ourselves */
        PyObject *zlib = PyImport_ImportModule("zlib");
        if (zlib == NULL) return -1;
        g_crc32 = PyObject_GetAttrString(zlib, "crc32");
        Py_DECREF(zlib);
        if (g_crc32 == NULL) return -1;
    }
    return crc_of((const char *)p, n, out);
}

/* ---- errors: the texts of validate_raw / verify_record / record_layout */

static int corrupt(long long phys, const char *inner) {
    PyErr_Format(PyExc_ValueError, "corrupt replicated record at %lld: %s", phys, inner);
    return -1;
}

/* record_layout(buf, pos, size): every read bounded by the whole buffer, as struct.unpack_from is. 0 ok, else
 * msg holds the CorruptRecordError text. */
static int layout(const Scan *s, Py_ssize_t pos, int32_t size, Layout *l, char *msg) {
    const unsigned char *b = s->b;
    Py_ssize_t n = s->n, end = pos + size;
    if (pos + 40 > n) goto truncated;
    l->sysflag = be32(b + pos + 36);
    Py_ssize_t p = pos + 48 + (l->sysflag & 0x10 ? 20 : 8) + 8 + (l->sysflag & 0x20 ? 20 : 8) + 12;
    if (p + 4 > n) goto truncated;
    int32_t blen = be32(b + p);
    l->body = p + 4;
    l->blen = blen;
    p = l->body + blen;
    if (blen < 0 || p >= end) {
        snprintf(msg, MSG_MAX, "bad body length %d at %zd", blen, pos);
        return -1;
    }
    if (be32(b + pos + 4) == MAGIC_V1) {
        if (p + 1 > n) goto truncated;
        l->tlen = b[p];
        p += 1;
    } else {
        if (p + 2 > n) goto truncated;
        l->tlen = (Py_ssize_t)b[p] << 8 | b[p + 1];
        p += 2;
    }
    l->topic = p;
    p += l->tlen;
    if (p + 2 > n) goto truncated;
    l->plen = (int16_t)(b[p] << 8 | b[p + 1]);
    l->props = p + 2;
    if (l->plen < 0 || p + 2 + l->plen != end) {
        snprintf(msg, MSG_MAX, "record lengths disagree with size %d at %zd", size, pos);
        return -1;
    }
    return 0;
truncated:
    snprintf(msg, MSG_MAX, "truncated record at %zd", pos);
    return -1;
}

/* verify_record(buf, pos, n) and the parse; raises ValueError (validate_raw's text) on corrupt data. */
static int check_record(const Scan *s, Py_ssize_t pos, long long phys, Layout *l) {
    char msg[MSG_MAX];
    int32_t size = be32(s->b + pos), magic = be32(s->b + pos + 4);
    if (magic != MAGIC_V1 && magic != MAGIC_V2) {
        snprintf(msg, MSG_MAX, "bad magic 0x%x at %zd", (unsigned)magic, pos);
        return corrupt(phys, msg);
    }
    if (size < RECORD_OVERHEAD_V1 || pos + size > s->n) {
        snprintf(msg, MSG_MAX, "bad record size %d at %zd", size, pos);
        return corrupt(phys, msg);
    }
    if (layout(s, pos, size, l, msg)) return corrupt(phys, msg);
    if (!s->verify) return 0;
    int32_t stored = be32(s->b + pos + 8);
    uint32_t actual;
    if (body_crc(s->b + l->body, l->blen, &actual)) return -1;
    actual &= 0x7FFFFFFF;
    if ((uint32_t)stored != actual) {
        snprintf(msg, MSG_MAX, "body CRC mismatch at %zd: stored %d, computed %u", pos, stored, actual);
        return corrupt(phys, msg);
    }
    return 0;
}

/* ---- properties: the values of TAGS, KEYS, UNIQ_KEY and DELAY as decode_properties reads them */

static int prop_index(const unsigned char *k, Py_ssize_t kn) {
    switch (kn) {
    case 4: return memcmp(k, "TAGS", 4) == 0 ? P_TAGS : memcmp(k, "KEYS", 4) == 0 ? P_KEYS : -1;
    case 5: return memcmp(k, "DELAY", 5) == 0 ? P_DELAY : -1;
    case 8: return memcmp(k, "UNIQ_KEY", 8) == 0 ? P_UNIQ : -1;
    default: return -1;
    }
}

static void find_props(const unsigned char *s, Py_ssize_t n, Span *out) {
    for (int i = 0; i < P_N; i++) out[i] = (Span){NULL, 0};
    const unsigned char *p = s, *end = s + n;
    while (p < end) {
        const unsigned char *seg_end = memchr(p, '\x02', end - p);
        if (seg_end == NULL) seg_end = end;
        const unsigned char *sep = memchr(p, '\x01', seg_end - p);
        if (sep != NULL && sep > p && seg_end > sep + 1) {
            int i = prop_index(p, sep - p);
            if (i >= 0) out[i] = (Span){sep + 1, seg_end - sep - 1};
        }
        p = seg_end + 1;
    }
}

static PyObject *decode_span(Span v) {
    if (v.p == NULL) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)v.p, v.n, "replace");
}

/* A str for bytes, reusing the cached one when the bytes are the same (a new reference). */
static PyObject *cached_str(PyObject **cache, Span *cache_raw, Span v) {
    if (v.p == NULL) Py_RETURN_NONE;
    if (*cache != NULL && cache_raw->n == v.n && memcmp(cache_raw->p, v.p, v.n) == 0) return Py_NewRef(*cache);
    PyObject *str = decode_span(v);
    if (str == NULL) return NULL;
    Py_XSETREF(*cache, Py_NewRef(str));
    *cache_raw = v;
    return str;
}

/* The dispatch tuple of a checked record (a new reference). */
static PyObject *record_tuple(Scan *s, Py_ssize_t pos, long long phys, int32_t size, const Layout *l) {
    const unsigned char *b = s->b;
    Span props[P_N];
    find_props(b + l->props, l->plen, props);
    Py_ssize_t ts_pos = pos + 48 + (l->sysflag & 0x10 ? 20 : 8);
    PyObject *t = PyTuple_New(11);
    if (t == NULL) return NULL;
    for (int i = 0; i < 11; i++) {
        PyObject *v;
        switch (i) {
        case 0: v = PyLong_FromLongLong(phys); break;
        case 1: v = PyLong_FromLong(size); break;
        case 2: v = cached_str(&s->topic, &s->topic_raw, (Span){b + l->topic, l->tlen}); break;
        case 3: v = PyLong_FromLong(be32(b + pos + 12)); break;
        case 4: v = PyLong_FromLongLong(be64(b + pos + 20)); break;
        case 5: v = PyLong_FromLong(l->sysflag); break;
        case 6: v = PyLong_FromLongLong(be64(b + ts_pos)); break;
        case 7: v = cached_str(&s->tags, &s->tags_raw, props[P_TAGS]); break;
        default: v = decode_span(props[P_KEYS + i - 8]); break;  /* KEYS, UNIQ_KEY, DELAY */
        }
        if (v == NULL) { Py_DECREF(t); return NULL; }  /* the unset slots are NULL: tuple dealloc skips them */
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* ---- the walk (validate_raw's loop) */

static int scan_walk(Scan *s, PyObject *records, Py_ssize_t *out_p) {
    Py_ssize_t p = 0;
    while (s->n - p >= 8) {
        long long phys = s->base + p;
        long long room = s->seg - phys % s->seg;
        int32_t size = be32(s->b + p), magic = be32(s->b + p + 4);
        if (magic == MAGIC_BLANK) {
            if (size != room) {
                PyErr_Format(PyExc_ValueError, "bad blank marker at %lld: size %d, segment room %lld", phys, size,
                             room);
                return -1;
            }
        } else if ((long long)size + 8 > room) {
            PyErr_Format(PyExc_ValueError, "record at %lld of %d bytes crosses a segment boundary", phys, size);
            return -1;
        }
        if (p + (long long)size > s->n) break;
        if (magic != MAGIC_BLANK) {
            Layout l;
            if (check_record(s, p, phys, &l)) return -1;
            PyObject *t = record_tuple(s, p, phys, size, &l);
            if (t == NULL) return -1;
            int rc = PyList_Append(records, t);
            Py_DECREF(t);
            if (rc < 0) return -1;
        }
        p += size;  /* size > 0: a blank marker's equals the room, a record's is at least 91 */
    }
    *out_p = p;
    return 0;
}

PyObject *scan_log(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base, seg;
    int verify = 1;
    if (!PyArg_ParseTuple(args, "y*LL|p", &view, &base, &seg, &verify)) return NULL;
    if (base < 0 || seg <= 0 || base > LLONG_MAX - (long long)view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "bad base %lld or segment size %lld", base, seg);
        return NULL;
    }
    Scan s = {view.buf, view.len, base, seg, verify, NULL, {NULL, 0}, NULL, {NULL, 0}};
    PyObject *records = PyList_New(0), *result = NULL;
    Py_ssize_t p = 0;
    if (records != NULL && scan_walk(&s, records, &p) == 0)
        result = Py_BuildValue("(LO)", base + (long long)p, records);
    Py_XDECREF(records);
    Py_XDECREF(s.topic);
    Py_XDECREF(s.tags);
    PyBuffer_Release(&view);
    return result;
}
