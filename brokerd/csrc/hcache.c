/* The header cache: a JSON header parsed by its differences from a header of the same length parsed before.
 *
 * A client's send headers keep their layout from one send to the next; what changes is inside values (the
 * opaque, timestamps, the UNIQ_KEY, the queue id). A header of the same length as a cached one is compared with
 * it 64 bytes at a time; every byte that differs must lie inside a recorded string or integer value (not the
 * code). A string's byte must be plain ASCII (not a quote, a backslash or a control character) in both headers
 * and not be part of an escape (a backslash or the 5 bytes after one), so the string keeps its length, escapes
 * and UTF-8 validity; an integer that differs is read again, and must fill the same span. The cached copy then
 * takes the new bytes and integers, and its parse is the new header's: what parse_header gives (the differential
 * test: tests/unit/remoting/test_header_cache.py). Anything else is parsed in full, and cached in place of the
 * oldest of HC_WAYS. */
#include "native.h"

#include <stddef.h>

static inline int plain(unsigned char ch) { return ch >= 0x20 && ch < 0x80 && ch != '"' && ch != '\\'; }

/* Byte x differs between the cached header (w->buf) and p: the recorded value it lies in (*t, the index of the
 * first value that does not end before x) marked in *dirty; 1 when x is not inside one, or a string's byte there
 * may not change (not plain ASCII in both, or part of an escape). */
static inline int mark(const HcWay *w, const char *p, Py_ssize_t x, int *t, uint64_t *dirty) {
    const Tok *tk = w->toks.t;
    while (*t < w->toks.n && tk[*t].end <= x) (*t)++;
    if (*t == w->toks.n || x < tk[*t].start) return 1;
    if (tk[*t].kind == V_STR && (w->esc[x] || (unsigned char)w->buf[x] >= 0x80 || !plain((unsigned char)p[x])))
        return 1;
    *dirty |= 1ULL << *t;
    return 0;
}

/* The bytes of [i, i + len) (len <= 8) that differ between the cached header and p, marked (1: one may not). */
static inline int mark_word(const HcWay *w, const char *p, Py_ssize_t i, Py_ssize_t len, int *t, uint64_t *dirty) {
    const uint64_t lo7 = 0x7F7F7F7F7F7F7F7FULL;
    uint64_t a = 0, b = 0;
    memcpy(&a, w->buf + i, (size_t)len);
    memcpy(&b, p + i, (size_t)len);
    uint64_t d = a ^ b;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (uint64_t m = (((d & lo7) + lo7) | d) & ~lo7; m; m &= m - 1)  /* the high bit of each byte that differs */
        if (mark(w, p, i + (__builtin_ctzll(m) >> 3), t, dirty)) return 1;
#else
    for (Py_ssize_t x = i; d && x < i + len; x++)
        if (w->buf[x] != p[x] && mark(w, p, x, t, dirty)) return 1;
#endif
    return 0;
}

/* The values of cached header w that differ in p, a bit per recorded value in *dirty: 0, or 1 when a byte
 * differs elsewhere (or so that the value may not stay valid). 64 bytes are compared at a time: most are equal. */
static int differing(const HcWay *w, const char *p, uint64_t *dirty) {
    int t = 0;
    Py_ssize_t i = 0;
    *dirty = 0;
    for (; i + 64 <= w->n; i += 64) {
        uint64_t a[8], b[8], d = 0;
        memcpy(a, w->buf + i, 64);
        memcpy(b, p + i, 64);
        for (int k = 0; k < 8; k++) d |= a[k] ^ b[k];
        if (d == 0) continue;
        for (int k = 0; k < 8; k++)
            if (a[k] != b[k] && mark_word(w, p, i + 8 * k, 8, &t, dirty)) return 1;
    }
    for (; i < w->n; i += 8)
        if (mark_word(w, p, i, w->n - i < 8 ? w->n - i : 8, &t, dirty)) return 1;
    return 0;
}

