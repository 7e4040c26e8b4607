/* One common-case SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310) / batch (320 or batch=true; a record per message):
 * from frame bytes to the stored record, the queue offset, the consume-queue and index puts and the answer frame.
 * Every check the Python send processor makes either passes here or hands the frame to it (return 0), so both
 * paths store and answer the same; the decisions that need the broker's metadata (a topic the lane does not know
 * yet: validation, auto-creation, perms, a retry topic's group) are the Python processor's, asked once per such
 * request through the lane's resolve callback. */
#include "lane.h"

#include <errno.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* The batch field as the Python processor reads it (value.lower() in ("true", "1"); C++ clients send "0"); an
 * escaped string counts as a batch, so Python decides. */
static int is_batch(const Ext *e) {
    if (e->kind == V_TRUE) return 1;
    if (e->kind == V_INT) return e->i == 1;
    if (e->kind != V_STR) return 0;
    if (e->s.esc) return 1;
    return (e->s.n == 1 && e->s.p[0] == '1') || (e->s.n == 4 && strncasecmp(e->s.p, "true", 4) == 0);
}

/* The numeric and flag fields; 0 ok, else why Python takes the send (WHY_*). */
static int send_fields(Send *s) {
    const Hdr *h = s->h;
    const Ext *be = send_field(h, 'm');  /* batch */
    int absent = be == NULL || be->kind == V_NULL || (be->kind == V_STR && be->s.n == 0);
    if (!absent && be->kind == V_STR && be->s.esc) return WHY_BATCH;
    s->batch = absent ? h->code == 320 : is_batch(be);  /* as parse_send_header reads it */
    if (field_int(h, 'e', -1, &s->qid) || field_int(h, 'f', 0, &s->sys_flag) ||  /* queueId, sysFlag */
        field_int(h, 'g', 0, &s->born_ts) || field_int(h, 'h', 0, &s->flag) ||  /* bornTimestamp, flag */
        field_int(h, 'j', 0, &s->reconsume) || field_int(h, 'd', 4, &s->default_qnums))  /* reconsumeTimes, dTQN */
        return WHY_FIELDS;
    /* maxReconsumeTimes: read (and a bad one refused) only from version 121 on, as parse_send_header reads it */
    const Ext *me = send_field(h, 'l');  /* maxReconsumeTimes */
    s->has_max = (h->version_kind ? h->version : 0) >= 121 && me != NULL && me->kind != V_NULL &&
                 !(me->kind == V_STR && me->s.n == 0);
    if (s->has_max && field_int(h, 'l', 16, &s->max_reconsume)) return WHY_FIELDS;
    s->half = (s->sys_flag & 0xC) != 0;  /* prepared: a half message (stored_props checks TRAN_MSG) */
    if ((s->sys_flag & 0xC) != 0 && ((s->sys_flag & 0xC) != 0x4 || s->batch)) return WHY_TRANSACTION;
    if (s->sys_flag < INT32_MIN || s->sys_flag > INT32_MAX || s->flag < INT32_MIN ||
        s->flag > INT32_MAX || s->reconsume < INT32_MIN || s->reconsume > INT32_MAX)
        return WHY_FIELDS;  /* out-of-range numbers: Python */
    return 0;
}

/* A new UNIQ_KEY into l->gen_uniq, as brokerd.message.new_uniq_id makes one: the prefix, then the ms since the
 * start of the local month (int32) and a counter (uint16), upper-case hex. The counter and the month are
 * process-wide (every lane of the container), the prefix differs from the Python generator's. */
