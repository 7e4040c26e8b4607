"""Revive: what was popped and not acknowledged comes back once its invisible time passed.

A normal checkpoint's unresolved offsets are read back and put into the group's POP retry topic with
``reconsumeTimes + 1`` (queue 0, created with one queue when missing), or into ``%DLQ%group`` once the message
was delivered ``retryMaxTimes + 1`` times (the subscription group's ``retryMaxTimes``, 16 by default). A FIFO
queue needs no copy: its next pop hands the same messages out again in order; a FIFO message at its last attempt
goes to the DLQ so the queue moves on. Each batch is one bracketed run (``brokerd.logbatch``): its BEGIN names the
offsets it resolves (and carries the digest of each delivery), so a crash or a failover in the middle re-puts
exactly the missing deliveries (``revive_log``); the copies carry nothing of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from brokerd.logbatch import MAX_BATCH_BYTES
from brokerd.message import (
    DLQ_ORIGIN_MESSAGE_ID,
    DLQ_ORIGIN_TOPIC,
    FIRST_POP_TIME,
    POP_CK,
    RETRY_TOPIC,
    TAGS,
    UNIQ_KEY,
    MessageExt,
    MessageInner,
    decode_record,
    tags_code_of,
)
from brokerd.metadata.names import RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from brokerd.metadata.topic import PERM_READ, PERM_WRITE
from brokerd.pop.core import PopCore
from brokerd.pop.extra_info import normal_topic, pop_retry_topic
from brokerd.pop.records import BatchBegin, CkKey, Item

ITEMS_PER_RUN = 4096  # offsets one timer run revives before yielding to the loop
BATCH_DELIVERIES = 512
RETRY_AFTER_MS = 1000  # a revive the store refused is tried again this much later
_BATCH_BUDGET = MAX_BATCH_BYTES // 2


@dataclass(slots=True)
class _Batch:
    deliver: list[Item] = field(default_factory=list)
    drop: list[Item] = field(default_factory=list)
    msgs: list[MessageInner] = field(default_factory=list)
    size: int = 0


class Reviver:
    def __init__(self, core: PopCore) -> None:
        self.core = core

    def run(self, now: int) -> bool:
        """Revive what is due at ``now``; False when work is left for another run (the budget ran out)."""
        self.core.flush()  # the acks applied so far are written before the batches that follow them
        st = self.core.state
        budget = ITEMS_PER_RUN
        keys = st.due(now)
        batch, in_batch, failed = _Batch(), list[CkKey](), list[CkKey]()
        for i, key in enumerate(keys):
            if budget <= 0:
                for rest in keys[i:]:
                    st.reschedule(rest, now)
                break
            cs = st.cks.get(key)
            if cs is None:
                continue
            items = st.expired_items(key, now)
            budget -= len(items)
            in_batch.append(key)
            ok = self._order(key, items, batch) if cs.ck.order else all([self._add(it, batch, None) for it in items])
            if not ok:
                failed.append(key)
            if batch.size >= _BATCH_BUDGET or len(batch.msgs) >= BATCH_DELIVERIES:
                if not self._flush(batch):
                    failed.extend(in_batch)
                batch, in_batch = _Batch(), []
        if not self._flush(batch):
            failed.extend(in_batch)
        for key in failed:
            st.reschedule(key, now + RETRY_AFTER_MS)
        self.core.changed()
        return budget > 0

    def _max_times(self, group: str) -> int:
        sg = self.core.broker.meta.subscriptions.find(group)
        return sg.retry_max_times if sg is not None else self.core.broker.cfg.max_reconsume_times_default

    def _order(self, key: CkKey, items: list[Item], batch: _Batch) -> bool:
        """FIFO: a message past its last attempt goes to the DLQ; the others wait for the queue's next pop."""
        st = self.core.state
        q = (key[0], key[1], key[2])
        limit = self._max_times(key[0])
        ok = all([self._add(it, batch, True) for it in items if st.delivered_count(q, it[5]) - 1 >= limit])
        if not st.blocked(q, self.core.now()):
            self.core.unblocked(q)
        return ok

    def _add(self, item: Item, batch: _Batch, dlq: bool | None) -> bool:
        """Add ``item``'s delivery (or drop) to ``batch``; False when it cannot be revived now."""
        group, topic, qid, _, pop_time, offset = item
        ext = self._message(topic, qid, offset)
        if ext is None:
            batch.drop.append(item)
            return True
        to_dlq = dlq if dlq is not None else ext.reconsume_times >= self._max_times(group)
        msg = self._revived(group, topic, ext, pop_time, to_dlq)
        if msg is None:
            return False
        batch.deliver.append(item)
        batch.msgs.append(msg)
        batch.size += len(msg.body) + 512
        return True

    def _message(self, topic: str, qid: int, offset: int) -> MessageExt | None:
        e = self.core.log.local.entry(topic, qid, offset)
        if e is None:
            return None
        raw = self.core.broker.store.look_message_by_offset_and_size(e.phys, e.size)  # or from the tier
        if raw is None:
            return None
        ext, _ = decode_record(raw)
        return ext

    def _revived(self, group: str, topic: str, ext: MessageExt, pop_time: int, dlq: bool) -> MessageInner | None:
        """The copy a revive puts (PopReviveService.reviveRetry; the DLQ as CONSUMER_SEND_MSG_BACK does)."""
        core = self.core
        normal = normal_topic(topic, group)
        if dlq:
            target = dlq_topic(group)
        elif topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            target = topic
        else:
            target = pop_retry_topic(topic, group, core.broker.cfg.enable_retry_topic_v2)
        try:
            core.broker.meta.topics.create_topic_in_send_back_method(target, 1, PERM_READ | PERM_WRITE, 0)
        except ValueError as e:  # a name the topic table refuses: the message stays in flight, retried later
            core.logger.warning("pop_revive_topic_refused", topic=target, error=str(e))
            return None
        props = {k: v for k, v in ext.properties.items() if k != POP_CK}
        if ext.reconsume_times == 0 or FIRST_POP_TIME not in props:
            props[FIRST_POP_TIME] = str(pop_time)
        if dlq:
            props.setdefault(RETRY_TOPIC, normal)
            props[DLQ_ORIGIN_TOPIC] = normal
            props[DLQ_ORIGIN_MESSAGE_ID] = props.get(UNIQ_KEY) or ext.msg_id
        return MessageInner(topic=target, queue_id=0, body=ext.body, flag=ext.flag, properties=props,
                            sys_flag=ext.sys_flag, born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                            store_host=core.host, reconsume_times=ext.reconsume_times + 1,
                            tags_code=tags_code_of(props.get(TAGS)))  # fmt: skip

    def _flush(self, batch: _Batch) -> bool:
        if not batch.deliver and not batch.drop:
            return True
        core = self.core
        res = core.log.append_batch(BatchBegin(tuple(batch.deliver), tuple(batch.drop)), batch.msgs)
        if not res.ok:
            core.logger.warning("pop_revive_refused", status=res.status.name, messages=len(batch.msgs))
            return False
        core.state.apply_resolve((*batch.drop, *batch.deliver))
        core.counters.dropped += len(batch.drop)
        for msg in batch.msgs:
            if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                core.counters.revived += 1
            else:
                core.counters.dead_lettered += 1
        return True
