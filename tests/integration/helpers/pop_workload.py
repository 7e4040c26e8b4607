"""POP consumers that keep going through a broker restart or a failover, and the checks of what they saw: every
message delivered, none delivered again after its ACK was answered SUCCESS.

The check uses no clock. Every event of every consumer takes the next number of one sequence (the consumers are
tasks of one event loop): a POP request when it is sent, an ACK answer when it arrives. A message whose ack was
answered SUCCESS (at sequence ``a``) was delivered again when

* a POP request sent after ``a`` brought it back (the broker had applied the ack before it read that request), or
* any delivery of it carries a later delivery attempt (``reconsumeTimes``) than the acknowledged one: a second
  delivery after a revive, which the broker may only make once the acknowledged checkpoint is gone — an ack answered
  SUCCESS says it was not — whenever the POP that brought it was sent.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from brokerd.message import POP_CK, MessageExt
from brokerd.remoting import RemotingClient
from tests.pop_client import PopClient


@dataclass(frozen=True)
class Delivery:
    body: bytes
    handle: str  # the POP_CK receipt handle
    sent: int  # sequence number of the POP request that brought it
    reconsume: int  # its delivery attempt


@dataclass(frozen=True)
class AckOk:
    handle: str
    answered: int  # sequence number of the SUCCESS answer
    reconsume: int  # the acknowledged delivery's attempt


@dataclass
class Seen:
    deliveries: list[Delivery] = field(default_factory=list)
    acked_ok: dict[bytes, AckOk] = field(default_factory=dict)  # body -> its first ack answered SUCCESS
    errors: int = 0
    codes: collections.Counter[str] = field(default_factory=collections.Counter)  # answers seen, for diagnostics
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def delivered(self, body: bytes, handle: str, sent: int, reconsume: int) -> None:
        self.deliveries.append(Delivery(body, handle, sent, reconsume))

    def ack_answered(self, body: bytes, handle: str, reconsume: int) -> None:
        if body not in self.acked_ok:
            self.acked_ok[body] = AckOk(handle, next(self.seq), reconsume)

    def acked_then_delivered(self) -> list[tuple[Delivery, AckOk]]:
        out = []
        for d in self.deliveries:
            ok = self.acked_ok.get(d.body)
            if ok is not None and (d.sent > ok.answered or d.reconsume > ok.reconsume):
                out.append((d, ok))
        return out

    def missing(self, bodies: list[bytes]) -> list[bytes]:
        got = {d.body for d in self.deliveries}
        return [b for b in bodies if b not in got]


async def consume(addr_of: Callable[[], Awaitable[str | None]], group: str, topic: str, want: set[bytes], seen: Seen,
                  stop: asyncio.Event, *, invisible: int = 3000, seed: int = 0, batch: bool = False,
                  finished: Callable[[str], Awaitable[bool]] | None = None) -> None:  # fmt: skip
    """Pop and ack until every body of ``want`` is acknowledged, or — once every one was delivered and a pop finds
    nothing — ``finished(addr)`` says the group's offsets reached the end (an ack applied while its answer was lost
    to the crash counts), or ``stop``; failures are retried against the address ``addr_of`` names then."""
    rng = random.Random(seed)
    cli: RemotingClient | None = None
    addr = None
    while not stop.is_set() and not want.issubset(seen.acked_ok):
        try:
            new = await addr_of()
            if new is None:
                await asyncio.sleep(0.2)  # sleep-ok: no master routed yet (a failover): ask again shortly
                continue
            if new != addr or cli is None:
                if cli is not None:
                    await cli.close()
                addr, cli = new, RemotingClient()
            c = PopClient(addr, group, client=cli)
            sent = next(seen.seq)
            got = await c.pop(topic, 8, invisible=invisible, poll_ms=1000)
            seen.codes[f"pop {got.code} {got.remark}"[:80]] += 1
            if got.code == 210 and finished is not None and not seen.missing(list(want)) and await finished(addr):
                break
            if got.code not in (0, 210):
                seen.errors += 1
                await asyncio.sleep(0.1)  # sleep-ok: the broker answered busy / not master: retry shortly
                continue
            for m in got.msgs:
                seen.delivered(m.body, m.properties[POP_CK], sent, m.reconsume_times)
            keep = [m for m in got.msgs if rng.random() > 0.1]  # some are never acked: they come back
            if batch and keep:
                r = await c.batch_ack(keep, topic)
                if r.code == 0:
                    for m in keep:
                        seen.ack_answered(m.body, m.properties[POP_CK], m.reconsume_times)
                continue
            answers = await asyncio.gather(*(_ack(c, m, topic, seen) for m in keep), return_exceptions=True)
            failed = next((a for a in answers if isinstance(a, BaseException)), None)  # in flight at once, as
            if failed is not None:  # clients send them; the answered ones are recorded as they come
                raise failed
        except Exception as e:  # noqa: BLE001 - the broker died or moved: reconnect and go on
            seen.errors += 1
            seen.codes[type(e).__name__] += 1
            if cli is not None:
                await cli.close()
            cli = None
            await asyncio.sleep(0.2)  # sleep-ok: the broker is restarting / failing over: retry shortly
    if cli is not None:
        await cli.close()


async def _ack(c: PopClient, m: MessageExt, topic: str, seen: Seen) -> None:
    r = await c.ack(m, topic)
    if r.code == 0:  # recorded at once: a POP another consumer sends from now on is after this answer
        seen.ack_answered(m.body, m.properties[POP_CK], m.reconsume_times)
    seen.codes[f"ack {r.code} {r.remark}"[:80]] += 1