static void new_uniq(Lane *l) {
    static const char HX[] = "0123456789ABCDEF";
    static long long month_start = 0, next_month = 0;
    static unsigned counter = 0;
    long long now = now_ms();
    if (now >= next_month) {
        time_t t = (time_t)(now / 1000);
        struct tm tm;
        localtime_r(&t, &tm);
        tm.tm_mday = 1; tm.tm_hour = tm.tm_min = tm.tm_sec = 0; tm.tm_isdst = -1;
        struct tm nx = tm;
        month_start = (long long)mktime(&tm) * 1000;
        nx.tm_mon += 1; nx.tm_isdst = -1;
        next_month = (long long)mktime(&nx) * 1000;
    }
    counter = (counter + 1) & 0xFFFF;
    uint64_t tail = (uint64_t)((now - month_start) & 0x7FFFFFFF) << 16 | counter;
    memcpy(l->gen_uniq, l->uniq_prefix, 20);
    for (int i = 11; i >= 0; i--, tail >>= 4) l->gen_uniq[20 + i] = HX[tail & 15];
}

/* The delay level of a DELAY property as ScheduleService.apply_delay reads it (plain digits only; anything else
 * is left to Python): 0 ok (s->level > 0: delayed, clamped to the levels), else WHY_*. */
static int delay_level(Lane *l, Send *s, const Prop *d) {
    s->level = 0;
    if (d == NULL) return 0;
    if (d->vn > 9) return WHY_DELAY;
    long long v = 0;
    for (Py_ssize_t i = 0; i < d->vn; i++) {
        if (d->v[i] < '0' || d->v[i] > '9') return WHY_DELAY;
        v = v * 10 + (d->v[i] - '0');
    }
    if (v == 0) return 0;  /* level 0: a plain message */
    if (l->delay_entry == NULL) return WHY_DELAY;  /* the schedule topic is not set (or does not exist) */
    s->level = (int)(v < l->n_levels ? v : l->n_levels);
    if (s->level > PyTuple_GET_SIZE(PyTuple_GET_ITEM(l->delay_entry, 5)) ||
        s->level > PyTuple_GET_SIZE(PyTuple_GET_ITEM(l->delay_entry, 4)))
        return WHY_DELAY;  /* more levels than the schedule topic has queues */
    return 0;
}

static int stored_props(Lane *l, Send *s, int delay, int wait_check);

/* A timer property on the send (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, the 4.x __STARTDELIVERTIME). */
static int timer_props(const Send *s) {
    return prop(s->ps, s->np, "TIMER_DELIVER_MS", 16) || prop(s->ps, s->np, "TIMER_DELAY_SEC", 15) ||
           prop(s->ps, s->np, "TIMER_DELAY_MS", 14) || prop(s->ps, s->np, "__STARTDELIVERTIME", 18);
}

/* The properties (parsed into s->ps from the header's bytes; with escapes other than the separators' unescaped into
 * l->scratch first) and the stored form (l->props: the pairs in order, a generated UNIQ_KEY after them when there
 * was none, CLUSTER set); 0 ok, else WHY_*. */
static int send_props(Lane *l, Send *s) {
    const Ext *pe = send_field(s->h, 'i');  /* properties */
    s->np = 0;
    if (pe != NULL && pe->kind == V_STR) {
        if (!pe->s.esc) s->np = parse_props(pe->s.p, pe->s.n, s->ps);
        else if ((s->np = parse_props_json(pe->s.p, pe->s.n, s->ps)) == -2) {
            Py_ssize_t sn;
            if (pe->s.n > SCRATCH || (sn = unescape(&pe->s, l->scratch)) < 0) return WHY_PROPERTIES;
            s->np = parse_props(l->scratch, sn, s->ps);
        }
    } else if (pe != NULL && pe->kind != V_NULL) return WHY_PROPERTIES;
    return stored_props(l, s, 1, 1);
}

/* Properties s->ps (s->np of them, -1: too many) checked and stored into l->props (with `delay`: a DELAY level
 * re-targets the send; with `wait`: a WAIT=false send on a SYNC_FLUSH store is left to Python); 0 ok, else WHY_*. */
