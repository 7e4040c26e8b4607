"""The tier's metadata, pure: a chain of immutable manifest versions per broker set (``manifest/<version>``), each
the whole state: the master epoch that wrote it, the uploaded chunks of the commit log, the epoch history covering
them, and the tier's own retention floor.

Fencing (compare-and-swap): version ``v + 1`` is created only if absent (``TierBackend.create_exclusive``), and a
writer at epoch ``E`` writes only on top of a version whose epoch is ``<= E``. A master claims the chain at
promotion (it writes a version with its epoch before uploading anything), so from then on a deposed master finds a
higher epoch on top and stops: two brokers can never both extend the tier of one broker set.

Chunks are contiguous ``[start, end)`` ranges of the commit log, each inside one segment and ending at a record
boundary or the segment end, each at or below the confirm offset when uploaded; objects ``log/<start>-<end>.<epoch>``
(the writer's epoch: an object a deposed master writes is never one the manifest names) and its queue index
``qi/<start>-<end>.<epoch>`` (the consume-queue and key-index entries of its records).
"""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Final

import msgpack

FORMAT: Final = 1
MANIFEST_PREFIX: Final = "manifest/"
LOG_PREFIX: Final = "log/"
QI_PREFIX: Final = "qi/"


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    end: int
    crc: int  # zlib.crc32 of the bytes
    last_store_ts: int  # store timestamp of the chunk's last record (0: unknown)
    epoch: int = 0  # the master epoch that wrote the object (part of its name)

    @property
    def name(self) -> str:
        return chunk_name(self.start, self.end, self.epoch)

    @property
    def index_name(self) -> str:
        """The chunk's queue index: what dispatch needs of each of its records (topic, queue, offsets, tags, keys),
        so a broker can build consume-queue and index entries of data only the tier holds."""
        return QI_PREFIX + self.name[len(LOG_PREFIX):]


def chunk_name(start: int, end: int, epoch: int) -> str:
    """Objects carry their writer's epoch: a deposed master's write never lands on an object the manifest names."""
    return f"{LOG_PREFIX}{start:020d}-{end:020d}.{epoch}"


def manifest_name(version: int) -> str:
    return f"{MANIFEST_PREFIX}{version:020d}"


def version_of(name: str) -> int:
    return int(name[len(MANIFEST_PREFIX):])


