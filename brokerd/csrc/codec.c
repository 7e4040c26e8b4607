/* The remoting codec for common frames: decode_frame builds a RemotingCommand from a JSON header the strict
 * parser accepts; encode_head writes a response header as the Python codec does. Both return None for what
 * they do not take, and the Python codec (brokerd/remoting/codec.py) handles it. */
#include "native.h"

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

/* decode_frame(buf, pos, max_frame) -> (RemotingCommand, next_pos) | None
 * None: the frame at pos is not complete, too long or not one this codec handles (the Python codec then
 * decides). */
PyObject *decode_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

/* encode_head(code, opaque, flag, language, version, remark, ext, body_len) -> bytes | None
 * None when a value is not plainly encodable (the Python codec then encodes it). */
PyObject *encode_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

