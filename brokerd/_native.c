/* brokerd._native: the C half of the broker's hot path (see brokerd/native.py for the Python side).
 *
 * 1. decode_frame / encode_head: the remoting codec for the common frames (JSON headers with string, integer,
 *    boolean and null values). Anything else (binary headers, floats, arrays, bad JSON) is handed back to the
 *    pure-Python codec, which stays the reference and produces the error messages.
 * 2. SendLane: the common-case SEND_MESSAGE / SEND_MESSAGE_V2 from frame bytes to stored record and response
 *    bytes: header fields, properties, the stored record in the commit-log segment, the queue offset, then the
 *    consume-queue put, key-index put and dispatch listeners (Python callables), and the response frame.
 *    Any request it does not fully understand stops the lane at that frame; Python then handles the frame, so
 *    requests are processed in arrival order and every unusual case keeps its Python behaviour.
 *
 * Sans-I/O: no syscalls, no threads; everything runs on the caller's (event loop) thread under the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ module state */

static PyObject *g_cmd_type;   /* brokerd.remoting.command.RemotingCommand */
static PyObject *g_languages;  /* tuple of language names */
static PyObject *g_crc32;      /* zlib.crc32 */
static PyObject *g_java;       /* "JAVA" */
static PyObject *g_true_s, *g_false_s;

/* ------------------------------------------------------------------ JSON header parsing */

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
} Hdr;

typedef struct { const char *p, *end; } Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hexval(char ch);
static int read_u16(const char *p, const char *end, unsigned *out);

/* A JSON string at c->p (which is at the opening quote); escapes are checked as strictly as orjson does
 * (known escapes, four hex digits, surrogates only in pairs). 0 ok, 1 unsupported/invalid. */
static int parse_str(Cur *c, Str *out) {
    if (c->p >= c->end || *c->p != '"') return 1;
    const char *s = ++c->p;
    int esc = 0;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            out->p = s; out->n = c->p - s; out->esc = esc;
            c->p++;
            return 0;
        }
        if (ch == '\\') {
            esc = 1;
            if (c->end - c->p < 2) return 1;
            char e = c->p[1];
            c->p += 2;
            if (e == 'u') {
                unsigned cp, lo;
                if (read_u16(c->p, c->end, &cp)) return 1;
                c->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return 1;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || read_u16(c->p + 2, c->end, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) return 1;
                    c->p += 6;
                }
            } else if (!memchr("\"\\/bfnrt", e, 8) || e == 0) return 1;
            continue;
        }
        if (ch < 0x20) return 1;
        c->p++;
    }
    return 1;
}

static int parse_int(Cur *c, long long *out) {
    const char *p = c->p;
    int neg = 0;
    if (p < c->end && *p == '-') { neg = 1; p++; }
    const char *d = p;
    long long v = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        if (p - d >= 18) return 1;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (p == d || (p - d > 1 && *d == '0')) return 1;
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E')) return 1;
    *out = neg ? -v : v;
    c->p = p;
    return 0;
}

/* A scalar value: string, integer, true, false, null. Sets *kind. 0 ok, 1 unsupported. */
static int parse_scalar(Cur *c, int *kind, Str *s, long long *i) {
    if (c->p >= c->end) return 1;
    char ch = *c->p;
    if (ch == '"') { *kind = V_STR; return parse_str(c, s); }
    if (ch == '-' || (ch >= '0' && ch <= '9')) { *kind = V_INT; return parse_int(c, i); }
    if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) { *kind = V_TRUE; c->p += 4; return 0; }
    if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) { *kind = V_FALSE; c->p += 5; return 0; }
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) { *kind = V_NULL; c->p += 4; return 0; }
    return 1;
}

static inline int key_is(const Str *k, const char *lit, Py_ssize_t n) {
    return !k->esc && k->n == n && memcmp(k->p, lit, n) == 0;
}

static int parse_ext(Cur *c, Hdr *h) {
    c->p++;  /* '{' */
    ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        if (h->n_ext >= MAX_EXT) return 1;
        Ext *e = &h->ext[h->n_ext];
        ws(c);
        if (parse_str(c, &e->k)) return 1;
        ws(c);
        if (c->p >= c->end || *c->p != ':') return 1;
        c->p++;
        ws(c);
        if (parse_scalar(c, &e->kind, &e->s, &e->i)) return 1;
        h->n_ext++;
        ws(c);
        if (c->p < c->end && *c->p == ',') { c->p++; continue; }
        if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
        return 1;
    }
}

static int utf8_valid(const unsigned char *s, Py_ssize_t n);

static int ascii_only(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL) return 0;
    }
    for (; i < n; i++)
        if (s[i] & 0x80) return 0;
    return 1;
}

/* Parse a JSON header object (the whole header must be valid UTF-8 and valid JSON, as orjson requires).
 * 0 ok, 1 unsupported (the Python codec decides). */
