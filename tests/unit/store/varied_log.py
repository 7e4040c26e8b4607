"""Commit logs for the scanner tests: varied messages written by a real MessageStore, records crafted by hand
(IPv6 hosts, any topic / properties bytes, any magic) and the Python reference of ``brokerd._native.scan_log``."""

from __future__ import annotations

import random
import struct
import zlib

from brokerd import message as m
from brokerd.message import DELAY, KEYS, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, SCHEDULE_TOPIC, TAGS, UNIQ_KEY, MessageInner
from brokerd.store.maintenance import validate_raw
from brokerd.store.message_store import MessageStore
from brokerd.store.queue_store import parse_for_dispatch
from brokerd.store.raw_scan import Scanned

from .conftest import make_msg

LONG_TOPIC = "L" * 200  # > 127 bytes: magic V2
ODD_PROPS: list[dict[str, str]] = [
    {},
    {TAGS: "a\x01b", KEYS: "k1 k1  k2 ", UNIQ_KEY: "k1"},  # separators inside values, duplicate keys
    {"X": f"1\x02{TAGS}\x01late\x02{KEYS}\x01"},  # a value that smuggles a later TAGS pair and an empty KEYS
    {TAGS: "", KEYS: " ", UNIQ_KEY: "u-only"},
    {f"{TAGS}\x01early\x02Y": "z", TAGS: "second"},  # a name with separators
    {TAGS: "标签-ü", KEYS: "ключ κλειδί", "😀": "\U0001f600"},
]


def scan_python(buf: bytes, base: int, segment_size: int) -> tuple[int, list[Scanned]]:
    """The reference: ``validate_raw``, then ``parse_for_dispatch`` of each complete non-blank record."""
    end = validate_raw(buf, base, segment_size)
    out: list[Scanned] = []
    p = 0
    while base + p < end:
        size, magic = struct.unpack_from(">ii", buf, p)
        if magic != MAGIC_BLANK:
            i = parse_for_dispatch(buf, p, size)
            pr = i.properties
            out.append((base + p, size, i.topic, i.queue_id, i.queue_offset, i.sys_flag, i.store_ts, pr.get(TAGS),
                        pr.get(KEYS), pr.get(UNIQ_KEY), pr.get(DELAY)))  # fmt: skip
        p += size
    return end, out


def varied_msg(kind: int, i: int, body: bytes, key: str, rng: random.Random) -> MessageInner:
    """Message ``i`` of ``fill_varied`` (``kind`` 0..9 but 8, the batches)."""
    if kind == 0:
        return make_msg(queue_id=i % 3, body=body, tags="TagA", keys=f"{key} other-{i}")
    if kind == 1:
        return make_msg(queue_id=1, body=body)  # no properties at all
    if kind == 2:
        return make_msg(topic="主题-ü", body="ünïcödé €".encode() + body, tags="标签", keys=key)
    if kind == 3:
        return make_msg(queue_id=2, body=b"", uniq=key)
    if kind == 4:
        return make_msg(topic=LONG_TOPIC, queue_id=i % 2, body=body, tags="long", keys=key)
    if kind in (5, 6):
        flags = (
            [m.TRANSACTION_PREPARED_TYPE, 0] if kind == 5 else [m.TRANSACTION_ROLLBACK_TYPE, m.TRANSACTION_COMMIT_TYPE]
        )
        return make_msg(body=body, keys=key, sys_flag=rng.choice(flags))
    if kind == 7:
        delay = rng.choice(["1", "3", "18", "99", "0", "-2", "x", "", "٣"])
        return make_msg(topic=SCHEDULE_TOPIC, queue_id=rng.randrange(3), body=body, keys=key, props={DELAY: delay})
    return make_msg(queue_id=i % 3, body=body, props=rng.choice(ODD_PROPS))


async def fill_varied(store: MessageStore, rng: random.Random, n: int) -> list[str]:
    """Put ``n`` varied messages (every tenth a batch of three); return the index keys used."""
    keys: list[str] = []
    for i in range(n):
        body = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 50, 300, 1500, 3000])))
        key = f"key-{i}"
        keys.append(key)
        if i % 10 == 8:
            batch = [make_msg(queue_id=j, body=body[:100], keys=f"{key}-{j}", tags="batch") for j in range(3)]
            keys += [f"{key}-{j}" for j in range(3)]
            await store.put_messages(batch)
        else:
            await store.put_message(varied_msg(i % 10, i, body, key, rng))
    return keys


def whole_log(store: MessageStore) -> bytes:
    """The written bytes of every segment, oldest first (a finished segment is written to its end)."""
    files = store.commit_log.files
    assert all(f.wrote == f.size for f in files[:-1])
    return b"".join(store.commit_log.read_raw(f.base, f.base + f.wrote) for f in files)


# ------------------------------------------------------------------ records crafted by hand


def craft(*, topic: bytes = b"T", body: bytes = b"", props: bytes = b"", sys_flag: int = 0, queue_id: int = 0,
          queue_offset: int = 0, store_ts: int = 0, magic: int | None = None, phys: int = 0) -> bytes:  # fmt: skip
    """One stored record with any fields (IPv6 hosts when sys_flag has 0x10 / 0x20) and a correct body CRC."""
    born = bytes(16 if sys_flag & 0x10 else 4) + struct.pack(">i", 1234)
    store = bytes(16 if sys_flag & 0x20 else 4) + struct.pack(">i", 10911)
    if magic is None:
        magic = MAGIC_V2 if len(topic) > 127 else MAGIC_V1
    tlen = struct.pack(">H", len(topic)) if magic != MAGIC_V1 else bytes((len(topic) & 0xFF,))
    tail = (born + struct.pack(">q", store_ts) + store + struct.pack(">iqi", 0, 0, len(body)) + body + tlen + topic
            + struct.pack(">h", len(props)) + props)  # fmt: skip
    head = struct.pack(">iiiiiqqiq", 48 + len(tail), magic, zlib.crc32(body) & 0x7FFFFFFF, queue_id, 0,
                       queue_offset, phys, sys_flag, 1_700_000_000_000)  # fmt: skip
    return head + tail


def lay_out(records: list[bytes], base: int, segment_size: int) -> bytes:
    """Records from ``base`` as the commit log holds them: a blank marker fills a segment's end when the next
    record (+ 8 bytes) does not fit in it."""
    out = bytearray()
    phys = base
    for rec in records:
        room = segment_size - phys % segment_size
        if len(rec) + 8 > room and room != segment_size and room >= 8:
            out += struct.pack(">ii", room, MAGIC_BLANK) + bytes(room - 8)
            phys += room
        out += rec
        phys += len(rec)
    return bytes(out)
