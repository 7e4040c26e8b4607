/* JSON for remoting headers: a strict parser for the header objects clients send (strings, integers, booleans,
 * null; extFields one level deep; anything else is left to the Python codec) and a small writer. */
#include "native.h"


static inline void ws(Cur *c) {  /* compact JSON (what clients send) has none: one compare */
    while (c->p < c->end && (unsigned char)*c->p <= ' ' &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int read_u16(const char *p, const char *end, unsigned *out);

/* A JSON string at c->p (which is at the opening quote); escapes are checked as strictly as orjson does
 * (known escapes, four hex digits, surrogates only in pairs). 0 ok, 1 unsupported/invalid. */
/* The bytes of w that are a quote, a backslash or a control character (< 0x20), as the high bit of each (SWAR:
 * a zero byte of x sets the high bit of that byte of (x - 0x01..) & ~x; a borrow can also flag bytes above a
 * true hit, never below it, so the lowest flagged byte is the first special one). */
static inline uint64_t special8(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w)) & 0x8080808080808080ULL;
}

static inline int parse_str(Cur *c, Str *out) {
    if (c->p >= c->end || *c->p != '"') return 1;
    const char *s = ++c->p;
    int esc = 0;
    while (c->p < c->end) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (c->end - c->p >= 8) {  /* plain bytes 8 at a time, then straight to the first special one */
            uint64_t w, hit;
            memcpy(&w, c->p, 8);
            hit = special8(w);
            if (!hit) { c->p += 8; continue; }
            c->p += __builtin_ctzll(hit) >> 3;
        }
#endif
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
            } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') {
                return 1;
            }
            continue;
        }
        if (ch < 0x20) return 1;
        c->p++;
    }
    return 1;
}

int parse_int(Cur *c, long long *out) {
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

/* A scalar value: string, integer, true, false, null. Sets *kind; *s: a string's content, an integer's digits (sign
 * included). 0 ok, 1 unsupported. */
static int parse_scalar(Cur *c, int *kind, Str *s, long long *i) {
    if (c->p >= c->end) return 1;
    char ch = *c->p;
    if (ch == '"') { *kind = V_STR; return parse_str(c, s); }
    s->p = c->p; s->n = 0; s->esc = 0;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        *kind = V_INT;
        if (parse_int(c, i)) return 1;
        s->n = c->p - s->p;
        return 0;
    }
    if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) { *kind = V_TRUE; c->p += 4; return 0; }
    if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) { *kind = V_FALSE; c->p += 5; return 0; }
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) { *kind = V_NULL; c->p += 4; return 0; }
    return 1;
}

static inline int key_is(const Str *k, const char *lit, Py_ssize_t n) {
    return !k->esc && k->n == n && memcmp(k->p, lit, n) == 0;
}

/* A string or integer value's span recorded for the header cache (hcache.c), when toks is set. */
static inline void record(Toks *toks, const char *base, const Str *s, int kind, int target) {
    if (toks == NULL || (kind != V_STR && kind != V_INT)) return;
    if (toks->n == HC_TOKS) { toks->over = 1; return; }
    toks->t[toks->n++] = (Tok){(uint16_t)(s->p - base), (uint16_t)(s->p - base + s->n), (signed char)kind,
                               (short)target};
}

static int parse_ext(Cur *c, Hdr *h, const char *base, Toks *toks) {
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
        record(toks, base, &e->s, e->kind, h->n_ext);
        h->n_ext++;
        ws(c);
        if (c->p < c->end && *c->p == ',') { c->p++; continue; }
        if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
        return 1;
    }
}


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

int parse_header(const char *p, Py_ssize_t n, Hdr *h) { return parse_header_toks(p, n, h, NULL); }

int parse_header_toks(const char *p, Py_ssize_t n, Hdr *h, Toks *toks) {
    Cur c = {p, p + n};
    int seen = 0;  /* the top-level fields recorded (a repeated one: the last wins, not cached) */
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
            if (parse_ext(&c, h, p, toks)) return 1;
            h->ext_kind = 1;
        } else {
            int kind; Str s; long long i;
            if (parse_scalar(&c, &kind, &s, &i)) return 1;
            int target = T_NONE;
            if (key_is(&k, "code", 4)) { h->code_kind = kind; h->code = i; target = T_CODE; }
            else if (key_is(&k, "opaque", 6)) { h->opaque_kind = kind; h->opaque = i; target = T_OPAQUE; }
            else if (key_is(&k, "flag", 4)) { h->flag_kind = kind; h->flag = i; target = T_FLAG; }
            else if (key_is(&k, "version", 7)) { h->version_kind = kind; h->version = i; target = T_VERSION; }
            else if (key_is(&k, "language", 8)) { h->lang_kind = kind; h->lang = s; h->lang_i = i; target = T_LANG; }
            else if (key_is(&k, "remark", 6)) { h->remark_kind = kind; h->remark = s; target = T_REMARK; }
            else if (key_is(&k, "extFields", 9)) {
                if (kind != V_NULL || h->ext_kind == 1) return 1;
                h->ext_kind = V_NULL;
            }
            else if (k.esc) return 1;  /* an escaped key might spell one of ours */
            if (toks != NULL && target != T_NONE) {
                if (seen & 1 << -target) toks->over = 1;
                seen |= 1 << -target;
                if (target != T_CODE) record(toks, p, &s, kind, target);  /* a new code is a new layout */
            }
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
    index_letters(h);
    return 0;
}

