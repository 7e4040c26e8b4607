/* ACL 1.0 signature check of a lane send (brokerd/acl/sign.py is the reference): the values of the header's
 * fields sorted by key (Signature and _UNIQUE_KEY_QUERY left out), then the body, HMAC-SHA1 with the account's
 * secret (libcrypto's SHA-1 when the build found it, else the pads' hashlib objects), base64, compared with the
 * Signature field. The account's secret, HMAC pads and the topics it may PUB to come
 * from the lane's acl table (filled by brokerd/processors/send_lane.py after the Python check allowed a send);
 * anything this file cannot decide exactly as Python would goes to Python (return 0, counted by reason). */
#include "lane.h"

#ifdef BROKERD_OPENSSL
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
_Static_assert(2 * sizeof(SHA_CTX) <= sizeof(((Lane *)0)->acl_pads), "Lane.acl_pads too small for two SHA_CTX");

/* HMAC-SHA1 with libcrypto's SHA-1 (SHA-NI/AVX where the CPU has them): the pads of the last secret used are
 * kept as hash states (one account per connection is the common case), copied per message. */
static int hmac_openssl(Lane *l, PyObject *secret, PyObject *values, const char *body, Py_ssize_t blen,
                        unsigned char out[20]) {
    SHA_CTX *pads = (SHA_CTX *)l->acl_pads;
    if (l->acl_key != secret) {
        unsigned char key[64] = {0}, ipad[64], opad[64];
        const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(secret);
        Py_ssize_t kn = PyBytes_GET_SIZE(secret);
        if (kn > 64) SHA1(k, (size_t)kn, key); else memcpy(key, k, (size_t)kn);
        for (int i = 0; i < 64; i++) { ipad[i] = key[i] ^ 0x36; opad[i] = key[i] ^ 0x5C; }
        SHA1_Init(&pads[0]); SHA1_Update(&pads[0], ipad, 64);
        SHA1_Init(&pads[1]); SHA1_Update(&pads[1], opad, 64);
        Py_XSETREF(l->acl_key, Py_NewRef(secret));
    }
    SHA_CTX c = pads[0];
    unsigned char ih[20];
    SHA1_Update(&c, PyBytes_AS_STRING(values), (size_t)PyBytes_GET_SIZE(values));
    if (blen > 0) SHA1_Update(&c, body, (size_t)blen);
    SHA1_Final(ih, &c);
    c = pads[1];
    SHA1_Update(&c, ih, 20);
    SHA1_Final(out, &c);
    return 0;
}
#endif

static int key_less(const Ext *a, const Ext *b) {
    Py_ssize_t n = a->k.n < b->k.n ? a->k.n : b->k.n;
    int c = memcmp(a->k.p, b->k.p, n);
    return c < 0 || (c == 0 && a->k.n < b->k.n);
}

static int ascii_plain(const Str *k) {
    if (k->esc) return 0;
    for (Py_ssize_t i = 0; i < k->n; i++)
        if ((unsigned char)k->p[i] >= 0x80) return 0;
    return 1;
}

static int is_key(const Ext *e, const char *k, Py_ssize_t n) { return e->k.n == n && memcmp(e->k.p, k, n) == 0; }

/* The signed field values (sorted by key) into a new bytes object, the body not included; NULL with no
 * exception: Python decides. */
static PyObject *signed_values(const Send *s) {
    const Hdr *h = s->h;
    const Ext *order[MAX_EXT];
    int n = 0;
    Py_ssize_t cap = 0;
    for (int i = 0; i < h->n_ext; i++) {
        const Ext *e = &h->ext[i];
        if (!ascii_plain(&e->k) || e->kind == V_NULL || e->kind == V_MISSING) return NULL;
        if (is_key(e, "Signature", 9) || is_key(e, "_UNIQUE_KEY_QUERY", 17)) continue;
        int j = n++;
        while (j > 0 && key_less(e, order[j - 1])) { order[j] = order[j - 1]; j--; }
        order[j] = e;
        cap += e->kind == V_STR ? e->s.n : 24;
    }
    for (int i = 1; i < n; i++)  /* a repeated key: the codec keeps the last one; Python decides */
        if (order[i]->k.n == order[i - 1]->k.n && memcmp(order[i]->k.p, order[i - 1]->k.p, order[i]->k.n) == 0)
            return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out), *start = p;
    for (int i = 0; i < n; i++) {
        const Ext *e = order[i];
        if (e->kind == V_STR) {
            if (!e->s.esc) { memcpy(p, e->s.p, e->s.n); p += e->s.n; continue; }
            Py_ssize_t m = unescape(&e->s, p);
            if (m < 0) { Py_DECREF(out); return NULL; }
            p += m;
        } else if (e->kind == V_INT) {
            p += fmt_ll(p, e->i);
        } else {
            const char *t = e->kind == V_TRUE ? "true" : "false";
            memcpy(p, t, strlen(t)); p += strlen(t);
        }
    }
    if (_PyBytes_Resize(&out, p - start) < 0) return NULL;
    return out;
}

#ifndef BROKERD_OPENSSL
/* HMAC-SHA1 from the account's precomputed pads: sha1(K^opad || sha1(K^ipad || values || body)). New 20-byte
 * bytes, NULL on a Python exception. */