static int parse_header(const char *p, Py_ssize_t n, Hdr *h) {
    Cur c = {p, p + n};
    h->code_kind = h->opaque_kind = h->flag_kind = h->version_kind = V_MISSING;
    h->lang_kind = h->remark_kind = h->ext_kind = V_MISSING;
    h->n_ext = 0;
    ws(&c);
    if (c.p >= c.end || *c.p != '{') return 1;
    c.p++;
    ws(&c);
    if (c.p < c.end && *c.p == '}') { c.p++; goto done; }
    for (;;) {
        Str k;
        ws(&c);
        if (parse_str(&c, &k)) return 1;
        ws(&c);
        if (c.p >= c.end || *c.p != ':') return 1;
        c.p++;
        ws(&c);
        if (key_is(&k, "extFields", 9) && c.p < c.end && *c.p == '{') {
            if (h->ext_kind == 1) return 1;  /* a repeated object: let orjson decide */
            if (parse_ext(&c, h)) return 1;
            h->ext_kind = 1;
        } else {
            int kind; Str s; long long i;
            if (parse_scalar(&c, &kind, &s, &i)) return 1;
            if (key_is(&k, "code", 4)) { h->code_kind = kind; h->code = i; }
            else if (key_is(&k, "opaque", 6)) { h->opaque_kind = kind; h->opaque = i; }
            else if (key_is(&k, "flag", 4)) { h->flag_kind = kind; h->flag = i; }
            else if (key_is(&k, "version", 7)) { h->version_kind = kind; h->version = i; }
            else if (key_is(&k, "language", 8)) { h->lang_kind = kind; h->lang = s; h->lang_i = i; }
            else if (key_is(&k, "remark", 6)) { h->remark_kind = kind; h->remark = s; }
            else if (key_is(&k, "extFields", 9)) {
                if (kind != V_NULL || h->ext_kind == 1) return 1;
                h->ext_kind = V_NULL;
            }
            else if (k.esc) return 1;  /* an escaped key might spell one of ours */
        }
        ws(&c);
        if (c.p < c.end && *c.p == ',') { c.p++; continue; }
        if (c.p < c.end && *c.p == '}') { c.p++; break; }
        return 1;
    }
done:
    ws(&c);
    if (c.p != c.end) return 1;
    if (!ascii_only((const unsigned char *)p, n) && !utf8_valid((const unsigned char *)p, n)) return 1;
    /* the Python codec raises for these (non-integer fields); keep its messages */
    if (h->code_kind != V_INT) return 1;
    if ((h->opaque_kind && h->opaque_kind != V_INT) || (h->flag_kind && h->flag_kind != V_INT) ||
        (h->version_kind && h->version_kind != V_INT)) return 1;
    if (h->lang_kind && h->lang_kind != V_STR && h->lang_kind != V_INT) return 1;
    if (h->remark_kind && h->remark_kind != V_STR && h->remark_kind != V_NULL) return 1;
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_u16(const char *p, const char *end, unsigned *out) {
    if (end - p < 4) return 1;
    unsigned v = 0;
    for (int j = 0; j < 4; j++) {
        int d = hexval(p[j]);
        if (d < 0) return 1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Strict UTF-8 check (what Python's strict decoder accepts). */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int len; unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (int j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

static char *put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Unescape a JSON string into out (capacity >= s->n) as UTF-8; returns length, -1 when invalid/unsupported. */
static Py_ssize_t unescape(const Str *s, char *out) {
    if (!s->esc) {
        if (!utf8_valid((const unsigned char *)s->p, s->n)) return -1;
        memcpy(out, s->p, s->n);
        return s->n;
    }
    const char *p = s->p, *end = s->p + s->n;
    char *o = out;
    const char *run = p;
    while (p < end) {
        if (*p != '\\') { p++; continue; }
        if (!utf8_valid((const unsigned char *)run, p - run)) return -1;
        memcpy(o, run, p - run); o += p - run;
        if (p + 1 >= end) return -1;
        char e = p[1];
        p += 2;
        switch (e) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                unsigned cp;
                if (read_u16(p, end, &cp)) return -1;
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_u16(p + 2, end, &lo) || lo < 0xDC00 ||
                        lo > 0xDFFF) return -1;
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
                o = put_utf8(o, cp);
                break;
            }
            default: return -1;
        }
        run = p;
    }
    if (!utf8_valid((const unsigned char *)run, end - run)) return -1;
    memcpy(o, run, end - run); o += end - run;
    return o - out;
}

/* A Python str of a JSON string; NULL with no exception set when unsupported. */
static PyObject *str_obj(const Str *s, int intern) {
    PyObject *u;
    if (!s->esc) {
        u = PyUnicode_DecodeUTF8(s->p, s->n, NULL);
    } else {
        char stack[512];
        char *buf = s->n <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(s->n);
        if (buf == NULL) return NULL;
        Py_ssize_t n = unescape(s, buf);
        u = n < 0 ? NULL : PyUnicode_DecodeUTF8(buf, n, NULL);
        if (buf != stack) PyMem_Free(buf);
    }
    if (u == NULL) { PyErr_Clear(); return NULL; }
    if (intern) PyUnicode_InternInPlace(&u);
    return u;
}

static PyObject *ext_value(const Ext *e) {
    switch (e->kind) {
        case V_STR: return str_obj(&e->s, 0);
        case V_INT: return PyUnicode_FromFormat("%lld", e->i);
        case V_TRUE: Py_INCREF(g_true_s); return g_true_s;
        case V_FALSE: Py_INCREF(g_false_s); return g_false_s;
        default: return NULL;
    }
}

static PyObject *language_obj(const Hdr *h) {
    if (h->lang_kind == V_MISSING) { Py_INCREF(g_java); return g_java; }
    if (h->lang_kind == V_INT) {
        PyObject *r = (h->lang_i >= 0 && h->lang_i < PyTuple_GET_SIZE(g_languages))
                          ? PyTuple_GET_ITEM(g_languages, h->lang_i)
                          : PyTuple_GET_ITEM(g_languages, 7);
        Py_INCREF(r);
        return r;
    }
    if (!h->lang.esc) {  /* the usual names: shared objects */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g_languages); i++) {
            PyObject *name = PyTuple_GET_ITEM(g_languages, i);
            Py_ssize_t n;
            const char *u = PyUnicode_AsUTF8AndSize(name, &n);
            if (u != NULL && n == h->lang.n && memcmp(u, h->lang.p, n) == 0) { Py_INCREF(name); return name; }
        }
    }
    return str_obj(&h->lang, 0);
}