static int stored_props(Lane *l, Send *s, int delay, int wait_check) {
    if (s->np < 0) return WHY_PROPERTIES;
    s->level = 0;
    if (s->half) {  /* as is_half_request: TRAN_MSG=true on a single send; no delay for it (apply_delay) */
        const Prop *tm = prop(s->ps, s->np, "TRAN_MSG", 8);
        if (!delay || tm == NULL || tm->vn != 4 || memcmp(tm->v, "true", 4) != 0 || l->half_entry == NULL)
            return WHY_TRANSACTION;
    }
    if (delay && !s->half && timer_props(s)) return WHY_TIMER;  /* brokerd/timer parks or refuses it */
    int why = delay && !s->half ? delay_level(l, s, prop(s->ps, s->np, "DELAY", 5)) : 0;
    if (why) return why;
    const Prop *wait = prop(s->ps, s->np, "WAIT", 4);
    if (wait_check && l->sync && wait != NULL && wait->vn == 5 && memcmp(wait->v, "false", 5) == 0)
        return WHY_WAIT_FALSE;
    s->uniq = prop(s->ps, s->np, "UNIQ_KEY", 8);
    if (s->uniq == NULL) {  /* as the Python processor: a new one, after the others */
        new_uniq(l);
        s->ps[s->np] = (Prop){"UNIQ_KEY", 8, l->gen_uniq, 32};
        s->uniq = &s->ps[s->np++];
    }
    s->tags = prop(s->ps, s->np, "TAGS", 4);
    s->keys = prop(s->ps, s->np, "KEYS", 4);
    /* the stored properties: the request's in order (CLUSTER set; when delayed DELAY = the level, REAL_TOPIC and
     * REAL_QID set; a half message's REAL_TOPIC and REAL_QID set), then those of CLUSTER, REAL_TOPIC, REAL_QID that were not there, in that order (as the Python
     * processor inserts them into its dict) */
    char qid[24], lv[24];
    int nset = s->level > 0 ? 4 : s->half ? 3 : 1, seen[4] = {0, 0, 0, 0};
    Prop set[4] = {{"CLUSTER", 7, l->cluster, l->cluster_n}, {"REAL_TOPIC", 10, s->topic_p, s->topic_n},
                   {"REAL_QID", 8, qid, nset > 2 ? fmt_ll(qid, s->answer_qid) : 0},
                   {"DELAY", 5, lv, nset > 3 ? fmt_ll(lv, s->level) : 0}};
    unsigned char *pp = (unsigned char *)l->props;
    Py_ssize_t pn = 0;
    for (int i = 0; i < s->np + nset; i++) {
        const Prop *e = i < s->np ? &s->ps[i] : &set[i - s->np];
        const char *v = e->v;
        Py_ssize_t vn = e->vn;
        if (i >= s->np && seen[i - s->np]) continue;
        for (int j = 0; i < s->np && j < nset; j++)
            if (e->kn == set[j].kn && memcmp(e->k, set[j].k, e->kn) == 0) { seen[j] = 1; v = set[j].v; vn = set[j].vn; }
        if (pn + e->kn + vn + 2 > MAX_PROPS) return WHY_SIZE;  /* Python answers PROPERTIES_SIZE_EXCEEDED */
        memcpy(pp + pn, e->k, e->kn); pn += e->kn; pp[pn++] = 1;
        memcpy(pp + pn, v, vn); pn += vn; pp[pn++] = 2;
    }
    s->pn = pn;
    if (s->level > 0) {  /* stored in the schedule topic's queue of the level */
        Py_SETREF(s->entry, Py_NewRef(l->delay_entry));
        Py_SETREF(s->topic_obj, Py_NewRef(l->delay_topic));
        s->qid = s->level - 1;
    } else if (s->half) {  /* as to_half: queue 0 of the half topic, no transaction bits */
        Py_SETREF(s->entry, Py_NewRef(l->half_entry));
        Py_SETREF(s->topic_obj, Py_NewRef(l->half_topic));
        s->qid = 0;
        s->sys_flag &= ~0xC;
    }
    return 0;
}

