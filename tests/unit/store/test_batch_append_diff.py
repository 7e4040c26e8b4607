"""The C batch append (brokerd/csrc/store_batch.c) against its Python reference (``BatchAppender.run_python``): the
same seeded batches through two stores, one per implementation, must leave the same commit log, consume queues and
index files, byte for byte, and answer the same results, listener notes and positions."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.native import native
from brokerd.store import batch_append
from brokerd.store.message_store import MessageStore
from brokerd.store.results import PutMessageResult
from tests.unit.store.conftest import STORE_HOST, config

pytestmark = pytest.mark.skipif(
    native is None or not hasattr(native, "BatchAppender"),
    reason="brokerd._native with BatchAppender not built (or BROKERD_NATIVE=0)",
)

TOPICS = ["TopicA", "TopicB", "%RETRY%grp_TopicA", "Tópico-ü", "L" * 200, m.SCHEDULE_TOPIC]
HOSTS = [("10.0.0.7", 40000), ("::ffff:1.2.3.4", 1), ("localhost", 2), ("010.1.1.1", 3), ("255.255.255.255", -1)]
# small files: segments roll inside batches, consume-queue files every 100 entries, index files every ~60 records
GEOMETRY: dict[str, Any] = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 100,
                            "max_hash_slot_num": 64, "max_index_num": 200}  # fmt: skip


def random_message(rnd: random.Random, i: int) -> MessageInner:
    topic = rnd.choice(TOPICS)
    props: dict[str, Any] = {}
    if rnd.random() < 0.8:
        props[m.UNIQ_KEY] = f"{rnd.getrandbits(64):016X}{i:08X}"
    if rnd.random() < 0.6:
        props[m.TAGS] = rnd.choice(["TagA", "", "标签", "t" * 40])
    if rnd.random() < 0.5:
        props[m.KEYS] = rnd.choice(["k1 k2", " a  b ", "", "x", f"order-{i}", "dup dup", props.get(m.UNIQ_KEY, "u")])
    if topic == m.SCHEDULE_TOPIC or rnd.random() < 0.05:
        props[m.DELAY] = rnd.choice(["3", "0", "-2", "20", "abc", "", "18", "7"])
    if rnd.random() < 0.3:
        props["TIMER_OUT_MS"] = str(1_700_000_000_000 + i)
    if rnd.random() < 0.1:
        props["NONE"] = None
    qid = rnd.randrange(4)
    body = rnd.randbytes(rnd.choice([0, 1, 50, 1000, 3000]))
    tags = props.get(m.TAGS)
    return MessageInner(topic=topic, queue_id=qid, body=body, flag=rnd.randrange(-2**31, 2**31), properties=props,
                        sys_flag=rnd.choice([0, 0, 0, 0x4, 0x8, 0xC, 0x30, 0x1]),
                        born_timestamp=rnd.randrange(2**62), born_host=rnd.choice(HOSTS), store_host=STORE_HOST,
                        reconsume_times=rnd.randrange(20), prepared_transaction_offset=rnd.randrange(2**40),
                        tags_code=m.tags_code_of(tags) if tags and rnd.random() < 0.5 else rnd.choice([0, 0, 7]),
                        store_timestamp=rnd.choice([0, 0, 1_700_000_000_123]))  # fmt: skip


def batches(seed: int, count: int) -> list[list[MessageInner]]:
    rnd = random.Random(seed)
    out, i = [], 0
    for _ in range(count):
        n = rnd.choice([1, 2, 3, 17, 64, 120])
        out.append([random_message(rnd, i + k) for k in range(n)])
        i += n
    return out


async def pair(tmp_path: Path, **overrides: Any) -> tuple[MessageStore, MessageStore]:
    stores = []
    for name, flag in (("c", True), ("py", False)):
        store = MessageStore(config(tmp_path / name, **{**GEOMETRY, **overrides}), store_host=STORE_HOST)
        await store.start()
        store.use_native_batch(flag)
        stores.append(store)
    assert stores[0].batch_stats()["native"] and not stores[1].batch_stats()["native"]
    return stores[0], stores[1]


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.parts[len(root.parts)] in ("commitlog", "consumequeue", "index")}  # fmt: skip


def listen(store: MessageStore) -> list[tuple[str, int, int, int]]:
    seen: list[tuple[str, int, int, int]] = []
    store.add_dispatch_listener(lambda *a: seen.append(a))
    return seen


def append_both(c: MessageStore, py: MessageStore, batch: list[MessageInner], ts: int,
                monkeypatch: pytest.MonkeyPatch) -> tuple[PutMessageResult, PutMessageResult]:  # fmt: skip
    monkeypatch.setattr(batch_append, "now_ms", lambda: ts)
    return c.append_messages(batch), py.append_messages(batch)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_same_batches_leave_the_same_files_results_and_notes(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, py = await pair(tmp_path)
    seen_c, seen_py = listen(c), listen(py)
    for k, batch in enumerate(batches(seed, 40)):
        rc, rp = append_both(c, py, batch, 1_700_000_000_000 + k, monkeypatch)
        assert rc == rp, f"batch {k}"
        assert rc.ok and rc.msg_num == len(batch)
    assert seen_c == seen_py and seen_c
    assert c.dispatcher.next_queue_offsets == py.dispatcher.next_queue_offsets
    assert (c.max_phy_offset, c.dispatched_offset, c.valid_end, c.last_store_timestamp) == (
        py.max_phy_offset,
        py.dispatched_offset,
        py.valid_end,
        py.last_store_timestamp,
    )
    assert len(c.commit_log.files) > 3 and len(c.index.files if c.index else []) > 3  # rolls happened
    stats = c.batch_stats()
    assert stats["runs"]["python"] == 0 and not any(stats["fallbacks"].values())
    await c.shutdown()
    await py.shutdown()
    got, want = files(tmp_path / "c"), files(tmp_path / "py")
    assert got.keys() == want.keys()
    assert [name for name in want if got[name] != want[name]] == []


async def test_refused_and_fallback_batches_answer_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, py = await pair(tmp_path)
    rnd = random.Random(7)
    good = [random_message(rnd, i) for i in range(5)]
    big_props = random_message(rnd, 5)
    big_props.properties["P"] = "x" * 40_000
    odd = random_message(rnd, 6)
    odd.properties["NUM"] = 5  # type: ignore[assignment]  # a non-str value: encoded by Python's f-string
    cases = {
        "props_too_long": [*good, big_props],
        "bad_topic": [*good, MessageInner("a/b", 0, b"", 0, {}, 0, 0, HOSTS[0], STORE_HOST)],
        "negative_queue": [*good, MessageInner("T", -1, b"", 0, {}, 0, 0, HOSTS[0], STORE_HOST)],
        "too_big_for_a_segment": [*good, MessageInner("T", 0, b"x" * 70_000, 0, {}, 0, 0, HOSTS[0], STORE_HOST)],
        "non_str_property": [*good, odd],
        "delay_twice_negative": [
            MessageInner(m.SCHEDULE_TOPIC, 0, b"", 0, {m.DELAY: "--3"}, 0, 0, HOSTS[0], STORE_HOST)
        ],
    }
    for k, (name, batch) in enumerate(cases.items()):
        rc, rp = append_both(c, py, batch, 1_700_000_000_000 + k, monkeypatch)
        assert rc == rp, name
    assert c.batch_stats()["fallbacks"]["properties"] == 1 and c.batch_stats()["fallbacks"]["delay"] == 1
    assert c.max_phy_offset == py.max_phy_offset
    await c.shutdown()
    await py.shutdown()
    assert files(tmp_path / "c") == files(tmp_path / "py")


def random_properties(rnd: random.Random) -> bytes:
    """A properties string as a client or a broken record may hold it: empty segments, a missing or repeated
    separator, empty names or values, duplicates, non-ASCII, at times bytes that are not UTF-8."""
    pieces = ["a", "KEYS", "b", "", "ü", "标签", "x\x01y", "\x01", "\x02", "v" * 30]
    segs = []
    for _ in range(rnd.randrange(8)):
        kind = rnd.random()
        k, v = rnd.choice(pieces), rnd.choice(pieces)
        segs.append(f"{k}\x01{v}" if kind < 0.7 else k if kind < 0.85 else f"{k}\x01{v}\x01{k}")
    raw = ("\x02".join(segs) + rnd.choice(["\x02", "", "\x02\x02"])).encode()
    return raw + b"\xff\xfe" if rnd.random() < 0.1 else raw


def test_properties_decode_in_c_matches_the_reference() -> None:
    assert native is not None
    rnd = random.Random(11)
    for _ in range(3000):
        raw = random_properties(rnd)
        pad = rnd.randrange(4)
        got = native.props_decode(b"\x00" * pad + raw + b"\x02z\x01z", pad, pad + len(raw))
        want = m.decode_properties(raw)
        if got is None:  # not UTF-8: left to the reference (it decodes with replacement characters)
            with pytest.raises(UnicodeDecodeError):
                raw.decode()
            continue
        assert got == want and list(got) == list(want), raw