/* RemotingCommand from a parsed header; NULL without exception = unsupported. */
static PyObject *build_command(const Hdr *h, const char *body, Py_ssize_t blen) {
    PyObject *ext = NULL, *lang = NULL, *remark = NULL, *bodyo = NULL, *args[8] = {0}, *res = NULL;
    ext = PyDict_New();
    if (ext == NULL) return NULL;
    for (int i = 0; i < h->n_ext; i++) {
        const Ext *e = &h->ext[i];
        if (e->kind == V_NULL) {  /* dropped, as the Python codec does */
            PyObject *k = str_obj(&e->k, 1);
            if (k == NULL) goto unsupported;
            if (PyDict_DelItem(ext, k) < 0) PyErr_Clear();  /* a null after a value for the same key */
            Py_DECREF(k);
            continue;
        }
        PyObject *k = str_obj(&e->k, 1);
        if (k == NULL) goto unsupported;
        PyObject *v = ext_value(e);
        if (v == NULL) { Py_DECREF(k); if (PyErr_Occurred()) goto fail; goto unsupported; }
        int rc = PyDict_SetItem(ext, k, v);
        Py_DECREF(k); Py_DECREF(v);
        if (rc < 0) goto fail;
    }
    lang = language_obj(h);
    if (lang == NULL) goto unsupported;
    if (h->remark_kind == V_STR) {
        remark = str_obj(&h->remark, 0);
        if (remark == NULL) goto unsupported;
    } else { remark = Py_None; Py_INCREF(remark); }
    if (blen > 0) {
        bodyo = PyBytes_FromStringAndSize(body, blen);
        if (bodyo == NULL) goto fail;
    } else { bodyo = Py_None; Py_INCREF(bodyo); }
    args[0] = PyLong_FromLongLong(h->code);
    args[1] = PyLong_FromLongLong(h->opaque_kind ? h->opaque : 0);
    args[2] = PyLong_FromLongLong(h->flag_kind ? h->flag : 0);
    args[3] = lang;
    args[4] = PyLong_FromLongLong(h->version_kind ? h->version : 0);
    args[5] = remark;
    args[6] = ext;
    args[7] = bodyo;
    if (args[0] && args[1] && args[2] && args[4]) res = PyObject_Vectorcall(g_cmd_type, args, 8, NULL);
    Py_XDECREF(args[0]); Py_XDECREF(args[1]); Py_XDECREF(args[2]); Py_XDECREF(args[4]);
    Py_DECREF(lang); Py_DECREF(remark); Py_DECREF(ext); Py_DECREF(bodyo);
    return res;
unsupported:
    Py_XDECREF(ext); Py_XDECREF(lang); Py_XDECREF(remark);
    return NULL;
fail:
    Py_XDECREF(ext); Py_XDECREF(lang); Py_XDECREF(remark);
    return NULL;
}

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* decode_frame(buf, pos, max_frame) -> (RemotingCommand, next_pos) | None
 * None: the frame at pos is not complete, too long or not one this codec handles (the Python codec then
 * decides). */
static PyObject *decode_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "decode_frame(buf, pos, max_frame)"); return NULL; }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), max_frame = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *res = NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len;
    if (pos < 0 || n - pos < 8) goto none;
    int32_t total = be32(b + pos);
    if (total < 4 || total > max_frame || n - pos - 4 < total) goto none;
    uint32_t word = (uint32_t)be32(b + pos + 4);
    Py_ssize_t hlen = word & 0xFFFFFF;
    if ((word >> 24) != 0 || 4 + hlen > total) goto none;
    Hdr h;
    if (parse_header((const char *)b + pos + 8, hlen, &h)) goto none;
    PyObject *cmd = build_command(&h, (const char *)b + pos + 8 + hlen, total - 4 - hlen);
    if (cmd == NULL) {
        if (PyErr_Occurred()) goto out;
        goto none;
    }
    res = Py_BuildValue("(Nn)", cmd, pos + 4 + total);
    goto out;
none:
    res = Py_None;
    Py_INCREF(res);
out:
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------ JSON writing */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char stack[1024];
} Out;

static void out_init(Out *o) { o->p = o->stack; o->n = 0; o->cap = sizeof(o->stack); }
static void out_free(Out *o) { if (o->p != o->stack) PyMem_Free(o->p); }

static int out_reserve(Out *o, Py_ssize_t extra) {
    if (o->n + extra <= o->cap) return 0;
    Py_ssize_t cap = (o->n + extra) * 2;
    char *np = PyMem_Malloc(cap);
    if (np == NULL) { PyErr_NoMemory(); return -1; }
    memcpy(np, o->p, o->n);
    if (o->p != o->stack) PyMem_Free(o->p);
    o->p = np; o->cap = cap;
    return 0;
}

static int out_raw(Out *o, const char *s, Py_ssize_t n) {
    if (out_reserve(o, n)) return -1;
    memcpy(o->p + o->n, s, n);
    o->n += n;
    return 0;
}

#define OUT_LIT(o, s) out_raw((o), (s), (Py_ssize_t)sizeof(s) - 1)

static int out_ll(Out *o, long long v) {
    char tmp[24];
    int k = snprintf(tmp, sizeof tmp, "%lld", v);
    return out_raw(o, tmp, k);
}

/* JSON string of UTF-8 bytes (quotes included). */
static int out_jstr(Out *o, const char *s, Py_ssize_t n) {
    if (out_reserve(o, n * 6 + 2)) return -1;
    char *w = o->p + o->n;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { *w++ = '\\'; *w++ = (char)c; }
        else if (c >= 0x20) *w++ = (char)c;
        else if (c == '\n') { *w++ = '\\'; *w++ = 'n'; }
        else if (c == '\r') { *w++ = '\\'; *w++ = 'r'; }
        else if (c == '\t') { *w++ = '\\'; *w++ = 't'; }
        else if (c == '\b') { *w++ = '\\'; *w++ = 'b'; }
        else if (c == '\f') { *w++ = '\\'; *w++ = 'f'; }
        else { static const char hx[] = "0123456789abcdef"; *w++ = '\\'; *w++ = 'u'; *w++ = '0'; *w++ = '0';
               *w++ = hx[c >> 4]; *w++ = hx[c & 15]; }
    }
    *w++ = '"';
    o->n = w - o->p;
    return 0;
}

/* 1 when obj is not a str (caller falls back), -1 on error */
static int out_pystr(Out *o, PyObject *obj) {
    if (!PyUnicode_CheckExact(obj)) return 1;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(obj, &n);
    if (u == NULL) { PyErr_Clear(); return 1; }
    return out_jstr(o, u, n);
}

static inline void put_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}

/* prefix (total length, header length) + JSON header, as the Python codec writes it */
static PyObject *frame_bytes(Out *o, Py_ssize_t body_len) {
    PyObject *r = PyBytes_FromStringAndSize(NULL, o->n + 8);
    if (r == NULL) return NULL;
    char *d = PyBytes_AS_STRING(r);
    put_be32(d, (uint32_t)(4 + o->n + body_len));
    put_be32(d + 4, (uint32_t)o->n);
    memcpy(d + 8, o->p, o->n);
    return r;
}

