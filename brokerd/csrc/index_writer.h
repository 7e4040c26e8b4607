/* The key-index writer shared by the send lane (lane_send.c) and the store's batch append (store_batch.c),
 * implemented in lane_index.c: a run of records takes the store's current IndexFile once, writes the entries that
 * fit into its slot and entry views from C, and writes its count, begin and end back when the run ends;
 * IndexService.put_keys (brokerd/store/index.py) stays the reference and takes what does not fit. */
#ifndef BROKERD_INDEX_WRITER_H
#define BROKERD_INDEX_WRITER_H
#include "send.h"

typedef struct {
    PyObject *file;           /* the IndexFile a run writes into (NULL: none held) */
    Py_buffer sv, ev;         /* its slot and entry views, while held */
    long long slots, limit, count, begin_ts, begin_phy, end_ts, end_phy;
    int wrote;                /* entries written since it was taken */
    PyObject *seed_topic;     /* the topic whose hash seed is cached (a strong reference) */
    uint32_t seed;
} IndexWriter;

/* The key-index hashes of a record (its KEYS split on spaces, then UNIQ_KEY) under `topic` into h (at most cap):
 * their number, or -1 when the reference must take the record (more than cap keys, a key that is not valid UTF-8:
 * Python hashes its replacement characters). */
int ixw_hash(IndexWriter *w, PyObject *topic, const Prop *keys, const Prop *uniq, uint32_t *h, int cap);
/* The slots of those hashes fetched into the cache (when a file is held). */
void ixw_prefetch(const IndexWriter *w, const uint32_t *h, int n);
/* The record's entries: written into the held file (taken with current() when none is held), or by
 * put(topic, keys, phys, ts) (the reference) when n <= 0, no file, or they do not fit. 0 ok, -1 a Python
 * exception. */
int ixw_put(IndexWriter *w, PyObject *current, PyObject *put, PyObject *topic, const Prop *keys, const Prop *uniq,
            const uint32_t *h, int n, long long phys, long long ts);
/* The held file's count, begin and end written back to it, and its views released (at the end of every run). */
void ixw_settle(IndexWriter *w);

#endif
