"""Child process for tests/integration/test_store_crash.py: writes messages until killed.

usage: python -m tests.integration.helpers.store_writer ROOT FLUSH_DISK_TYPE SEED

Prints ``READY`` once the store has started, then one line per acknowledged message:
``ACK <topic> <queue_id> <queue_offset> <offset msg id> <uniq key> <body length>``. A line is printed
only after ``put_message``/``put_messages`` returned PUT_OK, i.e. with SYNC_FLUSH after the fsync.
The body is the UNIQ_KEY repeated, cut to the body length, so the reader can check content.
"""

from __future__ import annotations

import asyncio
import random
import sys

import structlog
import uvloop

from brokerd.message import MessageInner, new_uniq_id
from brokerd.store.config import StoreConfig
from brokerd.store.message_store import MessageStore
from brokerd.store.results import PutStatus

STORE_HOST = ("127.0.0.1", 10911)  # port-ok: the host written into records, nothing binds it
TOPICS = ("CrashA", "CrashB")


def store_config(root: str, flush: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, flush_disk_type=flush, mapped_file_size_commit_log=64 * 1024,
                       mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=4096, max_index_num=50_000,
                       flush_interval_commit_log_ms=50, flush_interval_consume_queue_ms=100,
                       disk_space_warning_level_ratio=1.0, disk_space_clean_forcibly_ratio=1.0)  # fmt: skip


def body_for(uniq: str, size: int) -> bytes:
    return (uniq.encode() * (size // len(uniq) + 1))[:size]


def make(rng: random.Random) -> MessageInner:
    uniq = new_uniq_id()
    size = rng.choice([rng.randrange(1, 200), rng.randrange(200, 3000)])
    return MessageInner(topic=rng.choice(TOPICS), queue_id=rng.randrange(4), body=body_for(uniq, size), flag=0,
                        properties={"UNIQ_KEY": uniq, "KEYS": f"k{rng.randrange(100)}", "TAGS": "T"}, sys_flag=0,
                        born_timestamp=1, born_host=("127.0.0.1", 1), store_host=STORE_HOST)  # fmt: skip


def ack(m: MessageInner, qoff: int, msg_id: str) -> str:
    return f"ACK {m.topic} {m.queue_id} {qoff} {msg_id} {m.properties['UNIQ_KEY']} {len(m.body)}\n"


async def writer(store: MessageStore, rng: random.Random) -> None:
    out = sys.stdout
    while True:
        if rng.random() < 0.2:
            first = make(rng)
            batch = [first] + [make(rng) for _ in range(rng.randrange(1, 5))]
            for m in batch:  # a batch targets one queue
                m.topic, m.queue_id = first.topic, first.queue_id
            res = await store.put_messages(batch)
            if res.status is PutStatus.PUT_OK:
                out.write("".join(ack(m, res.queue_offset + i, mid) for i, (m, mid) in
                                  enumerate(zip(batch, res.msg_id.split(","), strict=True))))  # fmt: skip
                out.flush()
        else:
            m = make(rng)
            res = await store.put_message(m)
            if res.status is PutStatus.PUT_OK:
                out.write(ack(m, res.queue_offset, res.msg_id))
                out.flush()
        await asyncio.sleep(0)  # sleep-ok: yield to the loop between puts


async def main(root: str, flush: str, seed: int) -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    store = MessageStore(store_config(root, flush), store_host=STORE_HOST)
    await store.start()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    rng = random.Random(seed)
    await asyncio.gather(*(writer(store, random.Random(rng.random())) for _ in range(16)))


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
