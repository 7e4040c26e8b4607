"""Delay-level messages (the 18 standard levels 1s..2h): park in SCHEDULE_TOPIC_XXXX, re-deliver when due."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.metadata.names import RMQ_SYS_SCHEDULE_TOPIC
from brokerd.store.message_store import GetMessageStatus, PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

SCHEDULE_TOPIC = RMQ_SYS_SCHEDULE_TOPIC


def now_ms() -> int:
    return int(time.time() * 1000)


class ScheduleService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.levels = broker.cfg.delay_levels_ms
        self.log = broker.log.bind(component="schedule")
        self._wake = [asyncio.Event() for _ in self.levels]
        # per level: its task found no message to wait for; else it sleeps until its head message is due, which
        # a newly parked message never precedes (one delay per level: due times grow with the queue offset)
        self._idle = [True for _ in self.levels]
        self._tasks: list[asyncio.Task[None]] = []

    def apply_delay(self, msg: MessageInner) -> None:
        """Re-target a message carrying DELAY > 0 to SCHEDULE_TOPIC_XXXX (spec 3.8)."""
        raw = msg.properties.get(m.DELAY)
        if not raw:
            return
        try:
            level = int(raw)
        except ValueError:
            return
        txn = msg.sys_flag & m.TRANSACTION_TYPE_MASK
        if level <= 0 or txn in (m.TRANSACTION_PREPARED_TYPE, m.TRANSACTION_ROLLBACK_TYPE):
            return
        level = min(level, len(self.levels))
        msg.properties[m.DELAY] = str(level)
        msg.properties[m.REAL_TOPIC] = msg.topic
        msg.properties[m.REAL_QID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        msg.store_timestamp = now_ms()
        msg.tags_code = msg.store_timestamp + self.levels[level - 1]

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """A message parked in a level's queue wakes that level's task only when it waits for none (a busy level
        is not woken per send)."""
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self._wake) and self._idle[queue_id]:
            self._wake[queue_id].set()

    def start(self) -> None:
        self.broker.store.add_dispatch_listener(self.on_dispatch)
        self._tasks = [asyncio.create_task(self._run_level(lv)) for lv in range(1, len(self.levels) + 1)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _run_level(self, level: int) -> None:
        wake = self._wake[level - 1]
        while True:
            try:
                wait_s = await self._deliver_due(level)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the level running; retry shortly
                self.log.warning("schedule_deliver_failed", level=level, error=repr(e))
                wait_s = 1.0
            wake.clear()
            if wait_s > 0:
                try:
                    await asyncio.wait_for(wake.wait(), wait_s)
                except TimeoutError:
                    pass

    async def _deliver_due(self, level: int) -> float:
        """Deliver every due message of a level; returns how long to wait before looking again."""
        b = self.broker
        qid = level - 1
        delay = self.levels[qid]
        while True:
            if not b.is_master():
                return 1.0
            off = max(b.meta.delay_offsets.get(level), b.store.min_offset_in_queue(SCHEDULE_TOPIC, qid))
            self._idle[qid] = True  # a message parked from here on wakes the task
            r = b.store.get_message(SCHEDULE_TOPIC, qid, off, 32)
            if r.status != GetMessageStatus.FOUND:
                if r.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                    b.meta.delay_offsets.update(level, r.next_begin_offset)
                    continue
                return 5.0
            for buf in r.buffers:
                ext, _ = m.decode_record(buf)
                due = ext.store_timestamp + delay
                wait_ms = due - now_ms()
                if wait_ms > 0:
                    self._idle[qid] = False  # it sleeps until this one is due
                    return wait_ms / 1000.0
                if not await self._redeliver(ext):
                    return 1.0
                off = ext.queue_offset + 1
                b.meta.delay_offsets.update(level, off)
            await asyncio.sleep(0)  # a put may not yield: let sends and reads in between batches of due messages

    async def _redeliver(self, ext: m.MessageExt) -> bool:
        props = dict(ext.properties)
        topic = props.get(m.REAL_TOPIC)
        qid_raw = props.get(m.REAL_QID, "0")
        if not topic:
            self.log.warning("schedule_message_without_real_topic", offset=ext.commit_log_offset)
            return True
        props.pop(m.DELAY, None)
        msg = ext.to_inner(topic, int(qid_raw) if qid_raw.isdigit() else 0, props, ext.sys_flag)
        res = await self.broker.store.put_message(msg)
        if res.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
            self.log.warning("schedule_redeliver_failed", topic=topic, status=res.status.name)
            return False
        return True



