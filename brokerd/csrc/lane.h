/* The send lane's state (lane.c: the Python type; lane_send.c: one send from frame to answer). */
#ifndef BROKERD_LANE_H
#define BROKERD_LANE_H
#include "send.h"

#define HEADER_V4_SIZE 88
#define MAX_PROPS 32767
#define SCRATCH (64 * 1024)

typedef struct {
    PyObject_HEAD
    PyObject *topics;       /* dict: topic str -> (prefix bytes, magic, write_qnums, read_qnums, qkeys tuple, cq_puts tuple) */
    PyObject *next_qoff;    /* the store's {(topic, qid): next queue offset} */
    PyObject *listeners;    /* the store's dispatch listeners (only: are there any) */
    PyObject *index_put;    /* callable (topic, keys, phys, ts) or None */
    char cluster[256]; Py_ssize_t cluster_n;
    char id_prefix[16];
    char region[256]; Py_ssize_t region_n;  /* JSON-encoded value, quotes included */
    int trace_on;
    int sync;               /* SYNC_FLUSH store: a WAIT=false message is answered before the flush (Python) */
    unsigned char store_ip[4];
    int32_t store_port;
    long long max_body;
    long long segment_size;
    uint64_t rng;
    /* results of the last run */
    long long wrote, msgs, bytes, last_ts, dispatched_end;
    Py_ssize_t pos;         /* position after the last frame the last run handled */
    PyObject *error;        /* the exception a consume-queue / index put raised (dispatch stopped) */
    /* one-entry topic cache */
    char last_topic[256]; Py_ssize_t last_topic_n; PyObject *last_entry; PyObject *last_topic_obj;
    char scratch[SCRATCH];
    char props[SCRATCH];
} Lane;

/* One common-case send, parsed: what the record, the dispatch and the answer need. */
typedef struct {
    Hdr h;
    long long qid, sys_flag, born_ts, flag, reconsume;
    PyObject *entry;     /* borrowed: the topic's lane entry */
    Prop ps[MAX_PROPS_N];
    int np;
    const Prop *uniq, *tags, *keys;
    Py_ssize_t pn;       /* length of the stored properties in Lane.props */
    const char *body;
    Py_ssize_t blen;
    long long size;      /* the stored record */
} Send;

enum { STOP_END = 0, STOP_FRAME = 1, STOP_ROLL = 2, STOP_ERROR = 3 };

/* The frame of `total` bytes at b (its length field included) as a common-case send: 1 taken, 0 not (Python
 * handles it), 2 the segment is full (Python rolls), -1 a Python exception. On 1 its record, queue offset,
 * dispatch and answer are done. */
int lane_one(Lane *l, const unsigned char *b, Py_ssize_t total, unsigned char *mm, long long base, long long limit,
             const unsigned char *born_ip, long long born_port, PyObject *out, PyObject *notes);
void lane_clear_cache(Lane *l);

#endif