/* encode_head(code, opaque, flag, language, version, remark, ext, body_len) -> bytes | None
 * None when a value is not plainly encodable (the Python codec then encodes it). */
static PyObject *encode_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) { PyErr_SetString(PyExc_TypeError, "encode_head takes 8 arguments"); return NULL; }
    PyObject *ext = args[6], *remark = args[5];
    if (!PyDict_CheckExact(ext)) Py_RETURN_NONE;
    long long code = PyLong_AsLongLong(args[0]), opaque = PyLong_AsLongLong(args[1]), flag = PyLong_AsLongLong(args[2]),
              version = PyLong_AsLongLong(args[4]);
    Py_ssize_t blen = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_NONE; }
    Out o;
    out_init(&o);
    int rc = 0;
    rc |= OUT_LIT(&o, "{\"code\":");
    rc |= out_ll(&o, code);
    rc |= OUT_LIT(&o, ",\"extFields\":{");
    Py_ssize_t it = 0;
    PyObject *k, *v;
    int first = 1;
    while (!rc && PyDict_Next(ext, &it, &k, &v)) {
        if (!first) rc |= OUT_LIT(&o, ",");
        first = 0;
        int a = out_pystr(&o, k);
        if (a) { rc = a; break; }
        rc |= OUT_LIT(&o, ":");
        a = out_pystr(&o, v);
        if (a) { rc = a; break; }
    }
    if (!rc) {
        rc |= OUT_LIT(&o, "},\"flag\":");
        rc |= out_ll(&o, flag);
        rc |= OUT_LIT(&o, ",\"language\":");
        int a = out_pystr(&o, args[3]);
        rc = rc ? rc : a;
    }
    if (!rc) {
        rc |= OUT_LIT(&o, ",\"opaque\":");
        rc |= out_ll(&o, opaque);
        rc |= OUT_LIT(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
        rc |= out_ll(&o, version);
        if (remark != Py_None) {
            rc |= OUT_LIT(&o, ",\"remark\":");
            int a = out_pystr(&o, remark);
            rc = rc ? rc : a;
        }
        rc |= OUT_LIT(&o, "}");
    }
    PyObject *res;
    if (rc < 0) res = NULL;
    else if (rc > 0) { res = Py_None; Py_INCREF(res); }
    else res = frame_bytes(&o, blen);
    out_free(&o);
    return res;
}

/* ------------------------------------------------------------------ the send lane */

#define HEADER_V4_SIZE 88
#define MAX_PROPS 32767
#define SCRATCH (64 * 1024)

typedef struct {
    PyObject_HEAD
    PyObject *topics;       /* dict: topic str -> (prefix bytes, magic, write_qnums, read_qnums, qkeys tuple, cq_puts tuple) */
    PyObject *next_qoff;    /* the store's {(topic, qid): next queue offset} */
    PyObject *listeners;    /* the store's dispatch listeners (only: are there any) */
    PyObject *index_put;    /* callable (topic, keys, phys, ts) or None */
    char cluster[256]; Py_ssize_t cluster_n;
    char id_prefix[16];
    char region[256]; Py_ssize_t region_n;  /* JSON-encoded value, quotes included */
    int trace_on;
    int sync;               /* SYNC_FLUSH store: a WAIT=false message is answered before the flush (Python) */
    unsigned char store_ip[4];
    int32_t store_port;
    long long max_body;
    long long segment_size;
    uint64_t rng;
    /* results of the last run */
    long long wrote, msgs, bytes, last_ts, dispatched_end;
    Py_ssize_t pos;         /* position after the last frame the last run handled */
    PyObject *error;        /* the exception a consume-queue / index put raised (dispatch stopped) */
    /* one-entry topic cache */
    char last_topic[256]; Py_ssize_t last_topic_n; PyObject *last_entry; PyObject *last_topic_obj;
    char scratch[SCRATCH];
    char props[SCRATCH];
} Lane;

static void lane_clear_cache(Lane *l) {
    Py_CLEAR(l->last_entry);
    Py_CLEAR(l->last_topic_obj);
    l->last_topic_n = -1;
}

static int Lane_traverse(Lane *l, visitproc visit, void *arg) {
    Py_VISIT(l->topics); Py_VISIT(l->next_qoff); Py_VISIT(l->listeners); Py_VISIT(l->index_put); Py_VISIT(l->error); Py_VISIT(l->last_entry); Py_VISIT(l->last_topic_obj);
    return 0;
}

static int Lane_clear(Lane *l) {
    Py_CLEAR(l->topics); Py_CLEAR(l->next_qoff); Py_CLEAR(l->listeners); Py_CLEAR(l->index_put); Py_CLEAR(l->error);
    lane_clear_cache(l);
    return 0;
}

static void Lane_dealloc(Lane *l) {
    PyObject_GC_UnTrack(l);
    Lane_clear(l);
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
 *      max_body, segment_size) */