def crc_of(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Manifest:
    version: int = 0  # 0: the empty tier (nothing written yet)
    epoch: int = 0
    broker_id: int = -1
    chunks: tuple[Chunk, ...] = ()
    epochs: tuple[tuple[int, int], ...] = ()  # (epoch, start offset) entries of the log up to ``end``
    created_ms: int = 0
    starts: tuple[int, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", tuple(c.start for c in self.chunks))

    @property
    def end(self) -> int:
        """Everything below is in the tier (uploaded; the breakpoint an upload resumes from)."""
        return self.chunks[-1].end if self.chunks else 0

    @property
    def min_offset(self) -> int:
        return self.chunks[0].start if self.chunks else 0

    def chunk_at(self, phys: int) -> Chunk | None:
        i = bisect.bisect_right(self.starts, phys) - 1
        if i < 0:
            return None
        c = self.chunks[i]
        return c if phys < c.end else None

    def encode(self) -> bytes:
        body = [FORMAT, self.version, self.epoch, self.broker_id,
                [[c.start, c.end, c.crc, c.last_store_ts, c.epoch] for c in self.chunks],
                [list(e) for e in self.epochs], self.created_ms]  # fmt: skip
        out: bytes = msgpack.packb(body, use_bin_type=True)
        return out

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        try:
            body = msgpack.unpackb(data, raw=False)
        except Exception as exc:  # msgpack raises several unrelated exception types
            raise ValueError(f"tier manifest is not valid msgpack: {exc}") from exc
        if not isinstance(body, list) or len(body) != 7 or body[0] != FORMAT:
            raise ValueError("tier manifest: unknown layout or format")
        _, version, epoch, broker_id, chunks, epochs, created = body
        m = cls(version, epoch, broker_id, tuple(Chunk(*c) for c in chunks), tuple((e, s) for e, s in epochs),
                created)  # fmt: skip
        m.validate()
        return m

    def validate(self) -> None:
        prev = None
        for c in self.chunks:
            if c.end <= c.start or (prev is not None and c.start != prev.end):
                raise ValueError(f"tier manifest {self.version}: chunks not contiguous at {c.start}")
            prev = c

    # ------------------------------------------------------------------ transitions (pure)

    def _next(self, epoch: int, now_ms: int, **changes: Any) -> Manifest:
        """The next version, written at ``epoch``: refused (Fenced) on top of a higher epoch."""
        if epoch < self.epoch:
            raise Fenced(self.epoch, epoch)
        return replace(self, version=self.version + 1, epoch=epoch, created_ms=now_ms, **changes)

    def claimed(self, epoch: int, broker_id: int, epochs: list[tuple[int, int]], now_ms: int) -> Manifest:
        """The next version, written by a new master to fence older ones before it uploads."""
        return self._next(epoch, now_ms, broker_id=broker_id, epochs=tuple(_epochs_below(epochs, self.end)))

    def appended(self, chunk: Chunk, epoch: int, epochs: list[tuple[int, int]], now_ms: int) -> Manifest:
        nxt = self._next(epoch, now_ms, chunks=(*self.chunks, chunk), epochs=tuple(_epochs_below(epochs, chunk.end)))
        if self.chunks and chunk.start != self.end:
            raise ValueError(f"chunk at {chunk.start} does not continue the tier at {self.end}")
        return nxt

    def trimmed(self, keep_from: int, epoch: int, now_ms: int) -> Manifest:
        """The tier's own retention: drop whole chunks ending at or below ``keep_from``."""
        return self._next(epoch, now_ms, chunks=tuple(c for c in self.chunks if c.end > keep_from))

    def check(self, c: Chunk, data: bytes) -> bytes:
        """``data`` fetched for chunk ``c``; OSError when it is not what this manifest lists."""
        if len(data) != c.end - c.start or crc_of(data) != c.crc:
            raise OSError(f"tier chunk {c.name}: {len(data)} bytes, crc {crc_of(data)}; manifest {self.version} "
                          f"says {c.end - c.start} bytes, crc {c.crc}")  # fmt: skip
        return data

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "epoch": self.epoch, "brokerId": self.broker_id, "minOffset": self.min_offset,
                "end": self.end, "chunks": len(self.chunks), "createdMs": self.created_ms}  # fmt: skip


class Fenced(Exception):
    """A higher master epoch owns the tier."""

    def __init__(self, owner_epoch: int, epoch: int) -> None:
        super().__init__(f"tier owned by epoch {owner_epoch}, this broker is at epoch {epoch}")
        self.owner_epoch = owner_epoch
        self.epoch = epoch


def _epochs_below(epochs: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    return [(e, s) for e, s in epochs if s < end] or epochs[:1]


def epoch_at(epochs: tuple[tuple[int, int], ...] | list[tuple[int, int]], offset: int) -> int:
    """The epoch that wrote the byte at ``offset`` (-1: none known)."""
    out = -1
    for e, s in epochs:
        if s <= offset:
            out = e
    return out


def verify_against_log(m: Manifest, log_epochs: list[tuple[int, int]], log_min: int, log_max: int,
                       last_chunk_crc: int | None) -> str | None:  # fmt: skip
    """Why a new master cannot resume this tier with its log (None: it can, at ``m.end``).

    The tier never holds anything past a confirm offset, so an elected master holds it all: its log reaches the
    tier's end, its epoch history agrees with the tier's for the last uploaded byte, and its bytes of the last
    chunk have the chunk's CRC (``last_chunk_crc``: of its own bytes there, None when it no longer has them)."""
    if not m.chunks:
        return None
    if log_max < m.end:
        return f"tier ends at {m.end} beyond this log's end {log_max}"
    last = m.end - 1
    if last >= log_min and m.epochs and epoch_at(m.epochs, last) != epoch_at(log_epochs, last):
        return (f"epoch of offset {last}: tier {epoch_at(m.epochs, last)}, "
                f"log {epoch_at(log_epochs, last)}")  # fmt: skip
    if last_chunk_crc is not None and last_chunk_crc != m.chunks[-1].crc:
        return f"the tier's last chunk {m.chunks[-1].name} differs from this log's bytes"
    return None


def plan_chunk(uploaded_end: int, confirm: int, segment_size: int, chunk_bytes: int) -> int:
    """Where the next chunk from ``uploaded_end`` may reach (0: nothing to upload yet); the chunk is then cut at
    the last complete record below that limit (a sealed segment's blank end marker counts as one).

    A chunk never crosses a segment and never passes the confirm offset. A segment whose bytes are all confirmed
    (the log moved on) ends its last chunk at the segment end; otherwise a chunk is cut once ``chunk_bytes`` are
    confirmed."""
    seg_end = uploaded_end - uploaded_end % segment_size + segment_size
    if confirm >= seg_end and seg_end - uploaded_end <= chunk_bytes:
        return seg_end
    limit = uploaded_end + chunk_bytes
    return limit if confirm >= limit and limit <= seg_end else 0