static PyObject *hmac_sha1(PyObject *inner0, PyObject *outer0, PyObject *values, const char *body, Py_ssize_t blen) {
    static PyObject *s_copy, *s_update, *s_digest;
    if (s_copy == NULL && ((s_copy = PyUnicode_InternFromString("copy")) == NULL ||
                           (s_update = PyUnicode_InternFromString("update")) == NULL ||
                           (s_digest = PyUnicode_InternFromString("digest")) == NULL))
        return NULL;
    PyObject *d = NULL, *r, *mv;
    PyObject *inner = PyObject_CallMethodNoArgs(inner0, s_copy);
    if (inner == NULL) return NULL;
    r = PyObject_CallMethodOneArg(inner, s_update, values);
    if (r == NULL) goto done;
    Py_DECREF(r);
    if (blen > 0) {
        mv = PyMemoryView_FromMemory((char *)body, blen, PyBUF_READ);
        if (mv == NULL) goto done;
        r = PyObject_CallMethodOneArg(inner, s_update, mv);
        Py_DECREF(mv);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    PyObject *ih = PyObject_CallMethodNoArgs(inner, s_digest);
    if (ih == NULL) goto done;
    PyObject *outer = PyObject_CallMethodNoArgs(outer0, s_copy);
    if (outer == NULL) { Py_DECREF(ih); goto done; }
    r = PyObject_CallMethodOneArg(outer, s_update, ih);
    Py_DECREF(ih);
    if (r != NULL) {
        Py_DECREF(r);
        d = PyObject_CallMethodNoArgs(outer, s_digest);
    }
    Py_DECREF(outer);
done:
    Py_DECREF(inner);
    return d;
}
#endif

static void base64_20(const unsigned char *in, char *out) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int o = 0;
    for (int i = 0; i < 18; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = T[v >> 18 & 63]; out[o++] = T[v >> 12 & 63]; out[o++] = T[v >> 6 & 63]; out[o++] = T[v & 63];
    }
    uint32_t v = (uint32_t)in[18] << 16 | (uint32_t)in[19] << 8;
    out[o++] = T[v >> 18 & 63]; out[o++] = T[v >> 12 & 63]; out[o++] = T[v >> 6 & 63]; out[o++] = '=';
}

int lane_acl_ok(Lane *l, const Send *s) {
    const Hdr *h = s->h;
    const Ext *ak = find_ext(h, "AccessKey", 9), *sg = find_ext(h, "Signature", 9);
    if (ak == NULL || ak->kind != V_STR || ak->s.esc || ak->s.n == 0) { l->acl_miss[ACL_NO_KEY]++; return 0; }
    if (sg == NULL || sg->kind != V_STR || sg->s.esc || sg->s.n != 28) { l->acl_miss[ACL_BAD_SIG]++; return 0; }
    PyObject *key = PyUnicode_DecodeUTF8(ak->s.p, ak->s.n, NULL);
    if (key == NULL) { PyErr_Clear(); l->acl_miss[ACL_NO_KEY]++; return 0; }
    PyObject *acct = PyDict_GetItemWithError(l->acl, key);  /* (secret, inner pad sha1, outer pad sha1, topics) */
    Py_DECREF(key);
    if (acct == NULL) {
        if (PyErr_Occurred()) return -1;
        l->acl_miss[ACL_NOT_ADMITTED]++;
        return 0;
    }
    if (!PyTuple_Check(acct) || PyTuple_GET_SIZE(acct) != 4) {
        PyErr_SetString(PyExc_TypeError, "acl entries must be (secret, inner, outer, topics)");
        return -1;
    }
    int has = PySet_Contains(PyTuple_GET_ITEM(acct, 3), l->last_topic_obj);
    if (has < 0) return -1;
    if (!has) { l->acl_miss[ACL_NOT_ADMITTED]++; return 0; }
    PyObject *values = signed_values(s);
    if (values == NULL) {
        if (PyErr_Occurred()) return -1;
        l->acl_miss[ACL_UNSUPPORTED]++;
        return 0;
    }
    char want[28];
#ifdef BROKERD_OPENSSL
    unsigned char mac[20];
    if (!PyBytes_Check(PyTuple_GET_ITEM(acct, 0))) {
        Py_DECREF(values);
        PyErr_SetString(PyExc_TypeError, "acl entries must start with the secret bytes");
        return -1;
    }
    hmac_openssl(l, PyTuple_GET_ITEM(acct, 0), values, s->body, s->blen, mac);
    Py_DECREF(values);
    base64_20(mac, want);
#else
    PyObject *d = hmac_sha1(PyTuple_GET_ITEM(acct, 1), PyTuple_GET_ITEM(acct, 2), values, s->body, s->blen);
    Py_DECREF(values);
    if (d == NULL) return -1;
    if (!PyBytes_Check(d) || PyBytes_GET_SIZE(d) != 20) { Py_DECREF(d); l->acl_miss[ACL_UNSUPPORTED]++; return 0; }
    base64_20((const unsigned char *)PyBytes_AS_STRING(d), want);
    Py_DECREF(d);
#endif
    unsigned char diff = 0;
    for (int i = 0; i < 28; i++) diff |= (unsigned char)(want[i] ^ sg->s.p[i]);
    if (diff) { l->acl_miss[ACL_BAD_SIG]++; return 0; }
    return 1;
}
