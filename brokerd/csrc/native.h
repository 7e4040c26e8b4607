/* Shared by the C sources of brokerd._native (see brokerd/native.py): JSON header parsing, JSON writing,
 * big-endian helpers and the module's shared objects. Sans-I/O: no syscalls, no threads; the caller's thread
 * holds the GIL throughout. */
#ifndef BROKERD_NATIVE_H
#define BROKERD_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* set by setup() (module.c) */
extern PyObject *g_cmd_type;   /* brokerd.remoting.command.RemotingCommand */
extern PyObject *g_languages;  /* tuple of language names */
extern PyObject *g_crc32;      /* zlib.crc32 */
extern PyObject *g_java, *g_true_s, *g_false_s;

/* ---- JSON header parsing (json.c) */

typedef struct {
    const char *p;  /* raw bytes between the quotes (or of the number) */
    Py_ssize_t n;
    int esc;        /* contains a backslash escape */
} Str;

enum { V_MISSING = 0, V_STR, V_INT, V_TRUE, V_FALSE, V_NULL };

typedef struct {
    Str k;
    int kind;
    Str s;
    long long i;
} Ext;

#define MAX_EXT 64

typedef struct {
    int code_kind, opaque_kind, flag_kind, version_kind;
    long long code, opaque, flag, version;
    int lang_kind; Str lang; long long lang_i;
    int remark_kind; Str remark;
    int ext_kind;  /* V_MISSING, V_NULL or 1 = object */
    int n_ext;
    Ext ext[MAX_EXT];
    signed char letter[26];  /* the last ext field of each send header letter a..m (index_letters), or -1 */
} Hdr;

/* SEND_MESSAGE (10) names the send header's fields in full, SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE by the letters
 * a..m (SendMessageRequestHeaderV2): the letter index of a full name, or -1. */
static inline int full_name_letter(const char *k, Py_ssize_t n) {
#define IS(lit) (memcmp(k, lit, sizeof(lit) - 1) == 0)  /* a constant length: compiled inline */
    switch (n) {
        case 4: return IS("flag") ? 7 : -1;
        case 5: return IS("topic") ? 1 : IS("batch") ? 12 : -1;
        case 7: return IS("queueId") ? 4 : IS("sysFlag") ? 5 : -1;
        case 8: return IS("unitMode") ? 10 : -1;
        case 10: return IS("properties") ? 8 : -1;
        case 12: return IS("defaultTopic") ? 2 : -1;
        case 13: return IS("producerGroup") ? 0 : IS("bornTimestamp") ? 6 : -1;
        case 14: return IS("reconsumeTimes") ? 9 : -1;
        case 17: return IS("maxReconsumeTimes") ? 11 : -1;
        case 21: return IS("defaultTopicQueueNums") ? 3 : -1;
        default: return -1;
    }
#undef IS
}

/* Fill h->letter from h->ext (after a parse, h->code set): send_field (send.h) answers the send header's fields
 * without a scan — a SEND_MESSAGE's by their full names, any other request's one-letter keys. */
static inline void index_letters(Hdr *h) {
    int full_names = h->code_kind == V_INT && h->code == 10;
    memset(h->letter, -1, sizeof h->letter);
    for (int i = 0; i < h->n_ext; i++) {
        const Ext *e = &h->ext[i];
        if (e->k.esc) continue;
        if (full_names) {
            int l = full_name_letter(e->k.p, e->k.n);
            if (l >= 0) h->letter[l] = (signed char)i;
        } else if (e->k.n == 1 && e->k.p[0] >= 'a' && e->k.p[0] <= 'z') {
            h->letter[e->k.p[0] - 'a'] = (signed char)i;
        }
    }
}

typedef struct { const char *p, *end; } Cur;

/* The bytes of w that are a backslash, as the high bit of each (SWAR; a borrow can also flag bytes above a true
 * hit, never below it, so the lowest flagged byte is the first backslash). */
static inline uint64_t backslashes8(uint64_t w) {
    uint64_t b = w ^ 0x5C5C5C5C5C5C5C5CULL;
    return (b - 0x0101010101010101ULL) & ~b & 0x8080808080808080ULL;
}

/* Parse a JSON header object (the whole header must be valid UTF-8 and valid JSON, as orjson requires).
 * 0 ok, 1 unsupported (the Python codec decides). */
int parse_header(const char *p, Py_ssize_t n, Hdr *h);

/* The header cache (hcache.c): the spans of a parsed header's string and integer values, in header order, and
 * which Hdr field each one fills (an ext field's index, or a T_* top-level field). */