/* Parse and check the whole request; 1 ok, 0 Python (l->why says why), -1 a Python exception. */
static int parse_send(Lane *l, const unsigned char *b, Py_ssize_t total, Send *s) {
    uint32_t word = (uint32_t)be32(b + 4);
    Py_ssize_t hlen = word & 0xFFFFFF;
    uint32_t stype = word >> 24;  /* 0 JSON, 1 ROCKETMQ binary */
    if (stype > 1 || 4 + hlen > total) PYTHON(WHY_HEADER);
    const char *hp = (const char *)b + 8;
    if (stype) s->h = parse_binary_header(hp, hlen, &s->own) ? NULL : &s->own;
    else s->h = parse_header_cached(&l->hc, hp, hlen, &s->own);
    if (s->h == NULL) PYTHON(WHY_HEADER);
    const Hdr *h = s->h;
    if (h->code != 310 && h->code != 10 && h->code != 320) PYTHON(WHY_NOT_SEND);
    if (h->flag_kind && h->flag != 0) PYTHON(WHY_ONEWAY);
    if (h->ext_kind != 1) PYTHON(WHY_HEADER);
    int why = send_fields(s);
    if (why) PYTHON(why);
    int r = lane_topic_entry(l, s);
    if (r == 0) PYTHON(WHY_TOPIC);
    if (r == 1 && (r = lane_choose_queue(l, s)) == 0) PYTHON(WHY_QUEUE);
    if (r == 1) r = lane_retry_stays(l, s);
    if (r != 1) return r;
    s->body = (const char *)b + 8 + hlen;
    s->blen = total - 4 - hlen;
    if (l->acl != NULL) {  /* ACL on: the account was admitted for this topic and the signature matches */
        int a = lane_acl_ok(l, s);
        if (a == 0) PYTHON(WHY_ACL);
        if (a < 0) return -1;
    }
    if (s->batch) {  /* the header's properties are not used; lane_batch checks each message */
        s->level = 0;
        return 1;
    }
    if ((why = send_props(l, s)) != 0) PYTHON(why);
    if (s->blen > l->max_body) PYTHON(WHY_SIZE);  /* Python answers MESSAGE_ILLEGAL */
    s->size = HEADER_V4_SIZE + s->blen + PyBytes_GET_SIZE(PyTuple_GET_ITEM(s->entry, 0)) + 2 + s->pn;
    if (s->size + 8 > l->segment_size) PYTHON(WHY_SIZE);
    return 1;
}

/* The stored record (RocketMQ's V1/V2 layout, IPv4 hosts). */
static void write_record(Lane *l, const Send *s, unsigned char *r, long long qoff, long long phys, long long ts,
                         uint32_t crc, const unsigned char *born_ip, long long born_port) {
    PyObject *prefix = PyTuple_GET_ITEM(s->entry, 0);
    Py_ssize_t tlen = PyBytes_GET_SIZE(prefix);
    put_be32((char *)r + 8, crc & 0x7FFFFFFF);
    put_be32((char *)r + 12, (uint32_t)s->qid);
    put_be32((char *)r + 16, (uint32_t)s->flag);
    be64w(r + 20, (uint64_t)qoff);
    be64w(r + 28, (uint64_t)phys);
    put_be32((char *)r + 36, (uint32_t)(s->sys_flag & ~0x30));
    be64w(r + 40, (uint64_t)s->born_ts);
    memcpy(r + 48, born_ip, 4);
    put_be32((char *)r + 52, (uint32_t)born_port);
    be64w(r + 56, (uint64_t)ts);
    memcpy(r + 64, l->store_ip, 4);
    put_be32((char *)r + 68, (uint32_t)l->store_port);
    put_be32((char *)r + 72, (uint32_t)s->reconsume);
    be64w(r + 76, 0);
    put_be32((char *)r + 84, (uint32_t)s->blen);
    memcpy(r + HEADER_V4_SIZE, s->body, s->blen);
    unsigned char *t = r + HEADER_V4_SIZE + s->blen;
    memcpy(t, PyBytes_AS_STRING(prefix), tlen);
    be16w(t + tlen, (int)s->pn);
    memcpy(t + tlen + 2, l->props, s->pn);
    put_be32((char *)r + 4, (uint32_t)PyLong_AsLong(PyTuple_GET_ITEM(s->entry, 1)));
    put_be32((char *)r, (uint32_t)s->size);
}

