/* Pieces of a send request the lane needs: header fields, the properties string, tags codes, index keys. */
#include "send.h"

#include <time.h>

const Ext *find_ext(const Hdr *h, const char *key, Py_ssize_t klen) {
    for (int i = h->n_ext - 1; i >= 0; i--) {  /* the last occurrence wins, as in a dict */
        const Ext *e = &h->ext[i];
        if (!e->k.esc && e->k.n == klen && memcmp(e->k.p, key, klen) == 0) return e;
    }
    return NULL;
}

int field_int(const Hdr *h, char letter, long long dflt, long long *out) {
    const Ext *e = send_field(h, letter);
    if (e == NULL || e->kind == V_NULL || (e->kind == V_STR && e->s.n == 0)) { *out = dflt; return 0; }
    if (e->kind == V_INT) { *out = e->i; return 0; }
    if (e->kind != V_STR || e->s.esc) return 1;
    Cur c = {e->s.p, e->s.p + e->s.n};
    if (c.p < c.end && *c.p == '+') return 1;
    if (parse_int(&c, out) || c.p != c.end) return 1;
    return 0;
}

int32_t java_hash(const unsigned char *s, Py_ssize_t n) {
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < n) {  /* valid UTF-8 (checked by the caller), hashed over UTF-16 code units */
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

/* A property into out (a later duplicate name replaces the value in place): 0, -1 when there are too many. */
static inline int add_prop(Prop *out, int *cnt, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    int j;
    for (j = 0; j < *cnt; j++)
        if (out[j].kn == kn && memcmp(out[j].k, k, kn) == 0) break;
    if (j == *cnt) {
        if (*cnt >= MAX_PROPS_N) return -1;
        out[j].k = k; out[j].kn = kn; (*cnt)++;
    }
    out[j].v = v; out[j].vn = vn;
    return 0;
}

int parse_props(const char *s, Py_ssize_t n, Prop *out) {
    int cnt = 0;
    const char *p = s, *end = s + n;
    while (p <= end) {
        const char *seg_end = memchr(p, '\x02', end - p);
        if (seg_end == NULL) seg_end = end;
        const char *sep = memchr(p, '\x01', seg_end - p);
        if (sep != NULL && sep > p && seg_end > sep + 1 && add_prop(out, &cnt, p, sep - p, sep + 1, seg_end - sep - 1))
            return -1;
        if (seg_end == end) break;
        p = seg_end + 1;
    }
    return cnt;
}

/* The first backslash in [p, end), or NULL; 8 bytes at a time (no memchr call: the runs between escapes are short). */
static inline const char *next_backslash(const char *p, const char *end) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; end - p >= 8; p += 8) {
        uint64_t w, b;
        memcpy(&w, p, 8);
        if ((b = backslashes8(w)) != 0) return p + (__builtin_ctzll(b) >> 3);
    }
#endif
    for (; p < end; p++)
        if (*p == '\\') return p;
    return NULL;
}

int parse_props_json(const char *s, Py_ssize_t n, Prop *out) {
    int cnt = 0;
    const char *p = s, *end = s + n, *seg = s, *sep = NULL;
    for (;;) {
        const char *bs = next_backslash(p, end);
        const char *seg_end = bs == NULL ? end : bs;
        if (bs != NULL) {  /* only \u0001 / \u0002, and one \u0001 per segment (a value holding one: unescape) */
            if (end - bs < 6 || memcmp(bs, "\\u000", 5) != 0 || (bs[5] != '1' && bs[5] != '2') ||
                (bs[5] == '1' && sep != NULL))
                return -2;
            p = bs + 6;
            if (bs[5] == '1') { sep = bs; continue; }
        }
        if (sep != NULL && sep > seg && seg_end > sep + 6 &&
            add_prop(out, &cnt, seg, sep - seg, sep + 6, seg_end - sep - 6))
            return -1;
        if (bs == NULL) return cnt;
        seg = p;
        sep = NULL;
    }
}

const Prop *prop(const Prop *ps, int n, const char *k, Py_ssize_t kn) {
    for (int i = 0; i < n; i++)
        if (ps[i].kn == kn && memcmp(ps[i].k, k, kn) == 0) return &ps[i];
    return NULL;
}

static int append_str(PyObject *lst, const char *p, Py_ssize_t n) {
    PyObject *k = PyUnicode_DecodeUTF8(p, n, NULL);
    int rc = k == NULL ? -1 : PyList_Append(lst, k);
    Py_XDECREF(k);
    return rc;
}

int each_index_key(const Prop *keys, const Prop *uniq, KeyFn fn, void *ctx) {
    int uniq_seen = 0, r;
    if (keys != NULL) {
        const char *p = keys->v, *end = keys->v + keys->vn;
        while (p < end) {
            const char *sp = memchr(p, ' ', end - p);
            if (sp == NULL) sp = end;
            if (sp > p) {
                if (uniq != NULL && uniq->vn == sp - p && memcmp(uniq->v, p, sp - p) == 0) uniq_seen = 1;
                if ((r = fn(ctx, p, sp - p)) != 0) return r;
            }
            p = sp + 1;
        }
    }
    return uniq != NULL && !uniq_seen ? fn(ctx, uniq->v, uniq->vn) : 0;
}

static int append_key(void *lst, const char *p, Py_ssize_t n) { return append_str(lst, p, n) < 0 ? -1 : 0; }

PyObject *index_keys(const Prop *keys, const Prop *uniq) {
    PyObject *lst = PyList_New(0);
    if (lst != NULL && each_index_key(keys, uniq, append_key, lst)) Py_CLEAR(lst);
    return lst;
}

long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int parse_binary_header(const char *p, Py_ssize_t n, Hdr *h) {
    const unsigned char *u = (const unsigned char *)p;
    if (n < 21) return 1;
    h->code_kind = h->opaque_kind = h->flag_kind = h->version_kind = V_INT;
    h->code = (int16_t)(u[0] << 8 | u[1]);
    h->lang_kind = V_INT; h->lang_i = u[2];
    h->version = (int16_t)(u[3] << 8 | u[4]);
    h->opaque = be32(u + 5);
    h->flag = be32(u + 9);
    int32_t rlen = be32(u + 13);
    Py_ssize_t pos = 17;
    if (rlen < 0 || pos + rlen + 4 > n) return 1;
    h->remark_kind = rlen ? V_STR : V_NULL;
    h->remark = (Str){p + pos, rlen, 0};
    pos += rlen;
    int32_t elen = be32(u + pos);
    pos += 4;
    if (elen < 0 || pos + elen > n) return 1;
    Py_ssize_t end = pos + elen;
    h->ext_kind = 1;
    h->n_ext = 0;
    while (pos < end) {
        if (pos + 2 > end) return 1;
        int klen = (int16_t)(u[pos] << 8 | u[pos + 1]);
        pos += 2;
        if (klen < 0 || pos + klen + 4 > end) return 1;
        Py_ssize_t kpos = pos;
        pos += klen;
        int32_t vlen = be32(u + pos);
        pos += 4;
        if (vlen < 0 || pos + vlen > end) return 1;
        if (klen && vlen) {  /* the Python codec drops empty keys and values */
            if (h->n_ext == MAX_EXT || !utf8_valid(u + kpos, klen) || !utf8_valid(u + pos, vlen)) return 1;
            Ext *e = &h->ext[h->n_ext++];
            e->k = (Str){p + kpos, klen, 0};
            e->kind = V_STR;
            e->s = (Str){p + pos, vlen, 0};
            e->i = 0;
        }
        pos += vlen;
    }
    index_letters(h);
    return 0;
}