static int Lane_init(Lane *l, PyObject *args, PyObject *kw) {
    PyObject *next_qoff, *listeners, *index_put, *cluster, *id_prefix, *region, *store_ip;
    int trace_on, store_port;
    long long max_body, segment_size;
    if (!PyArg_ParseTuple(args, "O!O!OUUUpSiLL", &PyDict_Type, &next_qoff, &PyList_Type, &listeners, &index_put,
                          &cluster, &id_prefix, &region, &trace_on, &store_ip, &store_port, &max_body,
                          &segment_size))
        return -1;
    if (PyBytes_GET_SIZE(store_ip) != 4) { PyErr_SetString(PyExc_ValueError, "store_ip must be 4 bytes"); return -1; }
    Py_ssize_t n;
    if (copy_utf8(cluster, l->cluster, 200, &l->cluster_n, "cluster name")) return -1;
    if (copy_utf8(id_prefix, l->id_prefix, 16, &n, "id prefix")) return -1;
    if (n != 16) { PyErr_SetString(PyExc_ValueError, "id prefix must be 16 characters"); return -1; }
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
    if (!PyArg_ParseTuple(args, "UO!", &topic, &PyTuple_Type, &entry)) return NULL;
    if (PyTuple_GET_SIZE(entry) != 6 || !PyBytes_Check(PyTuple_GET_ITEM(entry, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(entry, 4)) || !PyTuple_Check(PyTuple_GET_ITEM(entry, 5))) {
        PyErr_SetString(PyExc_TypeError, "entry must be (prefix, magic, write_qnums, read_qnums, qkeys, cq_puts)");
        return NULL;
    }
    if (PyDict_SetItem(l->topics, topic, entry) < 0) return NULL;
    lane_clear_cache(l);
    Py_RETURN_NONE;
}

static PyObject *Lane_clear_topics(Lane *l, PyObject *unused) {
    PyDict_Clear(l->topics);
    lane_clear_cache(l);
    Py_RETURN_NONE;
}

static PyObject *Lane_take_error(Lane *l, PyObject *unused) {
    PyObject *e = l->error;
    l->error = NULL;
    if (e == NULL) Py_RETURN_NONE;
    return e;
}

/* Value of an ext field (last occurrence wins, as in a dict). */
static const Ext *find_ext(const Hdr *h, const char *key, Py_ssize_t klen) {
    for (int i = h->n_ext - 1; i >= 0; i--) {
        const Ext *e = &h->ext[i];
        if (!e->k.esc && e->k.n == klen && memcmp(e->k.p, key, klen) == 0) return e;
    }
    return NULL;
}

/* int(field or default): 0 ok, 1 unsupported (Python parses it) */
static int ext_int(const Hdr *h, const char *key, long long dflt, long long *out) {
    const Ext *e = find_ext(h, key, (Py_ssize_t)strlen(key));
    if (e == NULL || e->kind == V_NULL || (e->kind == V_STR && e->s.n == 0)) { *out = dflt; return 0; }
    if (e->kind == V_INT) { *out = e->i; return 0; }
    if (e->kind != V_STR || e->s.esc) return 1;
    Cur c = {e->s.p, e->s.p + e->s.n};
    if (c.p < c.end && *c.p == '+') return 1;
    if (parse_int(&c, out) || c.p != c.end) return 1;
    return 0;
}

/* Java String.hashCode of UTF-8 bytes (over UTF-16 code units) */
static int32_t java_hash(const unsigned char *s, Py_ssize_t n) {
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned c = s[i], cp;
        if (c < 0x80) { cp = c; i += 1; }
        else if (c < 0xE0) { cp = (c & 0x1F) << 6 | (s[i + 1] & 0x3F); i += 2; }
        else if (c < 0xF0) { cp = (c & 0x0F) << 12 | (s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F); i += 3; }
        else {
            cp = (c & 0x07) << 18 | (s[i + 1] & 0x3F) << 12 | (s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F); i += 4;
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
            continue;
        }
        h = 31 * h + cp;
    }
    return (int32_t)h;
}

typedef struct { const char *k; Py_ssize_t kn; const char *v; Py_ssize_t vn; } Prop;
#define MAX_PROPS_N 256

/* Properties as Java's string2messageProperties reads them (segments split on 0x02, name 0x01 value, both
 * non-empty; later duplicates replace the value in place). Returns the count, -1 when too many. */
static int parse_props(const char *s, Py_ssize_t n, Prop *out) {
    int cnt = 0;
    const char *p = s, *end = s + n;
    while (p <= end) {
        const char *seg_end = memchr(p, '\x02', end - p);
        if (seg_end == NULL) seg_end = end;
        const char *sep = memchr(p, '\x01', seg_end - p);
        if (sep != NULL && sep > p && seg_end > sep + 1) {
            Py_ssize_t kn = sep - p;
            int j;
            for (j = 0; j < cnt; j++)
                if (out[j].kn == kn && memcmp(out[j].k, p, kn) == 0) break;
            if (j == cnt) {
                if (cnt >= MAX_PROPS_N) return -1;
                out[cnt].k = p; out[cnt].kn = kn; cnt++;
            }
            out[j].v = sep + 1; out[j].vn = seg_end - sep - 1;
        }
        if (seg_end == end) break;
        p = seg_end + 1;
    }
    return cnt;
}

static const Prop *prop(const Prop *ps, int n, const char *k, Py_ssize_t kn) {
    for (int i = 0; i < n; i++)
        if (ps[i].kn == kn && memcmp(ps[i].k, k, kn) == 0) return &ps[i];
    return NULL;
}