/* The raised exception, cleared (None when there is none). */
static PyObject *fetch_error(void) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    Py_XDECREF(et); Py_XDECREF(tb);
    return ev ? ev : Py_NewRef(Py_None);
}

/* The record's key index hashes, before it is written (see lane_index_keys). */
static void hash_index_keys(Lane *l, Send *s) {
    if (l->index_put != Py_None) lane_index_keys(l, s->topic_obj, s->keys, s->uniq, &s->ik);
}

/* Consume-queue put, index put, a note for the listeners. A failing put is kept in l->error (the run stops
 * and the store sets its error flag; MessageStore.retry_dispatch redoes the dispatch), never raised: the record is
 * stored. */
static void dispatch(Lane *l, const Send *s, PyObject *qkey, long long qoff, long long phys, long long ts,
                     PyObject *notes) {
    /* the tags code; a delayed message's is its delivery time (store time + the level's delay) */
    long long tags = s->level > 0 ? ts + l->delay_ms[s->level - 1]
                     : s->tags != NULL ? java_hash((const unsigned char *)s->tags->v, s->tags->vn) : 0;
    PyObject *put = PyTuple_GET_ITEM(PyTuple_GET_ITEM(s->entry, 5), s->qid);
    if (lane_cq_put(l, put, qoff, phys, s->size, tags) ||
        (l->index_put != Py_None && lane_index_put(l, s->topic_obj, s->keys, s->uniq, &s->ik, phys, ts))) {
        l->error = fetch_error();
        return;
    }
    l->dispatched_end = phys + s->size;
    if (PyList_GET_SIZE(l->listeners) > 0) {  /* listeners run after the run, once per queue */
        PyObject *note = Py_BuildValue("(LL)", qoff, tags);
        if (note == NULL || PyDict_SetItem(notes, qkey, note) < 0) PyErr_Clear();
        Py_XDECREF(note);
    }
}

/* The offset message id of the record at `phys` (32 characters at dst). */
static void offset_id(const Lane *l, long long phys, char *dst) {
    static const char HX[] = "0123456789ABCDEF";
    memcpy(dst, l->id_prefix, 16);
    for (int i = 15; i >= 0; i--) dst[16 + i] = HX[(phys >> ((15 - i) * 4)) & 15];
}

/* The answer frame, field for field what SendProcessor._answer sends: msgId `ids` (a batch's joined with
 * commas), the first queue offset, transactionId `uniq` (a batch's joined). */
