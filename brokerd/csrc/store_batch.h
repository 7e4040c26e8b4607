/* What store_batch.c (the BatchAppender type and its runs) and store_batch_prep.c (reading and checking one message
 * of a batch) share, and nothing else: store_batch.c calls into store_batch_prep.c, never the other way. */
#ifndef BROKERD_STORE_BATCH_H
#define BROKERD_STORE_BATCH_H
#include "index_writer.h"

#include <limits.h>

#define REC_HEADER 88
#define MAX_PROPS_LEN 32767
#define KEYS_CAP 64
#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu

enum { F_TOPIC, F_QID, F_BODY, F_FLAG, F_PROPS, F_SYSFLAG, F_BORN_TS, F_BORN_HOST, F_RECONSUME, F_PREP, F_TAGS,
       F_STORE_TS, N_FIELDS };

/* Why a batch is left to Python (batch_append.py FALLBACK_REASONS, same order). */
enum { WHY_TYPE, WHY_FIELDS, WHY_BODY, WHY_TOPIC, WHY_PROPS, WHY_HOST, WHY_DELAY };
/* A refused batch: the store's status (batch_append.py REFUSALS). */
enum { BAD_ILLEGAL = 1, BAD_PROPS_SIZE = 2 };

typedef struct {
    PyObject *topic, *body, *qid_obj;  /* new references */
    const char *tp; Py_ssize_t tn;
    Py_ssize_t props_at, props_n, keys_at, keys_n, uniq_at, uniq_n;  /* in the arena; *_at -1: absent */
    long long qid, flag, sysflag, born_ts, reconsume, prep, store_ts, tags, size, qoff, phys;
    unsigned char born_ip[4];
    long long born_port;
    int qslot;      /* its queue in the run's table; -1: no consume-queue entry (a prepared / rolled-back half) */
    int nh;         /* key hashes at h_at: 0 none (or no index), -1 the reference hashes them */
    Py_ssize_t h_at;
} Rec;

typedef struct {
    PyObject *key;          /* (topic, queue_id), new reference */
    const char *tp; Py_ssize_t tn; Py_hash_t hash; long long qid;
    long long next, committed;
    int dirty;              /* committed is ahead of next_qoff */
    PyObject *cq;           /* the ConsumeQueue (new reference) once dispatched to */
    int held; Py_buffer buf; long long base, fsize, reserved, max_offset; int max_dirty;  /* its last file */
    int noted; long long note_qoff, note_tags, note_end;
} Queue;

typedef struct {
    PyObject_HEAD
    Py_ssize_t off[N_FIELDS];  /* the MessageInner slots' offsets */
    PyObject *msg_type, *host_fn, *cq_put, *get_or_create, *index_current, *index_put;
    unsigned char store_ip[4];
    long long store_port, max_body, segment_size;
    char id_prefix[16];
    PyObject *sched;           /* the schedule topic's name */
    long long levels[64]; int n_levels;
    IndexWriter ix;
    /* the run's work space, reused */
    Rec *recs; Py_ssize_t recs_cap;
    char *arena; Py_ssize_t arena_n, arena_cap;
    uint32_t *hashes; Py_ssize_t hashes_n, hashes_cap;
    Queue *qs; Py_ssize_t qs_cap; int nq;
    int *qtab; int qtab_cap;
    unsigned char *stage; Py_ssize_t stage_cap;
} Appender;

/* *p (an array of *cap items of `item` bytes) grown to hold `need`: 0, -1 MemoryError. */
int batch_grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t item);
/* One message read and checked into r (nothing written; its properties encoded into the arena, its key hashes
 * into a->hashes): 0 ok, 1 refused (*why = BAD_*), 2 Python (*why = WHY_*), -1 an exception. */
int batch_prep_one(Appender *a, Rec *r, PyObject *msg, long long ts, int *why);

#endif
