"""The firing's preparation of a due timer from the parked record's bytes (``deliver.prepare``: in C when built,
``prepare_python`` otherwise) against the reference (``decode_record`` + ``delivery``): the same message, None or
STALE for every record."""

from __future__ import annotations

import random

import pytest

from brokerd import message as m
from brokerd.message import MessageInner, decode_record, encode_record
from brokerd.timer import deliver
from brokerd.timer.core import TIMER_TOPIC

HOSTS = [("10.0.0.1", 5000), ("::1", 7), ("192.168.1.20", 65535)]


def parked(rnd: random.Random, i: int) -> tuple[bytes, int, int]:
    due = 1_700_000_000_000 + i
    props = {m.UNIQ_KEY: f"U{i}", m.TIMER_OUT_MS: rnd.choice([str(due)] * 4 + ["x", str(due + 1)]), "CLUSTER": "C",
             m.REAL_TOPIC: rnd.choice(["Real", "Réal", ""]), m.REAL_QID: rnd.choice(["3", "x", "12"]),
             m.TAGS: rnd.choice(["TagA", "", "标签"]), "V": rnd.choice(["a", "b\x01c", "é"])}  # fmt: skip
    for k in (m.TIMER_ENQUEUE_MS, m.TIMER_ROLL_TIMES, m.KEYS, m.REAL_QID, m.REAL_TOPIC):
        if rnd.random() < 0.15:
            props.pop(k, None) if rnd.random() < 0.5 else props.__setitem__(k, rnd.choice(["7", "z", "1 2", "-3", "٣"]))
    topic = rnd.choice([TIMER_TOPIC] * 6 + ["Other", "T" * 200])
    msg = MessageInner(topic, 0, rnd.randbytes(rnd.choice([0, 10, 500])), rnd.randrange(-5, 5), props,
                       rnd.choice([0, 0x8, 0x1]), rnd.randrange(2**40), rnd.choice(HOSTS), rnd.choice(HOSTS),
                       rnd.randrange(5), rnd.randrange(100))  # fmt: skip
    raw = encode_record(msg, queue_offset=i, phys_offset=i * 1000, store_timestamp=due - 5000)
    if rnd.random() < 0.1:  # a record cut short, or another record's bytes
        raw = raw[: rnd.randrange(len(raw))] if rnd.random() < 0.5 else raw + b"\x00"
    return raw, rnd.choice([i, i, i + 1]), due


def reference(raw: bytes, qoff: int, due: int, roll: bool, now: int) -> object:
    try:
        ext, _ = decode_record(raw)
    except m.CorruptRecordError:
        return deliver.STALE
    if ext.store_size != len(raw) or ext.queue_offset != qoff or ext.topic != TIMER_TOPIC or deliver.due_of(ext) != due:
        return deliver.STALE
    return deliver.delivery(ext, roll, now)


def test_prepare_from_bytes_gives_the_reference_message() -> None:
    rnd = random.Random(5)
    outcomes = set()
    for i in range(3000):
        raw, qoff, due = parked(rnd, i)
        roll = rnd.random() < 0.3
        try:
            want = reference(raw, qoff, due, roll, 1_800_000_000_000)
        except ValueError:  # the reference raises (a REAL_QID int() refuses): so do the others
            outcomes.add("raises")
            for fn in (deliver.prepare, deliver.prepare_python):
                with pytest.raises(ValueError):
                    fn(raw, qoff, due, roll, 1_800_000_000_000)
            continue
        got = deliver.prepare(raw, qoff, due, roll, 1_800_000_000_000)  # in C when built
        assert got == want == deliver.prepare_python(raw, qoff, due, roll, 1_800_000_000_000), i
        outcomes.add("stale" if got is deliver.STALE else "drop" if got is None else "message")
    assert {"stale", "drop", "message"} <= outcomes
