/* ACL 1.0 signature check of a lane send (brokerd/acl/sign.py is the reference): the values of the header's
 * fields sorted by key (Signature and _UNIQUE_KEY_QUERY left out), then the body, HMAC-SHA1 with the account's
 * secret, base64, compared with the Signature field. The account's secret and the topics it may PUB to come
 * from the lane's acl table (filled by brokerd/processors/send_lane.py after the Python check allowed a send);
 * anything this file cannot decide exactly as Python would goes to Python (return 0, counted by reason). */
#include "lane.h"

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

/* The signed bytes into a new bytes object; NULL with no exception: Python decides. */
static PyObject *signed_content(const Send *s) {
    const Hdr *h = &s->h;
    const Ext *order[MAX_EXT];
    int n = 0;
    Py_ssize_t cap = s->blen;
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
            p += snprintf(p, 24, "%lld", e->i);
        } else {
            const char *t = e->kind == V_TRUE ? "true" : "false";
            memcpy(p, t, strlen(t)); p += strlen(t);
        }
    }
    memcpy(p, s->body, s->blen); p += s->blen;
    if (_PyBytes_Resize(&out, p - start) < 0) return NULL;
    return out;
}

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
    const Hdr *h = &s->h;
    const Ext *ak = find_ext(h, "AccessKey", 9), *sg = find_ext(h, "Signature", 9);
    if (ak == NULL || ak->kind != V_STR || ak->s.esc || ak->s.n == 0) { l->acl_miss[ACL_NO_KEY]++; return 0; }
    if (sg == NULL || sg->kind != V_STR || sg->s.esc || sg->s.n != 28) { l->acl_miss[ACL_BAD_SIG]++; return 0; }
    PyObject *key = PyUnicode_DecodeUTF8(ak->s.p, ak->s.n, NULL);
    if (key == NULL) { PyErr_Clear(); l->acl_miss[ACL_NO_KEY]++; return 0; }
    PyObject *acct = PyDict_GetItemWithError(l->acl, key);  /* (secret bytes, set of topics) */
    Py_DECREF(key);
    if (acct == NULL) {
        if (PyErr_Occurred()) return -1;
        l->acl_miss[ACL_NOT_ADMITTED]++;
        return 0;
    }
    int has = PySet_Contains(PyTuple_GET_ITEM(acct, 1), l->last_topic_obj);
    if (has < 0) return -1;
    if (!has) { l->acl_miss[ACL_NOT_ADMITTED]++; return 0; }
    PyObject *content = signed_content(s);
    if (content == NULL) {
        if (PyErr_Occurred()) return -1;
        l->acl_miss[ACL_UNSUPPORTED]++;
        return 0;
    }
    PyObject *d = PyObject_CallFunctionObjArgs(l->acl_digest, PyTuple_GET_ITEM(acct, 0), content, l->acl_algo, NULL);
    Py_DECREF(content);
    if (d == NULL) return -1;
    if (!PyBytes_Check(d) || PyBytes_GET_SIZE(d) != 20) { Py_DECREF(d); l->acl_miss[ACL_UNSUPPORTED]++; return 0; }
    char want[28];
    base64_20((const unsigned char *)PyBytes_AS_STRING(d), want);
    Py_DECREF(d);
    unsigned char diff = 0;
    for (int i = 0; i < 28; i++) diff |= (unsigned char)(want[i] ^ sg->s.p[i]);
    if (diff) { l->acl_miss[ACL_BAD_SIG]++; return 0; }
    return 1;
}