static PyObject *answer(Lane *l, const Send *s, long long qoff, const char *ids, Py_ssize_t ids_n, const char *uniq,
                        Py_ssize_t uniq_n) {
    Out o;
    out_init(&o);
    int rc = OUT_LIT(&o, "{\"code\":0,\"extFields\":{\"msgId\":\"");
    rc |= out_raw(&o, ids, ids_n);
    rc |= OUT_LIT(&o, "\",\"queueId\":\"");
    rc |= out_ll(&o, s->answer_qid);
    rc |= OUT_LIT(&o, "\",\"queueOffset\":\"");
    rc |= out_ll(&o, qoff);
    rc |= OUT_LIT(&o, "\",\"transactionId\":");
    rc |= out_jstr(&o, uniq, uniq_n);
    rc |= OUT_LIT(&o, ",\"MSG_REGION\":");
    rc |= out_raw(&o, l->region, l->region_n);
    rc |= l->trace_on ? OUT_LIT(&o, ",\"TRACE_ON\":\"true\"}") : OUT_LIT(&o, ",\"TRACE_ON\":\"false\"}");
    rc |= OUT_LIT(&o, ",\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    rc |= out_ll(&o, s->h->opaque_kind ? s->h->opaque : 0);
    rc |= OUT_LIT(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479}");
    PyObject *fb = rc ? NULL : frame_bytes(&o, 0);
    out_free(&o);
    return fb;
}

/* Room for `size` more staged bytes (the stage is written first when full); 0 ok, 3 write failed, -1. */
static int stage_room(Lane *l, long long size, PyObject *out) {
    if (l->stage_n > 0 && l->stage_n + size > STAGE_MAX && lane_write(l, out)) return 3;
    if (l->stage_n + size <= l->stage_cap) return 0;
    Py_ssize_t cap = l->stage_n + size > STAGE_MAX ? (Py_ssize_t)(l->stage_n + size) : STAGE_MAX;
    unsigned char *p = PyMem_Realloc(l->stage, cap);
    if (p == NULL) { PyErr_NoMemory(); return -1; }
    l->stage = p;
    l->stage_cap = cap;
    return 0;
}

static int pwrite_all(int fd, const unsigned char *p, Py_ssize_t n, long long at) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, (size_t)n, (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (w == 0) errno = EIO; return -1; }
        p += w; n -= w; at += w;
    }
    return 0;
}

int lane_write(Lane *l, PyObject *out) {
    if (l->stage_n == 0) return 0;
    Py_ssize_t n = l->stage_n;
    long long at = l->stage_at;
    l->stage_n = 0;
    l->stage_at += n;
    if (pwrite_all(l->fd, l->stage + 8, n - 8, at + 8) == 0 && pwrite_all(l->fd, l->stage, 8, at) == 0) {
        l->stage_out = PyList_GET_SIZE(out);
        l->stage_msgs = l->msgs;
        l->stage_bytes = l->bytes;
        return 0;
    }
    PyErr_SetFromErrno(PyExc_OSError);
    Py_XSETREF(l->write_error, fetch_error());
    l->wrote = l->stage_at = at;
    l->msgs = l->stage_msgs;
    l->bytes = l->stage_bytes;
    if (l->dispatched_end > l->base + at) l->dispatched_end = l->msgs ? l->base + at : -1;
    if (PyList_SetSlice(out, l->stage_out, PyList_GET_SIZE(out), NULL) < 0) PyErr_Clear();
    return -1;
}

/* Overload: a send refused with SYSTEM_BUSY and l->busy as remark, as SendProcessor.process answers it (a
 * one-way send gets no answer); 1 taken, 0 Python (not a send, or a header only the Python codec reads). */
