/* A send's topic and queue: the lane's topic table (a one-entry cache in front of it), the resolve callback for a
 * topic not in it (the Python send processor's decision), the queue choice and a retry topic's DLQ check. Called by
 * lane.c and lane_send.c through lane.h; calls neither. */
#include "lane.h"

/* The one-entry topic cache (Lane.last_*): dropped when the topic table changes (lane.c) or misses (here). */
void lane_clear_cache(Lane *l) {
    Py_CLEAR(l->last_entry);
    Py_CLEAR(l->last_topic_obj);
    l->last_topic_n = -1;
}

int lane_check_entry(PyObject *entry) {
    if (PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == ENTRY_SIZE && PyBytes_Check(PyTuple_GET_ITEM(entry, 0)) &&
        PyLong_Check(PyTuple_GET_ITEM(entry, 1)) && PyLong_Check(PyTuple_GET_ITEM(entry, 2)) &&
        PyLong_Check(PyTuple_GET_ITEM(entry, 3)) && PyTuple_Check(PyTuple_GET_ITEM(entry, 4)) &&
        PyTuple_Check(PyTuple_GET_ITEM(entry, 5)) &&
        (PyTuple_GET_ITEM(entry, 6) == Py_None || PyLong_Check(PyTuple_GET_ITEM(entry, 6)))) {
        PyObject *puts = PyTuple_GET_ITEM(entry, 5);
        Py_ssize_t i = 0;
        while (i < PyTuple_GET_SIZE(puts) && PyCallable_Check(PyTuple_GET_ITEM(puts, i))) i++;
        if (i == PyTuple_GET_SIZE(puts)) return 0;
    }
    PyErr_SetString(PyExc_TypeError, "entry must be (prefix, magic, write_qnums, read_qnums, qkeys, cq_puts "
                    "(callables), retry_max)");
    return -1;
}

/* The send's topic is not in the lane's table: the decision of the Python send processor (l->resolve: validate
 * the topic, auto-create it from the default topic, perms; a retry topic's group, its orderly locks), made once
 * for this request. A new reference to the entry it returns, added to the table; NULL when Python takes the send
 * (declined; not asked with ACL on, where Python checks the account first) or with an exception set (the
 * callback reports its own errors as a decline: an exception here is a bug or an interrupt). The callback may
 * clear the table and the cache (metadata hooks): nothing borrowed from them is held across it. */
static PyObject *resolve_topic(Lane *l, const Send *s, PyObject *topic) {
    if (l->resolve == NULL || l->acl != NULL) return NULL;
    const Hdr *h = s->h;
    const Ext *de = send_field(h, 'c');  /* defaultTopic */
    PyObject *dt;
    if (de == NULL || de->kind == V_NULL || (de->kind == V_STR && de->s.n == 0)) {
        dt = Py_NewRef(Py_None);  /* the processor's default (TBW102) */
    } else if (de->kind == V_STR && !de->s.esc) {
        if ((dt = PyUnicode_DecodeUTF8(de->s.p, de->s.n, NULL)) == NULL) { PyErr_Clear(); return NULL; }
    } else {
        return NULL;  /* an escaped or non-string default topic: Python reads it */
    }
    PyObject *entry = PyObject_CallFunction(l->resolve, "OOLLN", topic, dt, s->default_qnums, s->qid,
                                            PyBool_FromLong(s->batch));
    Py_DECREF(dt);
    if (entry == Py_None) Py_CLEAR(entry);
    if (entry != NULL && (lane_check_entry(entry) || PyDict_SetItem(l->topics, topic, entry) < 0)) Py_CLEAR(entry);
    return entry;
}

/* The lane entry of the send's topic into s->entry / s->topic_obj (new references; a one-entry cache in front of
 * the topics dict, the resolve callback behind it); 1 ok, 0 Python, -1. */
int lane_topic_entry(Lane *l, Send *s) {
    const Hdr *h = s->h;
    const Ext *te = send_field(h, 'b');  /* topic */
    if (te == NULL || te->kind != V_STR || te->s.esc || te->s.n == 0 || te->s.n > 255) return 0;
    s->topic_p = te->s.p;
    s->topic_n = te->s.n;
    if (l->last_topic_n == te->s.n && memcmp(l->last_topic, te->s.p, te->s.n) == 0) {
        s->entry = Py_NewRef(l->last_entry);
        s->topic_obj = Py_NewRef(l->last_topic_obj);
        return 1;
    }
    PyObject *t = PyUnicode_DecodeUTF8(te->s.p, te->s.n, NULL);
    if (t == NULL) { PyErr_Clear(); return 0; }
    PyObject *entry = PyDict_GetItemWithError(l->topics, t);
    if (entry != NULL) {
        Py_INCREF(entry);
    } else if (PyErr_Occurred() || (entry = resolve_topic(l, s, t)) == NULL) {
        Py_DECREF(t);
        return PyErr_Occurred() ? -1 : 0;
    }
    lane_clear_cache(l);
    memcpy(l->last_topic, te->s.p, te->s.n);
    l->last_topic_n = te->s.n;
    l->last_entry = Py_NewRef(entry);
    l->last_topic_obj = Py_NewRef(t);
    s->entry = entry;
    s->topic_obj = t;
    return 1;
}

/* A %RETRY% topic's send stays in the retry topic while its reconsumeTimes is not over the max (the header's
 * maxReconsumeTimes, else the group's retryMaxTimes the entry carries), as SendProcessor._retry_or_dlq decides
 * (its orderly-lock case never reaches here: the lane forgets the topic when its group takes locks); 1 ok, 0
 * Python (the DLQ; a batch, which Python refuses), -1. */
int lane_retry_stays(Lane *l, Send *s) {
    PyObject *group_max = PyTuple_GET_ITEM(s->entry, 6);
    if (group_max == Py_None) return 1;
    if (s->batch) PYTHON(WHY_BATCH);
    long long max = s->has_max ? s->max_reconsume : PyLong_AsLongLong(group_max);
    if (max == -1 && PyErr_Occurred()) return -1;
    if (s->reconsume > max) PYTHON(WHY_TOPIC);
    return 1;
}

/* A queue id the topic has (-1: a random write queue, from the lane's own generator: the Python path draws
 * from `random`); 1 ok, 0 Python (it answers INVALID_PARAMETER), -1. */
int lane_choose_queue(Lane *l, Send *s) {
    long wq = PyLong_AsLong(PyTuple_GET_ITEM(s->entry, 2)), rq = PyLong_AsLong(PyTuple_GET_ITEM(s->entry, 3));
    PyObject *qkeys = PyTuple_GET_ITEM(s->entry, 4), *cq_puts = PyTuple_GET_ITEM(s->entry, 5);
    if (PyErr_Occurred()) return -1;
    if (s->qid < 0) {
        if (wq <= 0) return 0;
        l->rng ^= l->rng << 13; l->rng ^= l->rng >> 7; l->rng ^= l->rng << 17;
        s->qid = (long long)(l->rng % (uint64_t)wq);
    }
    if (s->qid >= (wq > rq ? wq : rq) || s->qid >= PyTuple_GET_SIZE(qkeys) || s->qid >= PyTuple_GET_SIZE(cq_puts))
        return 0;
    s->answer_qid = s->qid;
    return 1;
}
