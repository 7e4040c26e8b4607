"""The C scanner of replicated log bytes (``brokerd._native.scan_log``) against the Python reference it mirrors
(``validate_raw`` + ``parse_for_dispatch``): for every byte stream, valid or not, both give the same end and
records, or both raise ValueError with the same message. The C side must survive any input."""

from __future__ import annotations

import asyncio
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerd.message import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from brokerd.store.message_store import MessageStore
from brokerd.store.raw_scan import SCANNER

from .conftest import STORE_HOST, config
from .varied_log import craft, fill_varied, lay_out, scan_python, whole_log

pytestmark = pytest.mark.skipif(SCANNER is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")
SEG = 8192
ROOT = Path(__file__).resolve().parents[3]


def outcome(fn: Any, buf: bytes, base: int, seg: int) -> tuple[str, Any]:
    try:
        return "ok", fn(buf, base, seg)
    except ValueError as exc:
        return "error", str(exc)


def assert_same(buf: bytes, base: int = 0, seg: int = SEG) -> tuple[str, Any]:
    """C (with and without the CRC check) against Python on one buffer; returns the common outcome."""
    assert SCANNER is not None
    py = outcome(scan_python, buf, base, seg)
    c = outcome(lambda b, o, s: SCANNER(b, o, s, True), buf, base, seg)
    assert c == py, (buf[:200], base, seg)
    no_crc = outcome(lambda b, o, s: SCANNER(b, o, s, False), buf, base, seg)
    if py[0] == "ok":
        assert no_crc == py
    elif no_crc[0] == "ok":  # only the CRC check can tell them apart
        assert "body CRC mismatch" in py[1]
    return py


@pytest.fixture(scope="module")
def master_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real store's log: varied messages, V1 and V2 records, segment rolls with blank markers."""

    async def build() -> bytes:
        store = MessageStore(config(tmp_path_factory.mktemp("master"), mapped_file_size_commit_log=SEG),
                             store_host=STORE_HOST)  # fmt: skip
        await store.start()
        try:
            await fill_varied(store, random.Random(3), 120)
            return whole_log(store)
        finally:
            await store.shutdown()

    return asyncio.run(build())


# ------------------------------------------------------------------ valid logs


def test_a_real_log_scans_the_same_whole_and_from_every_record(master_log: bytes) -> None:
    status, (end, records) = assert_same(master_log)
    assert status == "ok" and end == len(master_log) and len(records) > 120
    magics = {struct.unpack_from(">i", master_log, r[0] + 4)[0] for r in records}
    assert magics == {MAGIC_V1, MAGIC_V2}
    assert len(master_log) // SEG >= 3  # several segments: blank markers in between
    for phys, *_ in records[::7]:  # any record boundary is a valid start
        assert assert_same(master_log[phys:], phys)[0] == "ok"


def test_chunks_cut_anywhere_end_mid_record_like_the_slave_sees_them(master_log: bytes) -> None:
    rng = random.Random(11)
    _, (_, records) = assert_same(master_log)
    starts = [r[0] for r in records]
    for _ in range(300):
        start = rng.choice(starts)
        cut = min(len(master_log), start + rng.randrange(0, 6000))
        status, (end, got) = assert_same(master_log[start:cut], start)
        assert status == "ok" and end <= cut
        assert [r[0] for r in got] == [s for s in starts if start <= s and s + records[starts.index(s)][1] <= cut]


def test_property_values_match_decode_properties_on_odd_bytes() -> None:
    odd = [b"", b"TAGS", b"TAGS\x01", b"TAGS\x01\x02", b"\x01x\x02TAGS\x01a\x02TAGS\x01b", b"TAGS\x01a\x01b\x02",
           b"KEYS\x01\xff\xfe k\x02UNIQ_KEY\x01\xe2\x82\x02DELAY\x01\xf0\x9f\x98", b"TAGS\x01\xe2\x82\xac\x02",
           b"\x02\x02TAGS\x01x\x02\x02", b"TAGS\x01v\xed\xa0\x80\x02", b"TAG\x01no\x02TAGSS\x01no"]  # fmt: skip
    recs = [craft(props=p, topic=t) for p in odd for t in (b"T", b"\xff\xfeT", "主题".encode())]
    status, (_, got) = assert_same(lay_out(recs, 0, 1 << 20), 0, 1 << 20)
    assert status == "ok" and len(got) == len(recs)
    assert got[4 * 3][7] == "b" and got[6 * 3][8] == "\ufffd\ufffd k"  # later duplicate wins; errors="replace"


def test_ipv6_hosts_and_the_sysflag_bits_move_the_timestamp() -> None:
    recs = [craft(sys_flag=f, store_ts=1000 + f, props=b"TAGS\x01t\x02") for f in (0, 0x10, 0x20, 0x30, 0x4, 0xC)]
    status, (_, got) = assert_same(lay_out(recs, 0, SEG))
    assert status == "ok" and [r[6] for r in got] == [1000, 1016, 1032, 1048, 1004, 1012]


# ------------------------------------------------------------------ corrupt and random bytes


def test_every_corruption_gives_the_same_error(master_log: bytes) -> None:
    cases: dict[str, Callable[[bytes], bytes]] = {
        "bad magic": lambda b: b[:4] + b"\x00\x00\x00\x00" + b[8:],
        "bad record size": lambda b: struct.pack(">i", 50) + b[4:],
        "crosses a segment": lambda b: struct.pack(">i", SEG) + b[4:],
        "body CRC mismatch": lambda b: b[:8] + struct.pack(">i", 1) + b[12:],
        "bad body length": lambda b: b[:84] + struct.pack(">i", -1) + b[88:],
        "lengths disagree": lambda b: b[:84] + struct.pack(">i", 0) + b[88:],
        "truncated record": lambda b: struct.pack(">i", 91) + b[4:36] + struct.pack(">i", 0x30) + b[40:91],
        "bad blank marker": lambda b: struct.pack(">ii", 100, MAGIC_BLANK) + b[8:],
    }
    for words, mutate in cases.items():
        status, msg = assert_same(mutate(master_log))
        assert status == "error" and words in msg, (words, msg)


def test_seeded_mutations_of_a_real_log(master_log: bytes) -> None:
    rng = random.Random(2024)
    _, (_, records) = assert_same(master_log)
    errors = 0
    for _ in range(1500):
        phys, size = rng.choice(records)[:2]
        buf = bytearray(master_log[phys : phys + rng.randrange(size, 3 * size + 16)])
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(min(len(buf), 140 if rng.random() < 0.7 else len(buf)))
            if rng.random() < 0.5:
                buf[at] = rng.randrange(256)
            else:
                buf[at : at + 4] = struct.pack(
                    ">i", rng.choice([0, -1, 1, 91, 2**31 - 1, -(2**31), rng.randrange(-500, 500)])
                )
        errors += assert_same(bytes(buf), phys)[0] == "error"
    assert errors > 500


def test_random_bytes_never_crash() -> None:
    rng = random.Random(7)
    magics = [struct.pack(">i", m) for m in (MAGIC_V1, MAGIC_V2, MAGIC_BLANK)]
    for i in range(3000):
        buf = bytearray(rng.randbytes(rng.randrange(0, 400)))
        if len(buf) >= 8 and i % 2:  # a plausible size and magic: get past the first checks
            buf[0:4] = struct.pack(">i", rng.randrange(0, len(buf) + 50))
            buf[4:8] = rng.choice(magics)
        assert_same(bytes(buf), rng.randrange(0, 3 * SEG), rng.choice([SEG, 4096, 1 << 20]))


def test_buffer_kinds_and_bad_arguments() -> None:
    assert SCANNER is not None
    rec = craft(props=b"TAGS\x01a\x02")
    want = SCANNER(rec, 0, SEG, True)
    assert SCANNER(bytearray(rec), 0, SEG, True) == want == SCANNER(memoryview(rec), 0, SEG, True)
    assert SCANNER(rec[:50], 7, SEG, True) == (7, [])
    with pytest.raises(ValueError):
        SCANNER(rec, -1, SEG, True)
    with pytest.raises(ValueError):
        SCANNER(rec, 0, 0, True)
    with pytest.raises(TypeError):
        SCANNER("text", 0, SEG, True)  # type: ignore[arg-type]


pieces = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"\x01", b"\x02", b"a b", b"\xff", b"\xe2\x82",
                          b"\xf0\x9f\x98\x80", "é".encode(), b"", b"7"])  # fmt: skip