static inline void move_str(Str *s, const char *from, const char *to) { s->p = to + (s->p - from); }

/* dst = src with its value pointers moved from header `from` to header `to` (same layout). */
static void copy_hdr(Hdr *dst, const Hdr *src, const char *from, const char *to) {
    memcpy(dst, src, offsetof(Hdr, ext));
    memcpy(dst->ext, src->ext, sizeof(Ext) * (size_t)src->n_ext);
    memcpy(dst->letter, src->letter, sizeof dst->letter);
    if (dst->lang_kind == V_STR) move_str(&dst->lang, from, to);
    if (dst->remark_kind == V_STR) move_str(&dst->remark, from, to);
    for (int i = 0; i < dst->n_ext; i++) {
        move_str(&dst->ext[i].k, from, to);
        move_str(&dst->ext[i].s, from, to);
    }
}

static long long *int_target(Hdr *h, int target) {
    switch (target) {
        case T_OPAQUE: return &h->opaque;
        case T_FLAG: return &h->flag;
        case T_VERSION: return &h->version;
        case T_LANG: return &h->lang_i;
        default: return target >= 0 ? &h->ext[target].i : NULL;
    }
}

/* Way w (a header of p's length) made p's, by the differences: its bytes and its parse (Str pointers into w->buf)
 * now p's. 0, or 1: p differs otherwise (w is unchanged). */
static int by_difference(HcWay *w, const char *p) {
    uint64_t dirty;
    long long v[HC_TOKS];
    if (differing(w, p, &dirty)) return 1;
    for (uint64_t m = dirty; m; m &= m - 1) {  /* every integer that differs is still one, in the same span */
        int t = __builtin_ctzll(m);
        const Tok *tk = &w->toks.t[t];
        Cur c = {p + tk->start, p + tk->end};
        if (tk->kind == V_INT && (parse_int(&c, &v[t]) || c.p != c.end)) return 1;
    }
    for (uint64_t m = dirty; m; m &= m - 1) {
        int t = __builtin_ctzll(m);
        const Tok *tk = &w->toks.t[t];
        if (tk->kind == V_INT) *int_target(&w->h, tk->target) = v[t];
        memcpy(w->buf + tk->start, p + tk->start, tk->end - tk->start);
    }
    return 0;
}

static void store(HCache *c, const char *p, Py_ssize_t n, const Hdr *h, const Toks *toks) {
    HcWay *w = &c->way[c->next];
    c->next = (c->next + 1) % HC_WAYS;
    memcpy(w->buf, p, n);
    memset(w->esc, 0, (size_t)n);
    for (const char *q = memchr(p, '\\', n); q != NULL; q = memchr(q + 1, '\\', p + n - q - 1))
        memset(w->esc + (q - p), 1, (size_t)(p + n - q < 6 ? p + n - q : 6));  /* an escape's bytes */
    copy_hdr(&w->h, h, p, w->buf);
    w->toks.n = toks->n;
    memcpy(w->toks.t, toks->t, sizeof(Tok) * (size_t)toks->n);
    w->n = n;
}

const Hdr *parse_header_cached(HCache *c, const char *p, Py_ssize_t n, Hdr *own) {
    for (int i = 0; i < HC_WAYS; i++) {
        HcWay *w = &c->way[i];
        if (w->n == n && by_difference(w, p) == 0) {
            c->hits++;
            c->streak = 0;
            return &w->h;
        }
    }
    c->misses++;
    c->streak++;
    Toks toks;
    toks.n = toks.over = 0;
    if (parse_header_toks(p, n, own, &toks)) return NULL;
    /* headers that keep missing (their lengths vary) are cached one in 16: storing costs a quarter of a parse */
    if (n <= HC_MAX && !toks.over && (c->streak <= 8 || (c->streak & 15) == 0)) store(c, p, n, own, &toks);
    return own;
}

