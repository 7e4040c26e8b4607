"""Kill a writing store process with SIGKILL at random points; restart; nothing acknowledged is lost or corrupt.

Each round starts ``tests/integration/helpers/store_writer.py`` on the same store directory, lets it
acknowledge a random number of messages, SIGKILLs it, then recovers the store in this process and checks:
every acknowledged message is readable at its queue offset, with its offset msg id, UNIQ_KEY and body;
every record in the commit log verifies (magic, sizes, body CRC); every consume-queue entry points to
the record with its own topic, queue id and queue offset.

SIGKILL keeps the page cache, so with ASYNC_FLUSH nothing acknowledged is lost either (a power loss
could lose the unflushed tail; that is not what this test simulates). Set STORE_CRASH_SEED to replay.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uvloop

from brokerd.message import decode_offset_msg_id, decode_record, verify_record
from brokerd.store.message_store import MessageStore
from brokerd.store.results import GetMessageStatus
from tests.integration.helpers.store_writer import STORE_HOST, body_for, store_config

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 8

Acked = dict[tuple[str, int, int], tuple[str, str, int]]


class LineReader:
    """Read lines from a child's stdout with a deadline (never blocks past it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)
        self.buf = b""
        self.eof = False

    def lines(self, deadline: float) -> list[str]:
        """Lines available before ``deadline`` (at least one unless EOF or timeout)."""
        while not self.eof and b"\n" not in self.buf and time.monotonic() < deadline:
            if self.sel.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(self.fd, 65536)
                self.eof = not chunk
                self.buf += chunk
        *done, self.buf = self.buf.split(b"\n")
        return [d.decode() for d in done]

    def drain(self) -> list[str]:
        """After the child died: every complete line left in the pipe (a torn last line is dropped)."""
        out: list[str] = []
        deadline = time.monotonic() + 10
        while not self.eof and time.monotonic() < deadline:
            out += self.lines(deadline)
        return out + self.lines(deadline)


def record_ack(line: str, acked: Acked) -> None:
    kind, topic, qid, qoff, msg_id, uniq, size = line.split()
    assert kind == "ACK"
    key = (topic, int(qid), int(qoff))
    assert key not in acked, f"queue offset acknowledged twice: {key}"
    acked[key] = (msg_id, uniq, int(size))


def run_round(root: Path, flush: str, seed: int, target: int, acked: Acked) -> int:
    cmd = [sys.executable, "-m", "tests.integration.helpers.store_writer", str(root), flush, str(seed)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    reader = LineReader(proc)
    try:
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while "READY" not in lines:
            got = reader.lines(deadline)
            assert got or not reader.eof, "writer exited before READY"
            assert time.monotonic() < deadline, "writer did not start"
            lines += got
        count = 0
        deadline = time.monotonic() + 60
        while count < target and time.monotonic() < deadline and not reader.eof:
            for line in reader.lines(deadline):
                record_ack(line, acked)
                count += 1
        assert count >= target, f"only {count} acknowledgements before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    for line in reader.drain():  # acknowledged before the kill, still in the pipe
        record_ack(line, acked)
        count += 1
    return count


async def verify(root: Path, flush: str, acked: Acked) -> None:
    store = MessageStore(store_config(str(root), flush), store_host=STORE_HOST)
    await store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        records = 0
        for _phys, f, pos, size in store.commit_log.walk(store.min_phy_offset, store.max_phy_offset):
            if size > 0:
                verify_record(f.mm, pos, f.wrote)
                records += 1
        assert records >= len(acked)
        for (topic, qid), cq in store.queue_store.queues.items():
            res = store.get_message(topic, qid, cq.min_offset, 32)
            assert res.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
            for q in range(cq.min_offset, cq.max_offset):
                entry = cq.entry(q)
                assert entry is not None and entry[1] > 0, f"hole in {topic}/{qid} at {q}"
                raw = store.look_message_by_offset(entry[0])
                assert raw is not None and len(raw) == entry[1]
                rec, _ = decode_record(raw)
                assert (rec.topic, rec.queue_id, rec.queue_offset) == (topic, qid, q)
        for (topic, qid, qoff), (msg_id, uniq, size) in acked.items():
            res = store.get_message(topic, qid, qoff, 1)
            assert res.status is GetMessageStatus.FOUND, f"acknowledged {topic}/{qid}@{qoff} missing: {res.status}"
            verify_record(res.buffers[0], 0)
            rec, _ = decode_record(res.buffers[0])
            assert rec.commit_log_offset == decode_offset_msg_id(msg_id)[2] and rec.msg_id == msg_id
            assert rec.properties["UNIQ_KEY"] == uniq and rec.body == body_for(uniq, size)
    finally:
        await store.shutdown()


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_sigkill_never_loses_acknowledged_messages_nor_corrupts_the_log(tmp_path: Path, flush: str) -> None:
    seed = int(os.environ.get("STORE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    acked: Acked = {}
    root = tmp_path / "store"
    for rnd in range(ROUNDS):
        target = rng.choice([rng.randrange(1, 50), rng.randrange(50, 2000)])
        try:
            run_round(root, flush, seed + rnd, target, acked)
            uvloop.run(verify(root, flush, acked))
        except AssertionError as exc:
            raise AssertionError(f"STORE_CRASH_SEED={seed} round={rnd} flush={flush}: {exc}") from exc
    assert len(acked) >= ROUNDS