static inline void be16w(unsigned char *p, int v) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }
static inline void be64w(unsigned char *p, uint64_t v) { for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)v; v >>= 8; } }

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int crc_of(const char *p, Py_ssize_t n, uint32_t *out) {
    PyObject *mv = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (mv == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(g_crc32, mv);
    Py_DECREF(mv);
    if (r == NULL) return -1;
    *out = (uint32_t)PyLong_AsUnsignedLong(r);
    Py_DECREF(r);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *call4(PyObject *fn, PyObject *a, PyObject *b, PyObject *c, PyObject *d) {
    PyObject *args[4] = {a, b, c, d};
    return PyObject_Vectorcall(fn, args, 4, NULL);
}

/* Index keys: KEYS split on spaces (non-empty) + UNIQ_KEY when not among them. */
static PyObject *index_keys(const Prop *keys, const Prop *uniq) {
    PyObject *lst = PyList_New(0);
    if (lst == NULL) return NULL;
    int uniq_seen = 0;
    if (keys != NULL) {
        const char *p = keys->v, *end = keys->v + keys->vn;
        while (p < end) {
            const char *sp = memchr(p, ' ', end - p);
            if (sp == NULL) sp = end;
            if (sp > p) {
                if (uniq != NULL && uniq->vn == sp - p && memcmp(uniq->v, p, sp - p) == 0) uniq_seen = 1;
                PyObject *k = PyUnicode_DecodeUTF8(p, sp - p, NULL);
                if (k == NULL || PyList_Append(lst, k) < 0) { Py_XDECREF(k); Py_DECREF(lst); return NULL; }
                Py_DECREF(k);
            }
            p = sp + 1;
        }
    }
    if (uniq != NULL && !uniq_seen) {
        PyObject *k = PyUnicode_DecodeUTF8(uniq->v, uniq->vn, NULL);
        if (k == NULL || PyList_Append(lst, k) < 0) { Py_XDECREF(k); Py_DECREF(lst); return NULL; }
        Py_DECREF(k);
    }
    return lst;
}

enum { STOP_END = 0, STOP_FRAME = 1, STOP_ROLL = 2, STOP_ERROR = 3 };

/* Try one frame at b[pos:]. Returns 1 when handled (response appended), 0 when Python must handle it,
 * 2 when the segment is full (Python rolls), -1 on a Python exception. */
static int lane_one(Lane *l, const unsigned char *b, Py_ssize_t total, unsigned char *mm, long long base,
                    long long limit, const unsigned char *born_ip, long long born_port, PyObject *out,
                    PyObject *notes) {
    uint32_t word = (uint32_t)be32(b + 4);
    Py_ssize_t hlen = word & 0xFFFFFF;
    if ((word >> 24) != 0 || 4 + hlen > total) return 0;
    Hdr h;
    if (parse_header((const char *)b + 8, hlen, &h)) return 0;
    if ((h.code != 310 && h.code != 10) || (h.flag_kind && h.flag != 0) || h.ext_kind != 1) return 0;
    int v2 = h.code == 310;
#define F(a, long_name) (v2 ? (a) : (long_name))
    const Ext *te = find_ext(&h, F("b", "topic"), v2 ? 1 : 5);
    if (te == NULL || te->kind != V_STR || te->s.esc || te->s.n == 0 || te->s.n > 255) return 0;
    const Ext *be = find_ext(&h, F("m", "batch"), v2 ? 1 : 5);
    if (be != NULL && !(be->kind == V_NULL || be->kind == V_FALSE ||
                        (be->kind == V_STR && (be->s.n == 0 || (be->s.n == 5 && memcmp(be->s.p, "false", 5) == 0)))))
        return 0;
    long long qid, sys_flag, born_ts, flag, reconsume;
    if (ext_int(&h, F("e", "queueId"), -1, &qid) || ext_int(&h, F("f", "sysFlag"), 0, &sys_flag) ||
        ext_int(&h, F("g", "bornTimestamp"), 0, &born_ts) || ext_int(&h, F("h", "flag"), 0, &flag) ||
        ext_int(&h, F("j", "reconsumeTimes"), 0, &reconsume) ||
        ext_int(&h, F("d", "defaultTopicQueueNums"), 4, &(long long){0}))
        return 0;
    if (sys_flag & 0xC || sys_flag < INT32_MIN || sys_flag > INT32_MAX || flag < INT32_MIN || flag > INT32_MAX ||
        reconsume < INT32_MIN || reconsume > INT32_MAX)
        return 0;
    /* the topic's lane entry */
    PyObject *entry;
    if (l->last_topic_n == te->s.n && memcmp(l->last_topic, te->s.p, te->s.n) == 0) {
        entry = l->last_entry;
    } else {
        PyObject *t = PyUnicode_DecodeUTF8(te->s.p, te->s.n, NULL);
        if (t == NULL) { PyErr_Clear(); return 0; }
        entry = PyDict_GetItemWithError(l->topics, t);
        if (entry == NULL) { Py_DECREF(t); return PyErr_Occurred() ? -1 : 0; }
        lane_clear_cache(l);
        memcpy(l->last_topic, te->s.p, te->s.n);
        l->last_topic_n = te->s.n;
        Py_INCREF(entry); l->last_entry = entry;
        l->last_topic_obj = t;
    }
    PyObject *prefix = PyTuple_GET_ITEM(entry, 0);
    long magic = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
    long wq = PyLong_AsLong(PyTuple_GET_ITEM(entry, 2)), rq = PyLong_AsLong(PyTuple_GET_ITEM(entry, 3));
    PyObject *qkeys = PyTuple_GET_ITEM(entry, 4), *cq_puts = PyTuple_GET_ITEM(entry, 5);
    if (PyErr_Occurred()) return -1;
    if (qid < 0) {
        if (wq <= 0) return 0;
        l->rng ^= l->rng << 13; l->rng ^= l->rng >> 7; l->rng ^= l->rng << 17;
        qid = (long long)(l->rng % (uint64_t)wq);
    }
    if (qid >= (wq > rq ? wq : rq) || qid >= PyTuple_GET_SIZE(qkeys) || qid >= PyTuple_GET_SIZE(cq_puts) ||
        PyTuple_GET_ITEM(cq_puts, qid) == Py_None)  /* no consume queue yet: Python creates it */
        return 0;
    /* properties */
    const Ext *pe = find_ext(&h, F("i", "properties"), v2 ? 1 : 10);
    Py_ssize_t sn = 0;
    if (pe != NULL && pe->kind == V_STR) {
        if (pe->s.n > SCRATCH) return 0;
        sn = unescape(&pe->s, l->scratch);
        if (sn < 0) return 0;
    } else if (pe != NULL && pe->kind != V_NULL) return 0;
#undef F
    Prop ps[MAX_PROPS_N];
    int np = parse_props(l->scratch, sn, ps);
    if (np < 0 || prop(ps, np, "DELAY", 5) != NULL) return 0;
    const Prop *uniq = prop(ps, np, "UNIQ_KEY", 8);
    if (uniq == NULL) return 0;  /* Python assigns one */
    if (l->sync) {
        const Prop *wait = prop(ps, np, "WAIT", 4);
        if (wait != NULL && wait->vn == 5 && memcmp(wait->v, "false", 5) == 0) return 0;
    }
    const Prop *tags = prop(ps, np, "TAGS", 4), *keys = prop(ps, np, "KEYS", 4);
    /* stored properties: the parsed pairs in order, CLUSTER set */
    unsigned char *pp = (unsigned char *)l->props;
    Py_ssize_t pn = 0;
    int have_cluster = 0;
    for (int i = 0; i < np; i++) {
        const char *v = ps[i].v; Py_ssize_t vn = ps[i].vn;
        if (ps[i].kn == 7 && memcmp(ps[i].k, "CLUSTER", 7) == 0) { v = l->cluster; vn = l->cluster_n; have_cluster = 1; }
        if (pn + ps[i].kn + vn + 2 > MAX_PROPS) return 0;
        memcpy(pp + pn, ps[i].k, ps[i].kn); pn += ps[i].kn; pp[pn++] = 1;
        memcpy(pp + pn, v, vn); pn += vn; pp[pn++] = 2;
    }
    if (!have_cluster) {
        if (pn + 7 + l->cluster_n + 2 > MAX_PROPS) return 0;
        memcpy(pp + pn, "CLUSTER\x01", 8); pn += 8;
        memcpy(pp + pn, l->cluster, l->cluster_n); pn += l->cluster_n; pp[pn++] = 2;
    }
    /* the record */
    const char *body = (const char *)b + 8 + hlen;
    Py_ssize_t blen = total - 4 - hlen;
    if (blen > l->max_body) return 0;
    Py_ssize_t tlen = PyBytes_GET_SIZE(prefix);
    long long size = HEADER_V4_SIZE + blen + tlen + 2 + pn;
    if (size + 8 > l->segment_size) return 0;
    if (l->wrote + size + 8 > limit) return 2;
    PyObject *qkey = PyTuple_GET_ITEM(qkeys, qid);
    PyObject *cur = PyDict_GetItemWithError(l->next_qoff, qkey);
    long long qoff = 0;
    if (cur != NULL) { qoff = PyLong_AsLongLong(cur); if (qoff == -1 && PyErr_Occurred()) return -1; }
    else if (PyErr_Occurred()) return -1;
    uint32_t crc;
    if (crc_of(body, blen, &crc)) return -1;
    long long ts = now_ms();
    long long phys = base + l->wrote;
    unsigned char *r = mm + l->wrote;
    put_be32((char *)r + 8, crc & 0x7FFFFFFF);
    put_be32((char *)r + 12, (uint32_t)qid);
    put_be32((char *)r + 16, (uint32_t)flag);
    be64w(r + 20, (uint64_t)qoff);
    be64w(r + 28, (uint64_t)phys);
    put_be32((char *)r + 36, (uint32_t)(sys_flag & ~0x30));
    be64w(r + 40, (uint64_t)born_ts);
    memcpy(r + 48, born_ip, 4);
    put_be32((char *)r + 52, (uint32_t)born_port);
    be64w(r + 56, (uint64_t)ts);
    memcpy(r + 64, l->store_ip, 4);
    put_be32((char *)r + 68, (uint32_t)l->store_port);
    put_be32((char *)r + 72, (uint32_t)reconsume);
    be64w(r + 76, 0);
    put_be32((char *)r + 84, (uint32_t)blen);
    memcpy(r + HEADER_V4_SIZE, body, blen);
    unsigned char *t = r + HEADER_V4_SIZE + blen;
    memcpy(t, PyBytes_AS_STRING(prefix), tlen);
    be16w(t + tlen, (int)pn);
    memcpy(t + tlen + 2, pp, pn);
    put_be32((char *)r + 4, (uint32_t)magic);  /* size + magic last: a torn write leaves a zero header */
    put_be32((char *)r, (uint32_t)size);
    l->wrote += size;
    l->msgs++;
    l->bytes += size;
    l->last_ts = ts;
    {
        PyObject *nq = PyLong_FromLongLong(qoff + 1);
        if (nq == NULL || PyDict_SetItem(l->next_qoff, qkey, nq) < 0) { Py_XDECREF(nq); return -1; }
        Py_DECREF(nq);
    }
    int32_t tags_code = tags != NULL ? java_hash((const unsigned char *)tags->v, tags->vn) : 0;
    /* dispatch: consume queue, key index, listeners; a failure stops dispatch (recovery redoes it) */
    if (l->error == NULL) {
        PyObject *qo = PyLong_FromLongLong(qoff), *po = PyLong_FromLongLong(phys), *so = PyLong_FromLongLong(size),
                 *to = PyLong_FromLong(tags_code), *tso = PyLong_FromLongLong(ts);
        PyObject *res = NULL;
        if (qo && po && so && to && tso) {
            res = call4(PyTuple_GET_ITEM(cq_puts, qid), qo, po, so, to);
            if (res != NULL && l->index_put != Py_None) {
                Py_DECREF(res);
                PyObject *kl = index_keys(keys, uniq);
                res = kl ? call4(l->index_put, l->last_topic_obj, kl, po, tso) : NULL;
                Py_XDECREF(kl);
            }
            if (res == NULL) {
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                PyErr_NormalizeException(&et, &ev, &tb);
                Py_XDECREF(et); Py_XDECREF(tb);
                l->error = ev ? ev : Py_NewRef(Py_None);
            } else {
                Py_DECREF(res);
                l->dispatched_end = phys + size;
                if (PyList_GET_SIZE(l->listeners) > 0) {  /* listeners run after the run, once per queue */
                    PyObject *note = PyTuple_Pack(2, qo, to);
                    if (note == NULL || PyDict_SetItem(notes, qkey, note) < 0) { Py_XDECREF(note); }
                    else Py_DECREF(note);
                }
            }
        }
        Py_XDECREF(qo); Py_XDECREF(po); Py_XDECREF(so); Py_XDECREF(to); Py_XDECREF(tso);
        if (PyErr_Occurred()) return -1;
    }
    /* the response */
    Out o;
    out_init(&o);
    char hex[17];
    static const char HX[] = "0123456789ABCDEF";
    for (int i = 15; i >= 0; i--) { hex[i] = HX[phys >> ((15 - i) * 4) & 15]; }
    hex[16] = 0;
    int rc = OUT_LIT(&o, "{\"code\":0,\"extFields\":{\"msgId\":\"");
    rc |= out_raw(&o, l->id_prefix, 16);
    rc |= out_raw(&o, hex, 16);
    rc |= OUT_LIT(&o, "\",\"queueId\":\"");
    rc |= out_ll(&o, qid);
    rc |= OUT_LIT(&o, "\",\"queueOffset\":\"");
    rc |= out_ll(&o, qoff);
    rc |= OUT_LIT(&o, "\",\"transactionId\":");
    rc |= out_jstr(&o, uniq->v, uniq->vn);
    rc |= OUT_LIT(&o, ",\"MSG_REGION\":");
    rc |= out_raw(&o, l->region, l->region_n);
    rc |= l->trace_on ? OUT_LIT(&o, ",\"TRACE_ON\":\"true\"}") : OUT_LIT(&o, ",\"TRACE_ON\":\"false\"}");
    rc |= OUT_LIT(&o, ",\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    rc |= out_ll(&o, h.opaque_kind ? h.opaque : 0);
    rc |= OUT_LIT(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479}");
    PyObject *fb = rc ? NULL : frame_bytes(&o, 0);
    out_free(&o);
    if (fb == NULL) return -1;
    rc = PyList_Append(out, fb);
    Py_DECREF(fb);
    return rc < 0 ? -1 : 1;
}

/* run(buf, pos, mm, base, wrote, limit, born_ip, born_port, out, max_frame, notes) -> (pos, stop)
 * Handles consecutive common-case sends from buf[pos:], appending their records at mm[wrote:] (segment
 * starting at `base`, records must end by `limit`) and their response frames to `out`. Stops at the first
 * frame it does not handle (stop=1), at a full segment (2), after a dispatch failure (3, see take_error) or at
 * the end of the complete frames (0). Results: .wrote .msgs .bytes .last_ts .dispatched_end; `notes` gets
 * {(topic, qid): (last queue offset, its tags code)} for the dispatch listeners, which the caller runs once the
 * store's positions are settled (a listener may read the new message at once). */
static PyObject *Lane_run(Lane *l, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11 || !PyDict_Check(args[10])) {
        PyErr_SetString(PyExc_TypeError, "run takes 11 arguments, the last a dict");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), max_frame = PyLong_AsSsize_t(args[9]);
    long long base = PyLong_AsLongLong(args[3]), wrote = PyLong_AsLongLong(args[4]), limit = PyLong_AsLongLong(args[5]);
    long long born_port = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(args[6]) || PyBytes_GET_SIZE(args[6]) != 4 || !PyList_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "born_ip must be 4 bytes and out a list");
        return NULL;
    }
    Py_buffer in, mm;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &mm, PyBUF_WRITABLE) < 0) { PyBuffer_Release(&in); return NULL; }
    if (limit > mm.len) limit = mm.len;
    l->wrote = wrote; l->msgs = 0; l->bytes = 0; l->last_ts = 0; l->dispatched_end = -1; l->pos = pos;
    const unsigned char *b = in.buf;
    int stop = STOP_END;
    PyObject *res = NULL;
    while (pos >= 0 && in.len - pos >= 8) {
        int32_t total = be32(b + pos);
        if (total < 4 || total > max_frame) { stop = STOP_FRAME; break; }
        if (in.len - pos - 4 < total) break;
        int r = lane_one(l, b + pos, total, mm.buf, base, limit, (const unsigned char *)PyBytes_AS_STRING(args[6]),
                         born_port, args[8], args[10]);
        if (r < 0) goto done;
        if (r == 0) { stop = STOP_FRAME; break; }
        if (r == 2) { stop = STOP_ROLL; break; }
        pos += 4 + total;
        l->pos = pos;
        if (l->error != NULL) { stop = STOP_ERROR; break; }
    }
    res = Py_BuildValue("(ni)", pos, stop);
