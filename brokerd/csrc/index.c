/* index_put: the key index's hot loop (brokerd/store/index.py IndexService.put_keys), the Python code being the
 * reference (tests/unit/store/test_index_native.py runs both on the same keys and compares the files' bytes).
 *
 *   index_put(slots_view, entries_view, slot_count, count, max_entries, seed, keys, phys, ts) -> new count
 *
 * slots_view: writable buffer of slot_count native uint32 (the slot table); entries_view: writable buffer of
 * max_entries x 3 native uint64 (hash << 32 | previous entry number, phys, store timestamp). seed is the crc32 of
 * "<topic>#"; each key's hash is zlib.crc32(key as UTF-8, seed) (keys that are not valid UTF-8 are encoded with
 * errors="replace", as the Python code does). Raises ValueError when the entries do not fit; writes nothing then.
 */
#include "native.h"

static uint32_t crc_table[8][256];  /* [0]: a byte's CRC; [t]: a byte followed by t zero bytes (slicing-by-8) */
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    crc_ready = 1;
}

static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* zlib.crc32(data, value), 8 bytes a step (index keys are short: the CRC folding of crc.c does not pay here) */
uint32_t crc32_update(uint32_t value, const unsigned char *p, Py_ssize_t n) {
    if (!crc_ready) crc_init();
    const uint32_t (*t)[256] = crc_table;
    uint32_t c = ~value;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo = le32(p) ^ c, hi = le32(p + 4);
        c = t[7][lo & 0xFF] ^ t[6][lo >> 8 & 0xFF] ^ t[5][lo >> 16 & 0xFF] ^ t[4][lo >> 24] ^
            t[3][hi & 0xFF] ^ t[2][hi >> 8 & 0xFF] ^ t[1][hi >> 16 & 0xFF] ^ t[0][hi >> 24];
    }
    for (; n > 0; p++, n--) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* The UTF-8 bytes of `key` (a new reference to a bytes object or a borrowed pointer via *u). */
static PyObject *key_bytes(PyObject *key, const char **u, Py_ssize_t *n) {
    *u = PyUnicode_AsUTF8AndSize(key, n);
    if (*u != NULL) return NULL;
    PyErr_Clear();  /* lone surrogates: as key.encode("utf-8", "replace") */
    PyObject *b = PyUnicode_AsEncodedString(key, "utf-8", "replace");
    if (b == NULL) return NULL;
    *u = PyBytes_AS_STRING(b);
    *n = PyBytes_GET_SIZE(b);
    return b;
}

PyObject *index_put(PyObject *self, PyObject *args) {
    Py_buffer sv, ev;
    long long slots, n, max_entries, seed, phys, ts;
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "w*w*LLLLO!LL", &sv, &ev, &slots, &n, &max_entries, &seed, &PyList_Type, &keys,
                          &phys, &ts))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t nk = PyList_GET_SIZE(keys);
    if (!crc_ready) crc_init();
    if (slots <= 0 || sv.len < slots * 4 || n < 0 || max_entries < 0 || ev.len < max_entries * 24 ||
        n + nk > max_entries || seed < 0 || seed > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "index_put: entries do not fit or bad geometry");
        goto done;
    }
    for (Py_ssize_t k = 0; k < nk; k++) {
        if (!PyUnicode_Check(PyList_GET_ITEM(keys, k))) {
            PyErr_SetString(PyExc_TypeError, "index_put: keys must be str");
            goto done;
        }
    }
    uint32_t *slot = (uint32_t *)sv.buf;
    uint64_t *ent = (uint64_t *)ev.buf;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *key = PyList_GET_ITEM(keys, k);
        const char *u;
        Py_ssize_t len;
        PyObject *owned = key_bytes(key, &u, &len);
        if (u == NULL) goto done;
        uint32_t h = crc32_update((uint32_t)seed, (const unsigned char *)u, len);
        Py_XDECREF(owned);
        uint32_t s = (uint32_t)(h % (uint64_t)slots);
        uint32_t prev = slot[s];
        long long i = n * 3;
        ent[i] = ((uint64_t)h << 32) | (uint64_t)((long long)prev < n ? prev : 0);
        ent[i + 1] = (uint64_t)phys;
        ent[i + 2] = (uint64_t)ts;
        slot[s] = (uint32_t)n;
        n++;
    }
    res = PyLong_FromLongLong(n);
done:
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return res;
}