static const unsigned char HEXV[256] = {  /* a hex digit's value + 1; 0: not one */
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8, ['8'] = 9, ['9'] = 10,
    ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16};

static int read_u16(const char *p, const char *end, unsigned *out) {
    if (end - p < 4) return 1;
    const unsigned char *u = (const unsigned char *)p;
    unsigned a = HEXV[u[0]], b = HEXV[u[1]], c = HEXV[u[2]], d = HEXV[u[3]];
    if (!a || !b || !c || !d) return 1;
    *out = (a - 1) << 12 | (b - 1) << 8 | (c - 1) << 4 | (d - 1);
    return 0;
}

/* Strict UTF-8 check (what Python's strict decoder accepts). */
int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint64_t w;
        if (n - i >= 8 && (memcpy(&w, s + i, 8), !(w & 0x8080808080808080ULL))) {  /* 8 ASCII bytes at once */
            i += 8;
            continue;
        }
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

Py_ssize_t unescape(const Str *s, char *out) {
    if (!s->esc) {  /* the header's bytes were checked (UTF-8) by the parse that made s */
        memcpy(out, s->p, s->n);
        return s->n;
    }
    const char *p = s->p, *end = s->p + s->n;
    char *o = out;
    while (p < end) {
        /* plain bytes up to the next backslash, 8 at a time (runs between escapes are short: no memchr call) */
        while (end - p >= 8) {
            uint64_t w, b;
            memcpy(&w, p, 8);
            memcpy(o, p, 8);
            if ((b = backslashes8(w)) != 0) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                Py_ssize_t k = __builtin_ctzll(b) >> 3;  /* the lowest flagged byte is the first backslash */
#else
                Py_ssize_t k = 0;
                while (p[k] != '\\') k++;
#endif
                p += k; o += k;
                goto escape;
            }
            p += 8; o += 8;
        }
        while (p < end && *p != '\\') *o++ = *p++;
        if (p == end) break;
    escape:
        if (p + 1 >= end) return -1;
        char e = p[1];
        p += 2;
        if (e == 'u' && end - p >= 4 && p[0] == '0' && p[1] == '0' && p[2] >= '0' && p[2] <= '7') {
            unsigned lo = HEXV[(unsigned char)p[3]];  /* \u00XX below 0x80 (the properties' separators): one byte */
            if (lo) { *o++ = (char)((p[2] - '0') << 4 | (lo - 1)); p += 4; continue; }
        }
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
    }
    return o - out;
}

/* ------------------------------------------------------------------ writing */

void out_init(Out *o) { o->p = o->stack; o->n = 0; o->cap = sizeof(o->stack); }
void out_free(Out *o) { if (o->p != o->stack) PyMem_Free(o->p); }

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

int out_raw(Out *o, const char *s, Py_ssize_t n) {
    if (out_reserve(o, n)) return -1;
    memcpy(o->p + o->n, s, n);
    o->n += n;
    return 0;
}

int fmt_ll(char *dst, long long v) {  /* decimal, as %lld (snprintf cost ~1 % of the send path) */
    char tmp[24];
    int k = sizeof tmp;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do tmp[--k] = (char)('0' + u % 10); while ((u /= 10) != 0);
    if (v < 0) tmp[--k] = '-';
    memcpy(dst, tmp + k, sizeof tmp - k);
    return (int)sizeof tmp - k;
}

int out_ll(Out *o, long long v) {
    char tmp[24];
    return out_raw(o, tmp, fmt_ll(tmp, v));
}

/* JSON string of UTF-8 bytes (quotes included). */
int out_jstr(Out *o, const char *s, Py_ssize_t n) {
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
int out_pystr(Out *o, PyObject *obj) {
    if (!PyUnicode_CheckExact(obj)) return 1;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(obj, &n);
    if (u == NULL) { PyErr_Clear(); return 1; }
    return out_jstr(o, u, n);
}

/* prefix (total length, header length) + JSON header, as the Python codec writes it */
PyObject *frame_bytes(Out *o, Py_ssize_t body_len) {
    PyObject *r = PyBytes_FromStringAndSize(NULL, o->n + 8);
    if (r == NULL) return NULL;
    char *d = PyBytes_AS_STRING(r);
    put_be32(d, (uint32_t)(4 + o->n + body_len));
    put_be32(d + 4, (uint32_t)o->n);
    memcpy(d + 8, o->p, o->n);
    return r;
}

