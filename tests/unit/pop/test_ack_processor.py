"""ACK_MESSAGE through its processor: the common ACK (every client's shape, applied without the general path's
objects) answers and changes exactly what the general path does, for handles in flight, repeated, stale,
malformed, of an unknown topic or queue, and while the broker does not serve POP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from brokerd.pop.ack_processor import AckMessageProcessor
from brokerd.pop.popping import PopRequest
from brokerd.remoting.codec import FrameDecoder, encode_parts
from brokerd.remoting.command import HeaderError, RemotingCommand, request
from tests.unit.pop.conftest import HarnessFactory, PopHarness

G, T = "G", "T"


class Conn:
    """What the processor and the outbox use of a connection: the written answers."""

    def __init__(self) -> None:
        self.data = b""
        self.attrs: dict[str, Any] = {}
        self.remote_addr = ("127.0.0.1", 40000)  # port-ok: a label, nothing binds it

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        self.data += b"".join(bytes(f) for f in frames)


def ack_cmd(opaque: int, qid: str, offset: str, extra: str, group: str = G, topic: str = T) -> RemotingCommand:
    cmd = request(200051, {"consumerGroup": group, "topic": topic, "queueId": qid, "offset": offset,
                           "extraInfo": extra})
    cmd.opaque = opaque
    return cmd


def requests(h: PopHarness) -> list[RemotingCommand]:
    out = h.svc.pop(PopRequest(G, T, 0, 4, 60_000, False))
    start, pt = int(out.info.start[0].split()[2]), out.pop_time
    good = f"{start} {pt} 60000 0 0 broker-a 0"
    cases = [("0", str(start), f"{good} {start}"),  # in flight: acknowledged
             ("0", str(start), f"{good} {start}"),  # the same again
             ("0", str(start + 1), f"{start} {pt + 1} 60000 0 0 broker-a 0 {start + 1}"),  # stale: another pop time
             ("0", str(start + 2), f"{start} {pt}"),  # malformed: too few fields
             ("0", str(start + 2), f"{start} {pt} 60000 0 x broker-a 0"),  # malformed: an unknown topic mark
             ("0", "x", good),  # a header field that is not a number
             ("7", str(start + 2), good),  # a queue the topic does not have
             ("0", str(start + 99), good),  # an offset never popped
             ("0", str(start + 3), f"{start} {pt} 60000 999 0 broker-a 0 {start + 3}"),  # a FIFO handle, not FIFO
             ("0", str(start + 2), good)]  # in flight: acknowledged
    cmds = [ack_cmd(i + 1, *c) for i, c in enumerate(cases)]
    cmds.append(ack_cmd(99, "0", str(start + 1), good, topic="Nope"))
    return cmds


def answers(conn: Conn) -> list[tuple[int, int, str | None]]:
    return sorted((r.opaque, r.code, r.remark) for r in FrameDecoder().feed(conn.data))


async def run(h: PopHarness, general_only: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, int]:
    h.topic(T, 1)
    h.send(T, 8, 0)
    h.svc.activate()
    proc = AckMessageProcessor(h.broker, h.svc)  # type: ignore[arg-type]
    if general_only:  # every ACK through the general path's checks and ``ack_many``
        monkeypatch.setattr(h.svc, "ack_one", lambda *args: False)
    general: list[object] = []  # the ACKs that reached the general path's ``PopService.ack``
    service_ack = h.svc.ack

    def counted(*args: Any) -> Any:
        general.append(args)
        return service_ack(*args)

    monkeypatch.setattr(h.svc, "ack", counted)
    conn = Conn()
    for cmd in requests(h):
        try:
            res = proc.ack(conn, cmd)  # type: ignore[arg-type]
        except HeaderError as e:  # the connection answers it (its code, the error as remark)
            res = cmd.response(e.code, str(e))
        if isinstance(res, RemotingCommand):
            conn.write_frames(_encoded(res))
    h.svc.core.flush()
    h.broker.master = False  # not serving: refused by both paths
    res = proc.ack(conn, ack_cmd(100, "0", "5", "0 1 60000 0 0 broker-a 0 5"))  # type: ignore[arg-type]
    assert isinstance(res, RemotingCommand)
    conn.write_frames(_encoded(res))
    monkeypatch.undo()
    return answers(conn), h.svc.state.snapshot(), len(general)


def _encoded(resp: RemotingCommand) -> list[bytes | memoryview]:
    head, body = encode_parts(resp)
    return [head, body] if body else [head]


async def test_the_common_ack_answers_and_changes_what_the_general_path_does(
        harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # fmt: skip
    fast_answers, fast_state, fast_general = await run(await harness(tmp_path / "fast"), False, monkeypatch)
    general_answers, general_state, all_general = await run(await harness(tmp_path / "general"), True, monkeypatch)
    assert fast_answers == general_answers and fast_state == general_state
    assert fast_general == all_general - 2  # the two ACKs of messages in flight took the common path
    codes = {opaque: code for opaque, code, _ in fast_answers}
    assert codes[1] == codes[10] == 0 and len(fast_answers) == 12  # every request answered
    assert codes[3] != 0 and codes[4] != 0 and codes[99] != 0 and codes[100] != 0