static int refuse(Lane *l, const unsigned char *b, Py_ssize_t total, PyObject *out) {
    uint32_t word = (uint32_t)be32(b + 4);
    Py_ssize_t hlen = word & 0xFFFFFF;
    uint32_t stype = word >> 24;
    Hdr own;
    const Hdr *h = NULL;
    if (stype <= 1 && 4 + hlen <= total) {  /* a JSON header by its differences from a client's last (hcache.c) */
        const char *hp = (const char *)b + 8;
        h = stype ? (parse_binary_header(hp, hlen, &own) ? NULL : &own) : parse_header_cached(&l->hc, hp, hlen, &own);
    }
    if (h == NULL) PYTHON(WHY_HEADER);
    if (h->code != 310 && h->code != 10 && h->code != 320) PYTHON(WHY_NOT_SEND);
    if (h->flag_kind && h->flag != 0 && h->flag != 2) PYTHON(WHY_HEADER);  /* a response bit: not a request */
    l->refused++;
    if (h->flag_kind && h->flag == 2) return 1;
    Out o;
    out_init(&o);
    int rc = OUT_LIT(&o, "{\"code\":2,\"extFields\":{},\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    rc |= out_ll(&o, h->opaque_kind ? h->opaque : 0);
    rc |= OUT_LIT(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479,\"remark\":");
    rc |= out_jstr(&o, l->busy, l->busy_n);
    rc |= OUT_LIT(&o, "}");
    PyObject *fb = rc ? NULL : frame_bytes(&o, 0);
    out_free(&o);
    if (fb == NULL || PyList_Append(out, fb) < 0) { Py_XDECREF(fb); return -1; }
    Py_DECREF(fb);
    return 1;
}

/* The next message of a batch body (as brokerd.message.parse_batch_body reads it) at *pos, its properties built
 * (s->flag, s->body, s->blen, s->pn, s->size set); 0 ok, else WHY_* (Python answers or stores it). */
static int batch_entry(Lane *l, Send *s, const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int first) {
    Py_ssize_t at = *pos;
    if (at + 22 > n) return WHY_BATCH;
    int32_t size = be32(p + at), flag = be32(p + at + 12), blen = be32(p + at + 16);
    if (size < 22 || size > n - at || blen < 0 || blen > size - 22) return WHY_BATCH;
    Py_ssize_t bpos = at + 20;
    int plen = (int16_t)(p[bpos + blen] << 8 | p[bpos + blen + 1]);
    if (plen < 0 || bpos + blen + 2 + plen != at + size) return WHY_BATCH;
    const unsigned char *raw = p + bpos + blen + 2;
    if (!utf8_valid(raw, plen)) return WHY_PROPERTIES;  /* Python decodes it with replacement characters */
    s->np = parse_props((const char *)raw, plen, s->ps);
    int why = stored_props(l, s, 0, first);
    if (why) return why;
    s->flag = flag;
    s->body = (const char *)p + bpos;
    s->blen = blen;
    if (s->blen > l->max_body) return WHY_SIZE;  /* Python answers MESSAGE_ILLEGAL for the whole batch */
    s->size = HEADER_V4_SIZE + s->blen + PyBytes_GET_SIZE(PyTuple_GET_ITEM(s->entry, 0)) + 2 + s->pn;
    if (s->size + 8 > l->segment_size) return WHY_SIZE;
    *pos = at + size;
    return 0;
}

#define BATCH_PYTHON(reason) do { l->why = (reason); out_free(&ids); out_free(&uniqs); return 0; } while (0)

/* A batch (SEND_BATCH_MESSAGE, or batch=true): every message checked first (all or nothing, as the store's
 * batch append), then one record each with consecutive queue offsets and one store time, one answer. 1 taken,
 * 0 Python, 2 the segment is full, 3 a write failed, -1 a Python exception. */
static int lane_batch(Lane *l, Send *s, long long base, long long limit, const unsigned char *born_ip,
                      long long born_port, PyObject *out, PyObject *notes) {
    const unsigned char *p = (const unsigned char *)s->body;
    Py_ssize_t n = s->blen, pos = 0;
    long long need = 0;
    Out ids, uniqs;
    out_init(&ids); out_init(&uniqs);
    if (n == 0) BATCH_PYTHON(WHY_BATCH);
    while (pos < n) {
        int why = batch_entry(l, s, p, n, &pos, pos == 0);
        if (why) BATCH_PYTHON(why);
        need += s->size;
    }
    if (l->wrote + need + 8 > limit) { out_free(&ids); out_free(&uniqs); return 2; }
    PyObject *qkey = PyTuple_GET_ITEM(PyTuple_GET_ITEM(s->entry, 4), s->qid);
    PyObject *cur = PyDict_GetItemWithError(l->next_qoff, qkey);
    long long first = cur != NULL ? PyLong_AsLongLong(cur) : 0, qoff = first, ts = now_ms();
    int r = PyErr_Occurred() ? -1 : 0;
    for (pos = 0; r == 0 && pos < n; qoff++) {
        batch_entry(l, s, p, n, &pos, 0);  /* checked above */
        hash_index_keys(l, s);
        uint32_t crc;
        if ((r = stage_room(l, s->size, out)) != 0 || (r = crc_of(s->body, s->blen, &crc)) != 0) break;
        PyObject *nq = PyLong_FromLongLong(qoff + 1);
        if (nq == NULL || PyDict_SetItem(l->next_qoff, qkey, nq) < 0) { Py_XDECREF(nq); r = -1; break; }
        Py_DECREF(nq);
        long long phys = base + l->wrote;
        write_record(l, s, l->stage + l->stage_n, qoff, phys, ts, crc, born_ip, born_port);
        l->stage_n += s->size; l->wrote += s->size; l->msgs++; l->bytes += s->size; l->last_ts = ts;
        if (l->error == NULL) dispatch(l, s, qkey, qoff, phys, ts, notes);
        char id[32];
        offset_id(l, phys, id);
        if ((ids.n && OUT_LIT(&ids, ",")) || out_raw(&ids, id, 32) || (uniqs.n && OUT_LIT(&uniqs, ",")) ||
            out_raw(&uniqs, s->uniq->v, s->uniq->vn)) { r = -1; break; }
    }
    if (r == 0) {
        PyObject *fb = answer(l, s, first, ids.p, ids.n, uniqs.p, uniqs.n);
        if (fb == NULL || PyList_Append(out, fb) < 0) PyErr_Clear();  /* stored: the client times out, retries */
        Py_XDECREF(fb);
    }
    out_free(&ids); out_free(&uniqs);
    return r == 0 ? 1 : r;
}

/* lane_one for a parsed single send (s->entry set). */
static int lane_single(Lane *l, Send *s, long long base, long long limit, const unsigned char *born_ip,
                       long long born_port, PyObject *out, PyObject *notes) {
    int r;
    if (l->wrote + s->size + 8 > limit) return 2;
    if ((r = stage_room(l, s->size, out)) != 0) return r;
    hash_index_keys(l, s);
    PyObject *qkey = PyTuple_GET_ITEM(PyTuple_GET_ITEM(s->entry, 4), s->qid);
    PyObject *cur = PyDict_GetItemWithError(l->next_qoff, qkey);
    long long qoff = cur != NULL ? PyLong_AsLongLong(cur) : 0;
    uint32_t crc;
    if (PyErr_Occurred() || crc_of(s->body, s->blen, &crc)) return -1;
    PyObject *nq = PyLong_FromLongLong(qoff + 1);  /* the last step that can fail: nothing written before it */
    if (nq == NULL || PyDict_SetItem(l->next_qoff, qkey, nq) < 0) { Py_XDECREF(nq); return -1; }
    Py_DECREF(nq);
    long long ts = now_ms(), phys = base + l->wrote;
    write_record(l, s, l->stage + l->stage_n, qoff, phys, ts, crc, born_ip, born_port);
    l->stage_n += s->size;
    l->wrote += s->size;
    l->msgs++;
    l->bytes += s->size;
    l->last_ts = ts;
    if (l->error == NULL) dispatch(l, s, qkey, qoff, phys, ts, notes);
    char id[32];
    offset_id(l, phys, id);
    PyObject *fb = answer(l, s, qoff, id, 32, s->uniq->v, s->uniq->vn);
    if (fb == NULL || PyList_Append(out, fb) < 0) PyErr_Clear();  /* stored: the client times out, retries */
    Py_XDECREF(fb);
    return 1;
}

int lane_one(Lane *l, const unsigned char *b, Py_ssize_t total, long long base, long long limit,
             const unsigned char *born_ip, long long born_port, PyObject *out, PyObject *notes) {
    if (l->busy != NULL) return refuse(l, b, total, out);
    Send s;
    s.entry = s.topic_obj = NULL;
    int r = parse_send(l, b, total, &s);
    if (r == 1)
        r = s.batch ? lane_batch(l, &s, base, limit, born_ip, born_port, out, notes)
                    : lane_single(l, &s, base, limit, born_ip, born_port, out, notes);
    Py_XDECREF(s.entry);
    Py_XDECREF(s.topic_obj);
    return r;
}
