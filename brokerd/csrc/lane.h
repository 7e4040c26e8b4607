/* What lane.c, lane_send.c and lane_topic.c share, and nothing else: the lane's state and the functions they
 * export. lane.c (the Python type SendLane) calls into lane_send.c (one send from frame to answer) and
 * lane_topic.c (the topic table); lane_send.c calls into lane_topic.c; never the other way. */
#ifndef BROKERD_LANE_H
#define BROKERD_LANE_H
#include "index_writer.h"
#include "send.h"

#define HEADER_V4_SIZE 88
#define MAX_PROPS 32767
#define SCRATCH (64 * 1024)
#define STAGE_MAX (1 << 20)  /* staged record bytes written at once (a larger record is staged alone) */
#define MAX_LEVELS 64

/* A topic's lane entry (a tuple, checked by lane_check_entry): (prefix bytes, magic, write_qnums, read_qnums,
 * qkeys tuple, cq_puts tuple, retry_max). cq_puts holds a callable per queue (the consume queue's put; for a queue
 * without a consume queue yet, a Python function that creates it as the store's dispatch does); retry_max is None,
 * or for a %RETRY% topic its group's retryMaxTimes (a send whose reconsumeTimes is over the max goes to the DLQ:
 * Python). */
#define ENTRY_SIZE 7

#define MAX_INDEX_KEYS 64
/* A record's key-index hashes (lane_index_keys): n keys, or n = -1 when the reference (put_keys) takes them (more
 * than MAX_INDEX_KEYS, or a key that is not valid UTF-8: Python hashes its replacement characters). */
typedef struct { int n; uint32_t h[MAX_INDEX_KEYS]; } IndexKeys;

typedef struct {
    PyObject_HEAD
    PyObject *topics;       /* dict: topic str -> its entry */
    /* callable(topic, default_topic or None, default_queue_nums, queue_id, batch) -> entry or None: the Python
     * send processor's decision for a topic not in `topics`, asked once per such send (lane_topic.c; never with ACL
     * on); the entry it returns is added to `topics`. It may clear `topics` (metadata hooks) while a run is in C.
     * NULL: not asked */
    PyObject *resolve;
    PyObject *next_qoff;    /* the store's {(topic, qid): next queue offset} */
    PyObject *listeners;    /* the store's dispatch listeners (only: are there any) */
    PyObject *index_put;    /* callable (topic, keys, phys, ts) or None: the key index's put (the reference) */
    /* callable () -> the store's current IndexFile or None (lane_index.c writes into it), or NULL: index_put only;
     * ix: that file while a run writes into it (file NULL otherwise), and the last topic's hash seed */
    PyObject *index_current;
    PyObject *cq_put;       /* ConsumeQueue.put (the function): a queue's put bound to it is done by lane_cq.c */
    IndexWriter ix;
    char cluster[256]; Py_ssize_t cluster_n;
    char id_prefix[16];
    char uniq_prefix[20];   /* UNIQ_KEYs the lane generates: this prefix + ms since month start + counter */
    char gen_uniq[32];      /* the UNIQ_KEY generated for the current send */
    int why;                /* why the last frame the lane stopped at is left to Python (a WHY_* value) */
    const char *busy; Py_ssize_t busy_n;  /* overload: every send of this run is refused with this remark */
    long long refused;      /* sends the last run refused */
    /* delay levels: the schedule topic's lane entry (as in `topics`; set whenever the topic exists) and name, the
     * delay of each level (ms) */
    PyObject *delay_entry, *delay_topic;
    PyObject *half_entry, *half_topic;  /* transactional half messages: RMQ_SYS_TRANS_HALF_TOPIC's entry and name */
    long long delay_ms[MAX_LEVELS]; int n_levels;
    char region[256]; Py_ssize_t region_n;  /* JSON-encoded value, quotes included */
    int trace_on;
    int sync;               /* SYNC_FLUSH store: a WAIT=false message is answered before the flush (Python) */
    unsigned char store_ip[4];
    int32_t store_port;
    long long max_body;
    long long segment_size;
    uint64_t rng;
    /* records not yet written to the segment: they start at segment position stage_at; their answers start at
     * index stage_out of the run's answer list */
    unsigned char *stage; Py_ssize_t stage_cap, stage_n, stage_out; long long stage_at, stage_msgs, stage_bytes;
    int fd;                 /* the active segment of the current run, starting at log offset `base` */
    long long base;
    /* results of the last run */
    long long wrote, msgs, bytes, last_ts, dispatched_end;
    Py_ssize_t pos;         /* position after the last frame the last run handled */
    PyObject *error;        /* the exception a consume-queue / index put raised (dispatch stopped) */
    PyObject *write_error;  /* the OSError of a failed segment write (the run stopped) */
    /* ACL (acl.c): NULL = off; else {access key str: (secret bytes, sha1 of the key's inner pad, of its outer
     * pad (brokerd.acl.sign.hmac_pads), set of topic str it may PUB to)}; sends it cannot take, by reason; the
     * secret whose pads acl_pads holds (libcrypto build: two SHA_CTX) */
    PyObject *acl, *acl_key;
    unsigned char acl_pads[512];
    long long acl_miss[4];
    HCache hc;              /* the JSON headers of recent sends (hcache.c) */
    /* one-entry topic cache */
    char last_topic[256]; Py_ssize_t last_topic_n; PyObject *last_entry; PyObject *last_topic_obj;
    char scratch[SCRATCH];
    char props[SCRATCH];
} Lane;

