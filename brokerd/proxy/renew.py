"""Auto-renewed receipts (DefaultReceiptHandleManager): a PushConsumer receives with ``auto_renew``; while it
consumes, the endpoint keeps the messages invisible (CHANGE_MESSAGE_INVISIBLETIME ahead of each handle's
expiry, 1 min, 3 min, ... up to ``renew_max_ms``, then the group's retry delay), and hands the newest handle to
its ack. A client that goes away gets its messages back soon (``invisible_ms_when_clear``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.receipt import ReceiptHandle, decode_handle

log = structlog.get_logger(component="grpc_proxy")

RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)  # RenewStrategyPolicy


@dataclass(slots=True)
class Renewing:
    client_id: str
    group: str
    topic: str
    msg_id: str
    handle: str
    reconsume_times: int
    since_ms: int
    renew_times: int = 0
    retries: int = 0


# (entry, new invisible ms) -> the new handle (ProxyError when the broker refused)
Change = Callable[[Renewing, int], Awaitable[str]]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RenewTable:
    def __init__(self, ahead_ms: int, max_ms: int, max_retries: int) -> None:
        self.ahead_ms = ahead_ms
        self.max_ms = max_ms
        self.max_retries = max_retries
        self.entries: dict[tuple[str, str, str], Renewing] = {}

    def add(self, e: Renewing) -> None:
        self.entries[(e.client_id, e.group, e.msg_id)] = e

    def take(self, client_id: str, group: str, msg_id: str, handle: str) -> str:
        """The newest handle of a message the client acks or changes (``handle`` when it is not renewed)."""
        e = self.entries.pop((client_id, group, msg_id), None)
        return e.handle if e is not None else handle

    def of_client(self, client_id: str) -> list[Renewing]:
        out = [e for k, e in self.entries.items() if k[0] == client_id]
        for e in out:
            self.entries.pop((e.client_id, e.group, e.msg_id), None)
        return out

    def due(self, now_ms: int) -> list[Renewing]:
        out = []
        for e in self.entries.values():
            try:
                h: ReceiptHandle = decode_handle(e.handle)
            except ValueError:
                continue
            if h.next_visible_time - now_ms <= self.ahead_ms:
                out.append(e)
        return out

    async def renew(self, e: Renewing, change: Change, retry_delay_ms: Callable[[int], int]) -> None:
        key = (e.client_id, e.group, e.msg_id)
        if self.entries.get(key) is not e:
            return
        if _now_ms() - e.since_ms >= self.max_ms:
            self.entries.pop(key, None)
            try:
                await change(e, retry_delay_ms(e.reconsume_times))
            except ProxyError as err:
                log.info("grpc_renew_stop_failed", msg_id=e.msg_id, error=err.message)
            return
        try:
            handle = await change(e, RENEW_STEPS_MS[min(e.renew_times, len(RENEW_STEPS_MS) - 1)])
        except ProxyError as err:
            if err.code in (Code.INVALID_RECEIPT_HANDLE, Code.BAD_REQUEST) or e.retries + 1 >= self.max_retries:
                self.entries.pop(key, None)
            else:
                e.retries += 1
            log.info("grpc_renew_failed", msg_id=e.msg_id, error=err.message)
            return
        if self.entries.get(key) is e:
            e.handle, e.retries = handle, 0
            e.renew_times += 1

    async def run(self, period_ms: int, change: Change, retry_delay_ms: Callable[[int], int]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)  # sleep-ok: the renewal scan's period
            for e in self.due(_now_ms()):
                await self.renew(e, change, retry_delay_ms)