/* ------------------------------------------------------------------ the differential test's entry point */

/* Equal strings: the same place in their header, length and escapes (a's header: abase, b's: bbase). */
static const char *abase, *bbase;
static int str_eq(const Str *a, const Str *b) {
    return a->p - abase == b->p - bbase && a->n == b->n && a->esc == b->esc;
}

/* The first field where two parses of the same header differ, or NULL. */
static const char *hdr_diff(const Hdr *a, const Hdr *b) {
    if (a->code_kind != b->code_kind || a->code != b->code) return "code";
    if (a->opaque_kind != b->opaque_kind || (a->opaque_kind == V_INT && a->opaque != b->opaque)) return "opaque";
    if (a->flag_kind != b->flag_kind || (a->flag_kind == V_INT && a->flag != b->flag)) return "flag";
    if (a->version_kind != b->version_kind || (a->version_kind == V_INT && a->version != b->version)) return "version";
    if (a->lang_kind != b->lang_kind || (a->lang_kind == V_INT && a->lang_i != b->lang_i) ||
        (a->lang_kind == V_STR && !str_eq(&a->lang, &b->lang))) return "language";
    if (a->remark_kind != b->remark_kind || (a->remark_kind == V_STR && !str_eq(&a->remark, &b->remark)))
        return "remark";
    if (a->ext_kind != b->ext_kind || a->n_ext != b->n_ext) return "extFields";
    for (int i = 0; i < a->n_ext; i++) {
        const Ext *x = &a->ext[i], *y = &b->ext[i];
        if (!str_eq(&x->k, &y->k) || x->kind != y->kind) return "ext key or kind";
        if ((x->kind == V_STR || x->kind == V_INT) && !str_eq(&x->s, &y->s)) return "ext value";
        if (x->kind == V_INT && x->i != y->i) return "ext integer";
    }
    if (memcmp(a->letter, b->letter, sizeof a->letter)) return "letters";
    return NULL;
}

/* header_cache_check(headers) -> (hits, [(index, what) for each header the cache parsed otherwise]): the headers
 * in turn through one cache and through parse_header. */
PyObject *header_cache_check(PyObject *self, PyObject *seq) {
    PyObject *fast = PySequence_Fast(seq, "a sequence of bytes");
    if (fast == NULL) return NULL;
    HCache *c = PyMem_Calloc(1, sizeof(HCache));
    Hdr *a = PyMem_Malloc(sizeof(Hdr)), *b = PyMem_Malloc(sizeof(Hdr));
    PyObject *bad = PyList_New(0), *r = NULL;
    if (c == NULL || a == NULL || b == NULL || bad == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item)) { PyErr_SetString(PyExc_TypeError, "headers must be bytes"); goto done; }
        const char *p = PyBytes_AS_STRING(item);
        Py_ssize_t n = PyBytes_GET_SIZE(item);
        const Hdr *ha = parse_header_cached(c, p, n, a);
        int rb = parse_header(p, n, b);
        const char *what = (ha == NULL) != (rb != 0) ? "result" : NULL;
        if (ha != NULL && what == NULL) {  /* a cache hit's strings point into the cache's copy of the header */
            abase = ha == a ? p : ((const HcWay *)((const char *)ha - offsetof(HcWay, h)))->buf;
            bbase = p;
            what = memcmp(abase, p, n) != 0 ? "cached copy" : hdr_diff(ha, b);
        }
        if (what != NULL) {
            PyObject *t = Py_BuildValue("(ns)", i, what);
            if (t == NULL || PyList_Append(bad, t) < 0) { Py_XDECREF(t); goto done; }
            Py_DECREF(t);
        }
    }
    r = Py_BuildValue("(LO)", c->hits, bad);
done:
    Py_XDECREF(bad);
    Py_DECREF(fast);
    PyMem_Free(c); PyMem_Free(a); PyMem_Free(b);
    return r;
}