done:
    PyBuffer_Release(&mm);
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

static PyObject *Lane_get(Lane *l, void *which) {
    switch ((intptr_t)which) {
        case 0: return PyLong_FromLongLong(l->wrote);
        case 1: return PyLong_FromLongLong(l->msgs);
        case 2: return PyLong_FromLongLong(l->bytes);
        case 3: return PyLong_FromLongLong(l->last_ts);
        case 4: return PyLong_FromLongLong(l->dispatched_end);
        case 6: return PyLong_FromSsize_t(l->pos);
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
    {"sync", (getter)Lane_get_sync, (setter)Lane_set_sync, "SYNC_FLUSH: WAIT=false sends go to Python", NULL},
    {NULL},
};

static PyMethodDef Lane_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Lane_run, METH_FASTCALL, "process common-case sends"},
    {"add_topic", (PyCFunction)Lane_add_topic, METH_VARARGS, "add_topic(topic, entry)"},
    {"clear_topics", (PyCFunction)Lane_clear_topics, METH_NOARGS, "forget every topic"},
    {"take_error", (PyCFunction)Lane_take_error, METH_NOARGS, "the dispatch exception of the last run, or None"},
    {NULL},
};

static PyTypeObject LaneType = {
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

/* ------------------------------------------------------------------ module */

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *cmd_type, *languages, *crc32;
    if (!PyArg_ParseTuple(args, "OO!O", &cmd_type, &PyTuple_Type, &languages, &crc32)) return NULL;
    if (PyTuple_GET_SIZE(languages) < 8) { PyErr_SetString(PyExc_ValueError, "need at least 8 languages"); return NULL; }
    Py_XSETREF(g_cmd_type, Py_NewRef(cmd_type));
    Py_XSETREF(g_languages, Py_NewRef(languages));
    Py_XSETREF(g_crc32, Py_NewRef(crc32));
    Py_RETURN_NONE;
}

static PyObject *java_hash_py(PyObject *self, PyObject *arg) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(arg, &n);
    if (u == NULL) return NULL;
    return PyLong_FromLong(java_hash((const unsigned char *)u, n));
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(RemotingCommand, LANGUAGES, zlib.crc32)"},
    {"decode_frame", (PyCFunction)(void (*)(void))decode_frame, METH_FASTCALL, "decode_frame(buf, pos)"},
    {"encode_head", (PyCFunction)(void (*)(void))encode_head, METH_FASTCALL, "encode_head(...)"},
    {"java_hash", java_hash_py, METH_O, "Java String.hashCode"},
    {NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "brokerd._native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyType_Ready(&LaneType) < 0) return NULL;
    Py_INCREF(&LaneType);
    PyModule_AddObject(m, "SendLane", (PyObject *)&LaneType);
    g_java = PyUnicode_InternFromString("JAVA");
    g_true_s = PyUnicode_InternFromString("true");
    g_false_s = PyUnicode_InternFromString("false");
    return m;
}