/* One common-case send, parsed: what the record, the dispatch and the answer need. */
typedef struct {
    const Hdr *h;        /* the request header's parse: &own, or the header cache's (hcache.c) */
    Hdr own;
    long long qid, sys_flag, born_ts, flag, reconsume;
    long long default_qnums;  /* defaultTopicQueueNums (a new topic's queues) */
    long long max_reconsume;  /* maxReconsumeTimes (used when has_max: present and header version >= 121) */
    int has_max;
    /* owned (a callback may clear the lane's table and cache during the send): the lane entry of the topic stored
     * under (the schedule / half topic's when re-targeted) and that topic's name (the key index's topic) */
    PyObject *entry;
    PyObject *topic_obj;
    const char *topic_p; Py_ssize_t topic_n;  /* the request's topic (UTF-8, unescaped) */
    long long answer_qid; /* the queue id the answer names (the request's, also when delayed) */
    int level;           /* delay level (> 0: stored in the schedule topic's queue level - 1) */
    int batch;           /* a batch request (its body holds the messages) */
    int half;            /* a transactional (prepared) send: stored as a half message */
    Prop ps[MAX_PROPS_N + 1];  /* + a generated UNIQ_KEY */
    int np;
    const Prop *uniq, *tags, *keys;
    IndexKeys ik;        /* the key index hashes (set before the record is written) */
    Py_ssize_t pn;       /* length of the stored properties in Lane.props */
    const char *body;
    Py_ssize_t blen;
    long long size;      /* the stored record */
} Send;

/* Why a frame is left to Python (Lane.why; names in brokerd/processors/send_lane.py FALLBACK_REASONS, same order). */
enum { WHY_NONE, WHY_HEADER, WHY_NOT_SEND, WHY_ONEWAY, WHY_BATCH, WHY_FIELDS, WHY_TRANSACTION, WHY_TOPIC, WHY_QUEUE,
       WHY_PROPERTIES, WHY_DELAY, WHY_WAIT_FALSE, WHY_SIZE, WHY_ACL, WHY_TIMER };

#define PYTHON(reason) do { l->why = (reason); return 0; } while (0)  /* leave the frame to Python, for `reason` */

enum { STOP_END = 0, STOP_FRAME = 1, STOP_ROLL = 2, STOP_ERROR = 3, STOP_WRITE_FAILED = 4 };

/* The frame of `total` bytes at b (its length field included) as a common-case send: 1 taken, 0 not (Python
 * handles it), 2 the segment is full (Python rolls), 3 writing staged records failed (see lane_write), -1 a
 * Python exception. On 1 its record is staged and its queue offset, dispatch and answer are done. */
int lane_one(Lane *l, const unsigned char *b, Py_ssize_t total, long long base, long long limit,
             const unsigned char *born_ip, long long born_port, PyObject *out, PyObject *notes);
/* Write the staged records to the segment (l->fd) with pwrite, their 8-byte size/magic header last, so a write
 * torn by a killed process leaves a zero header that recovery stops at. 0 ok; -1: nothing of the stage counts
 * as stored: the run's results are back at its start, its answers are removed from `out`, l->write_error is set
 * (consume-queue entries already put for it point past the log end until recovery; the store stops writes). */
int lane_write(Lane *l, PyObject *out);

/* lane_topic.c: the one-entry topic cache dropped (the table changed); an entry checked (0, else -1 and a
 * TypeError); the send's topic entry into s->entry / s->topic_obj (new references; a topic not in the table is
 * resolved by the l->resolve callback: the Python processor's decision), the queue id, a retry topic's DLQ check:
 * 1 ok, 0 Python (the caller sets l->why for the topic and the queue, lane_retry_stays sets it), -1 a Python
 * exception. */
void lane_clear_cache(Lane *l);
int lane_check_entry(PyObject *entry);
int lane_topic_entry(Lane *l, Send *s);
int lane_choose_queue(Lane *l, Send *s);
int lane_retry_stays(Lane *l, Send *s);
/* ACL on (l->acl set): 1 the send is signed by an account admitted for its topic (s->entry found), 0 Python
 * decides (l->acl_miss counted), -1 a Python exception. */
enum { ACL_NO_KEY = 0, ACL_NOT_ADMITTED = 1, ACL_BAD_SIG = 2, ACL_UNSUPPORTED = 3 };
int lane_acl_ok(Lane *l, const Send *s);

/* lane_cq.c: `put`(qoff, phys, size, tags), a topic entry's consume-queue put, done (0) or raised (-1). */
int lane_cq_put(Lane *l, PyObject *put, long long qoff, long long phys, long long size, long long tags);
/* lane_index.c: the key index hashes of a record (its KEYS and UNIQ_KEY) under `topic` into ik, their slots fetched
 * into the cache when a run holds the index file (called before the record is written: the slot's cache miss
 * overlaps that work); the record's entries put (0 ok, -1 a Python exception); the run's index file written back
 * and released (at the end of each run). */
void lane_index_keys(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, IndexKeys *ik);
int lane_index_put(Lane *l, PyObject *topic, const Prop *keys, const Prop *uniq, const IndexKeys *ik,
                   long long phys, long long ts);
void lane_index_settle(Lane *l);

#endif
