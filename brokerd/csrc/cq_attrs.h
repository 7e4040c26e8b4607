/* The interned attribute names of a ConsumeQueue and of its files (brokerd/store/consume_queue.py) that the C
 * writers of consume-queue entries read: the send lane's (lane_cq.c, which defines them) and the batch append's
 * (store_batch.c). cq_intern_names() makes them once; 0, or -1 with an exception set. */
#ifndef BROKERD_CQ_ATTRS_H
#define BROKERD_CQ_ATTRS_H
#include "native.h"

extern PyObject *cq_files, *cq_base, *cq_size, *cq_reserved, *cq_mm, *cq_max_offset;
int cq_intern_names(void);

#endif