enum { T_CODE = -1, T_OPAQUE = -2, T_FLAG = -3, T_VERSION = -4, T_LANG = -5, T_REMARK = -6, T_NONE = -7 };
#define HC_TOKS 64
#define HC_MAX 1024  /* longest header cached */
#define HC_WAYS 4
typedef struct { uint16_t start, end; signed char kind; short target; } Tok;
typedef struct { Tok t[HC_TOKS]; int n; int over; /* more than HC_TOKS, or a top-level field repeated */ } Toks;
/* parse_header that also records the value spans into toks (when not NULL) */
int parse_header_toks(const char *p, Py_ssize_t n, Hdr *h, Toks *toks);

/* A header parsed before, kept to parse the next one of the same length by its differences: a client's headers
 * differ from one send to the next only in some values (opaque, timestamps, keys, queue). */
typedef struct {
    Py_ssize_t n;  /* 0: empty */
    char buf[HC_MAX];
    char esc[HC_MAX];  /* 1: the byte is an escape's backslash or one of the 5 bytes after it */
    Hdr h;         /* its parse (Str pointers into buf) */
    Toks toks;
} HcWay;
typedef struct { HcWay way[HC_WAYS]; int next; long long hits, misses, streak; /* misses since the last hit */ } HCache;
/* parse_header, with the same result, by way of the cache: a header that differs from a cached one of the same
 * length only inside string and integer values (not the code), by plain ASCII bytes outside escapes, is parsed
 * by checking and re-reading the values that differ. The parse (NULL: parse_header declines the header): own,
 * or the cache's, whose strings point into the cache's copy of the header (valid until the next call). */
const Hdr *parse_header_cached(HCache *c, const char *p, Py_ssize_t n, Hdr *own);
/* An integer JSON number at c->p (no fraction/exponent, at most 18 digits). 0 ok, 1 unsupported. */
int parse_int(Cur *c, long long *out);
/* Unescape a JSON string into out (capacity >= s->n) as UTF-8; its length, -1 when an escape is invalid. s must
 * come from parse_header or parse_binary_header, which checked its bytes are UTF-8. */
Py_ssize_t unescape(const Str *s, char *out);
int utf8_valid(const unsigned char *s, Py_ssize_t n);
/* zlib.crc32(p[:n], value) (index.c) */
uint32_t crc32_update(uint32_t value, const unsigned char *p, Py_ssize_t n);

/* ---- JSON writing (json.c) */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char stack[1024];
} Out;

void out_init(Out *o);
void out_free(Out *o);
int out_raw(Out *o, const char *s, Py_ssize_t n);
int out_ll(Out *o, long long v);
int fmt_ll(char *dst, long long v);  /* v in decimal at dst (room for 21 bytes); its length */
int out_jstr(Out *o, const char *s, Py_ssize_t n);  /* a JSON string of UTF-8 bytes, quotes included */
int out_pystr(Out *o, PyObject *obj);                /* 1 when obj is not a plain str (caller falls back) */
PyObject *frame_bytes(Out *o, Py_ssize_t body_len);  /* total length + header length + the JSON header */
#define OUT_LIT(o, s) out_raw((o), (s), (Py_ssize_t)sizeof(s) - 1)

/* ---- codec (codec.c) */

PyObject *decode_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *encode_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* ---- replicated log bytes (scan.c): validate_raw + parse_for_dispatch in one pass (see scan.c) */

PyObject *scan_log(PyObject *self, PyObject *args);
PyObject *index_put(PyObject *self, PyObject *args);
/* o.name as a C long long (0; -1 with an exception set) */
static inline int attr_ll(PyObject *o, const char *name, long long *v) {
    PyObject *a = PyObject_GetAttrString(o, name);
    if (a == NULL) return -1;
    *v = PyLong_AsLongLong(a);
    Py_DECREF(a);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ---- a record's properties string as a dict (props.c): NULL with an exception, None when not UTF-8 */
PyObject *props_dict(const char *p, Py_ssize_t n);

/* ---- a pull's read over one consume-queue file (pull_scan.c) */
PyObject *scan_pull(PyObject *self, PyObject *args);

/* ---- the send lane (lane.c) */

extern PyTypeObject LaneType;

/* ---- big-endian helpers */

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}
static inline void put_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}
static inline void be16w(unsigned char *p, int v) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }
static inline long long be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (long long)v;
}
static inline void be64w(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)v; v >>= 8; }
}

#endif
