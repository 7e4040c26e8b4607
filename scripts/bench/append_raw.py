"""Slave apply benchmark: prints one JSON object.

  .venv/bin/python scripts/bench/append_raw.py [--messages N] [--body 1024] [--chunk 262144] [--repeat 3]

A master store is filled with N messages (UNIQ_KEY, KEYS and TAGS properties, 8 queues, index on); then, for the
Python path and for the C scanner (``brokerd.store.raw_scan.SCANNER``):
* append_raw: fresh slave stores take the master's log through ``MessageStore.append_raw`` in ``--chunk``-byte
  pieces (validation, write, consume queues, index, listeners); µs per record and MB/s, best of ``--repeat``;
* scan: the parse alone over the whole log (Python: ``validate_raw`` + ``parse_for_dispatch`` per record;
  C: ``scan_log`` with the CRC check).
Store files go to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import structlog

from brokerd.message import MessageInner
from brokerd.store import raw_scan
from brokerd.store.config import StoreConfig
from brokerd.store.maintenance import validate_raw
from brokerd.store.message_store import MessageStore
from brokerd.store.queue_store import parse_for_dispatch

SEG = 64 << 20


def store_of(root: Path, port: int) -> MessageStore:
    return MessageStore(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG),
                        store_host=("127.0.0.1", port))  # fmt: skip


async def fill(master: MessageStore, n: int, body: bytes) -> None:
    for i in range(n):
        props = {"UNIQ_KEY": f"K{i:08d}", "KEYS": f"k{i}", "TAGS": "a"}
        master.put_message_nowait(MessageInner(topic="T", body=body, queue_id=i % 8, properties=props, flag=0,
                                               sys_flag=0, born_timestamp=0, born_host=("127.0.0.1", 1),
                                               store_host=("127.0.0.1", 10911)))  # fmt: skip


async def apply_once(master: MessageStore, root: Path, chunk: int) -> float:
    slave = store_of(root, 10921)
    await slave.start()
    end, off = master.max_phy_offset, 0
    t0 = time.perf_counter()
    while off < end:
        view = master.read_range(off, chunk)
        data = bytes(view)
        view.release()
        slave.append_raw(off, data)
        off += len(data)
    dt = time.perf_counter() - t0
    await slave.shutdown()
    shutil.rmtree(root)
    return dt


def parse_python(raw: bytes) -> None:
    end = validate_raw(raw, 0, SEG)
    pos = 0
    while pos < end:
        size = int.from_bytes(raw[pos : pos + 4], "big")
        parse_for_dispatch(raw, pos, size)
        pos += size


async def main(n: int, body_len: int, chunk: int, repeat: int) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-append-raw-"))
    native = raw_scan.SCANNER
    try:
        master = store_of(tmp / "m", 10911)
        await master.start()
        await fill(master, n, b"x" * body_len)
        total = master.max_phy_offset
        raw = bytes(master.commit_log.read_raw(0, total))
        out: dict[str, object] = {"messages": n, "body": body_len, "chunk": chunk, "log_bytes": total}
        for name, scan in (("python", None), ("c", native)):
            if name == "c" and scan is None:
                continue
            raw_scan.SCANNER = scan
            best = min([await apply_once(master, tmp / f"s{i}", chunk) for i in range(repeat)])
            t0 = time.perf_counter()
            parse_python(raw) if scan is None else scan(raw, 0, SEG, True)
            parse = time.perf_counter() - t0
            out[name] = {"append_raw_us_per_record": round(best / n * 1e6, 2), "append_raw_mb_s": round(total / best / 1e6, 1),
                         "msg_per_s": round(n / best), "parse_us_per_record": round(parse / n * 1e6, 2)}  # fmt: skip
        await master.shutdown()
        return out
    finally:
        raw_scan.SCANNER = native
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256 * 1024)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(json.dumps(asyncio.run(main(a.messages, a.body, a.chunk, a.repeat)), indent=2))
