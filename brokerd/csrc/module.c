/* brokerd._native: the C half of the broker's hot path (see brokerd/native.py for the Python side).
 *
 * 1. decode_frame / encode_head (codec.c, json.c): the remoting codec for the common frames (JSON headers with
 *    string, integer, boolean and null values). Anything else (binary headers, floats, arrays, bad JSON) is
 *    handed back to the pure-Python codec, which stays the reference and produces the error messages.
 * 2. SendLane (lane.c, lane_send.c, send.c): the common-case SEND_MESSAGE / SEND_MESSAGE_V2 (JSON or ROCKETMQ
 *    binary header) from frame bytes to stored record and response bytes. Any request it does not fully understand stops the lane at that frame;
 *    Python then handles the frame, so requests are processed in arrival order and every unusual case keeps
 *    its Python behaviour.
 * 3. sync_close, Syncer (sync.c): a flush's fsyncs with the GIL released once; fsync jobs on threads that never
 *    take the GIL, finished jobs announced on an eventfd the event loop watches.
 * 4. scan_log (scan.c): a slave's replicated log bytes validated and parsed for dispatch in one pass.
 * 5. index_put (index.c): the key index's put loop (crc32 hash, slot chain, entry).
 * 6. scan_pull (pull_scan.c): a pull's read loop over one consume-queue file's entries (reader._step per entry).
 * 7. the header cache (hcache.c): the lane parses a JSON header by its differences from the client's previous one.
 * 8. crc_of (crc.c): a body's CRC-32 for the lane and scan_log (carry-less multiplication where the CPU has it).
 * 9. BatchAppender (store_batch.c): MessageStore.append_messages's records, queue offsets, consume-queue and key
 *    index entries for a batch of broker-originated messages (brokerd/store/batch_append.py drives it).
 * 10. props_decode (props.c): a stored record's properties string as a dict (decode_properties, the reference).
 * 11. timer_prepare (timer_prepare.c): a due timer's message made from its parked record (brokerd/timer/deliver.py).
 */
#include "send.h"

PyObject *g_cmd_type, *g_languages, *g_crc32, *g_java, *g_true_s, *g_false_s;

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

PyObject *sync_close(PyObject *self, PyObject *args);
PyObject *header_cache_check(PyObject *self, PyObject *seq);
PyObject *props_decode(PyObject *self, PyObject *args);
PyObject *timer_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern PyTypeObject SyncerType;
extern PyTypeObject BatchAppenderType;

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(RemotingCommand, LANGUAGES, zlib.crc32)"},
    {"decode_frame", (PyCFunction)(void (*)(void))decode_frame, METH_FASTCALL, "decode_frame(buf, pos)"},
    {"encode_head", (PyCFunction)(void (*)(void))encode_head, METH_FASTCALL, "encode_head(...)"},
    {"java_hash", java_hash_py, METH_O, "Java String.hashCode"},
    {"header_cache_check", header_cache_check, METH_O,
     "header_cache_check(headers) -> (hits, [(index, field)]): the header cache against parse_header (tests)"},
    {"sync_close", sync_close, METH_VARARGS, "sync_close(dir_fds, file_fds) -> errno of the first failure or 0"},
    {"scan_log", scan_log, METH_VARARGS, "scan_log(buf, base, segment_size, verify=True) -> (end, records)"},
    {"scan_pull", scan_pull, METH_VARARGS, "scan_pull(chunk, q0, i, state, limits, tag_filter, files, segment_size, "
     "buffers, qoffs) -> (i, stopped)"},
    {"index_put", index_put, METH_VARARGS, "index_put(slots, entries, slot_count, count, max, seed, keys, phys, ts)"},
    {"props_decode", props_decode, METH_VARARGS, "props_decode(buf, start, end) -> dict, or None when not UTF-8"},
    {"timer_prepare", (PyCFunction)(void (*)(void))timer_prepare, METH_FASTCALL,
     "timer_prepare(raw, qoff, due, roll, now, timer_topic, msg_type) -> message, None, False (stale), NotImplemented"},
    {NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "brokerd._native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyType_Ready(&LaneType) < 0) return NULL;
    Py_INCREF(&LaneType);
    PyModule_AddObject(m, "SendLane", (PyObject *)&LaneType);
    if (PyType_Ready(&SyncerType) < 0) return NULL;
    Py_INCREF(&SyncerType);
    PyModule_AddObject(m, "Syncer", (PyObject *)&SyncerType);
    if (PyType_Ready(&BatchAppenderType) < 0) return NULL;
    Py_INCREF(&BatchAppenderType);
    PyModule_AddObject(m, "BatchAppender", (PyObject *)&BatchAppenderType);
    g_java = PyUnicode_InternFromString("JAVA");
    g_true_s = PyUnicode_InternFromString("true");
    g_false_s = PyUnicode_InternFromString("false");
    return m;
}
