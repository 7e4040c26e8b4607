"""After a chaos run with tiered storage on: the tier of every broker set is consistent with the log. Its chunks
are contiguous, each matches its manifest CRC, every chunk is held byte for byte by at least one replica, and no
replica holds different bytes there (a replica that lags holds a zero tail, which is not a conflict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brokerd.tiered.backend import make_backend
from brokerd.tiered.manifest import MANIFEST_PREFIX, Manifest, crc_of


def tiered(broker_extra: dict[str, Any]) -> bool:
    return str(broker_extra.get("tieredStoreEnable", "false")).lower() == "true"


def _replica_bytes(commitlog: Path, segment: int, start: int, end: int) -> bytes | None:
    base = start - start % segment
    try:
        with open(commitlog / f"{base:020d}", "rb") as f:
            f.seek(start - base)
            return f.read(end - start)
    except FileNotFoundError:
        return None


def tier_consistent(stores: dict[str, list[Path]], broker_extra: dict[str, Any], cluster: str) -> dict[str, Any]:
    """``stores``: per broker set, the store directories of its replicas."""
    segment = int(broker_extra.get("mappedFileSizeCommitLog", 1 << 30))
    problems: list[str] = []
    per_set: dict[str, Any] = {}
    for bset, dirs in sorted(stores.items()):
        backend = make_backend("posix", path=str(broker_extra["tieredStoreFilePath"]), cluster=cluster,
                               broker_name=bset)  # fmt: skip
        names = backend.list(MANIFEST_PREFIX)
        m = Manifest.decode(backend.get(names[-1])) if names else Manifest()
        per_set[bset] = {"version": m.version, "epoch": m.epoch, "chunks": len(m.chunks), "end": m.end}
        for a, b in zip(m.chunks, m.chunks[1:], strict=False):
            if a.end != b.start:
                problems.append(f"{bset}: gap or overlap between {a.name} and {b.name}")
        for c in m.chunks:
            data = backend.get(c.name)
            if crc_of(data) != c.crc or len(data) != c.end - c.start:
                problems.append(f"{bset}: {c.name} does not match its manifest entry")
                continue
            held = 0
            for d in dirs:
                mine = _replica_bytes(d / "commitlog", segment, c.start, c.end)
                if mine is None:
                    continue
                if mine == data:
                    held += 1
                    continue
                first = next(i for i, (x, y) in enumerate(zip(mine, data, strict=False)) if x != y)
                if any(mine[first:]):  # not a lagging replica's zero tail: different bytes
                    problems.append(f"{bset}: {c.name} differs from {d} at +{first}")
            if not held:
                problems.append(f"{bset}: no replica holds {c.name}")
    return {"ok": not problems and bool(per_set), "sets": per_set, "problems": problems[:20]}