pair = st.tuples(st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"X", b""]), st.lists(pieces, max_size=3),
                 st.sampled_from([b"\x01", b"", b"\x01\x01"]), st.sampled_from([b"\x02", b"", b"\x02\x02"]))  # fmt: skip
props = st.one_of(
    st.lists(pieces, max_size=12).map(b"".join),
    st.lists(pair, max_size=6).map(lambda ps: b"".join(k + s + b"".join(v) + e for k, v, s, e in ps)),
)
fields = st.fixed_dictionaries({
    "topic": st.one_of(st.binary(max_size=8), st.text(max_size=6).map(str.encode), st.binary(min_size=120, max_size=300)),
    "body": st.binary(max_size=64),
    "props": props,
    "sys_flag": st.sampled_from([0, 4, 8, 0xC, 0x10, 0x20, 0x30, 0x7FFFFFFF, -1]),
    "queue_id": st.integers(-(2**31), 2**31 - 1),
    "queue_offset": st.integers(-(2**63), 2**63 - 1),
    "store_ts": st.integers(-(2**63), 2**63 - 1),
    "magic": st.sampled_from([None, None, None, MAGIC_V1, MAGIC_V2, MAGIC_BLANK, 0]),
})  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(fields, max_size=6), seg=st.sampled_from([512, 1024, SEG]), at=st.integers(0, 5000),
       cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=3))  # fmt: skip
def test_crafted_records_hypothesis(recs: list[dict[str, Any]], seg: int, at: int, cut: int,
                                    flips: list[tuple[int, int]]) -> None:  # fmt: skip
    buf = bytearray(lay_out([craft(**r) for r in recs], at, seg))
    for pos, value in flips:
        if pos < len(buf):
            buf[pos] = value
    assert_same(bytes(buf[: len(buf) - cut % (len(buf) + 1)]), at, seg)


def test_brokerd_native_0_turns_the_scanner_off() -> None:
    env = {**os.environ, "BROKERD_NATIVE": "0"}
    res = subprocess.run([sys.executable, "-c", "from brokerd.store import raw_scan; print(raw_scan.SCANNER)"],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    assert res.stdout.strip() == "None"
