"""Simulated power loss: rebuild the files of a SIGKILLed process as a power loss would leave them.

The process ran with ``BROKERD_POWERLOSS_JOURNAL`` set, so ``brokerd/durability.py`` journaled every sync
(files: durable length or whole content; directories: their entries). After the process is dead, ``restore``
rewrites every file under the given roots to its last durable state:

* a file whose last record is a length: bytes past the length are zeroed and the file is cut to its size at
  that sync (unsynced appends to a log, the unsynced tail of a preallocated segment, are gone);
* a file whose last record is a content (metadata, checkpoint): that content is put back;
* in a directory with a recorded listing: entries created after its last fsync are removed (files and whole
  subtrees), a name bound to another file by an unsynced rename gets its old content back (when the journal
  has it), a file deleted without a directory fsync comes back (same condition);
* a file with no record at all: in a *strict* location (commit log, consume queues, Raft WAL: every sync there
  is journaled) its content is lost (zeroed, size kept); elsewhere it is kept (its writer's syncs are not
  journaled, e.g. the epoch file, the container state file).

Files are identified by ``inode:generation`` (``durability.file_id``). What this cannot model is listed in
docs/chaos.md (no reordering inside a synced range, no torn sectors, unsynced writes inside a durable prefix
survive, a directory never fsynced is kept as it is).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from brokerd.durability import path_id

_CHUNK = 1 << 20


@dataclass
class FileState:
    kind: str  # "len" | "blob"
    path: str
    length: int = 0
    size: int = 0
    sha: str = ""
    mapped: bool = False  # a preallocated mapped file (length found from its writer position / written extent)


@dataclass
class DurableImage:
    files: dict[str, FileState] = field(default_factory=dict)  # by file id
    dirs: dict[str, dict[str, str]] = field(default_factory=dict)  # dir path -> {name: file id}
    dir_order: dict[str, tuple[int, int]] = field(default_factory=dict)  # (incarnation, sample seq) of that listing
    incarnation: int = 0
    blob_dirs: list[Path] = field(default_factory=list)
    records: int = 0
    errors: list[str] = field(default_factory=list)  # hooks that could not journal (reported)

    def blob(self, sha: str) -> bytes | None:
        for d in self.blob_dirs:
            p = d / sha
            if p.exists():
                return p.read_bytes()
        return None


@dataclass
class RestorePolicy:
    """Which files are append-only mapped segments (their recorded length is trusted) and which locations are
    strict (every sync there is journaled, so a file with no record was never synced)."""

    append_only: Callable[[str], bool]
    strict: Callable[[str], bool]


def _parts(path: str) -> tuple[str, ...]:
    return Path(path).parts[:-1]


def store_policy() -> RestorePolicy:
    """The broker store and the controller's Raft log (their directory names)."""

    def append_only(path: str) -> bool:
        parts = _parts(path)
        return "commitlog" in parts or "consumequeue" in parts

    def strict(path: str) -> bool:
        name = os.path.basename(path)
        return append_only(path) or (name.startswith("wal-") and name.endswith(".log"))

    return RestorePolicy(append_only, strict)


@dataclass
class RestoreReport:
    files_cut: int = 0
    bytes_zeroed: int = 0  # bytes past the durable length that held data (non-zero) at the crash
    bytes_zeroed_by_dir: dict[str, int] = field(default_factory=dict)
    bytes_truncated: int = 0
    contents_restored: list[str] = field(default_factory=list)
    never_synced_zeroed: list[str] = field(default_factory=list)
    entries_dropped: list[str] = field(default_factory=list)
    renames_undone: list[str] = field(default_factory=list)
    deletions_undone: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: (v[:50] if isinstance(v, list) else v) for k, v in self.__dict__.items()} | {
            k + "_count": len(v) for k, v in self.__dict__.items() if isinstance(v, list)}


def load_journals(paths: Iterable[str | Path]) -> DurableImage:
    img = DurableImage()
    for p in paths:
        p = Path(p)
        if not p.exists():
            continue
        img.blob_dirs.append(Path(str(p) + ".blobs"))
        for line in p.read_bytes().splitlines():
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line torn by the SIGKILL: its sync never completed
            img.records += 1
            _apply_record(img, rec)
    return img


def _apply_record(img: DurableImage, rec: dict[str, Any]) -> None:
    op = rec.get("op")
    if op == "start":
        img.incarnation += 1
    elif op == "error":
        img.errors.append(f"{rec.get('path')}: {rec.get('error')}")
    elif op == "dir":
        order = (img.incarnation, rec.get("seq", 0))
        if order >= img.dir_order.get(rec["path"], (-1, -1)):  # the latest sample wins, not the latest record
            img.dirs[rec["path"]] = dict(rec["entries"])
            img.dir_order[rec["path"]] = order
    elif op == "blob":
        img.files[rec["id"]] = FileState("blob", rec["path"], size=rec["size"], sha=rec["sha"])
    elif op == "len":
        prev = img.files.get(rec["id"])
        length = rec["len"]
        if prev is not None and prev.kind == "len" and not rec.get("reset"):
            length = max(length, prev.length)  # syncs on two threads may journal out of order
        img.files[rec["id"]] = FileState("len", rec["path"], length, rec["size"], mapped="extent" in rec)


def restore(roots: Iterable[str | Path], journals: Iterable[str | Path],
            policy: RestorePolicy | None = None) -> RestoreReport:
    """Rewrite everything under ``roots`` to its last durable state (the process must be dead)."""
    img = load_journals(journals)
    pol = policy or store_policy()
    rep = RestoreReport()
    rep.unmodelled += [f"journal error: {e}" for e in img.errors]
    roots = [Path(r).resolve() for r in roots]
    for d in sorted(img.dirs, key=lambda x: x.count(os.sep)):
        if any(Path(d).is_relative_to(r) for r in roots) and os.path.isdir(d):
            _restore_dir(img, d, rep)
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                _restore_file(img, os.path.join(dirpath, name), pol, rep)
    return rep


def _restore_dir(img: DurableImage, d: str, rep: RestoreReport) -> None:
    listing = img.dirs[d]
    current = set(os.listdir(d))
    for name in sorted(current):
        path = os.path.join(d, name)
        want = listing.get(name)
        if want is None:
            _remove(path)
            rep.entries_dropped.append(path)
            continue
        have = path_id(path)
        if have == want or os.path.isdir(path):
            continue
        old = img.files.get(want)
        data = img.blob(old.sha) if old is not None and old.kind == "blob" else None
        if data is None:
            rep.unmodelled.append(f"rename over {path} kept (old content not journaled)")
            continue
        _replace(path, data)
        rep.renames_undone.append(path)
    for name, want in listing.items():
        if name in current:
            continue
        old = img.files.get(want)
        data = img.blob(old.sha) if old is not None and old.kind == "blob" else None
        if data is not None:
            _replace(os.path.join(d, name), data)
            rep.deletions_undone.append(os.path.join(d, name))


def _restore_file(img: DurableImage, path: str, pol: RestorePolicy, rep: RestoreReport) -> None:
    ident = path_id(path)
    st = img.files.get(ident) if ident is not None else None
    if st is None:
        if pol.strict(path):
            size = os.path.getsize(path)
            zeroed = _zero(path, 0, size)
            if zeroed:
                rep.never_synced_zeroed.append(path)
                _count(rep, path, zeroed)
        return
    if st.kind == "blob":
        data = img.blob(st.sha)
        if data is None:
            rep.unmodelled.append(f"{path}: content blob {st.sha} missing")
        elif Path(path).read_bytes() != data:
            _replace(path, data)
            rep.contents_restored.append(path)
        return
    if st.mapped and not pol.append_only(path):
        return  # written out of order (index files): the written extent proves nothing
    cur = os.path.getsize(path)
    zeroed = _zero(path, st.length, min(cur, st.size))
    if cur > st.size:
        os.truncate(path, st.size)
        rep.bytes_truncated += cur - st.size
    if zeroed or cur > st.size:
        rep.files_cut += 1
        _count(rep, path, zeroed)


def _count(rep: RestoreReport, path: str, zeroed: int) -> None:
    rep.bytes_zeroed += zeroed
    key = os.path.basename(os.path.dirname(path))
    rep.bytes_zeroed_by_dir[key] = rep.bytes_zeroed_by_dir.get(key, 0) + zeroed


def _zero(path: str, start: int, end: int) -> int:
    """Zero [start, end) of ``path``; returns how many of those bytes were non-zero (data lost)."""
    lost = 0
    if end <= start:
        return 0
    fd = os.open(path, os.O_RDWR)
    try:
        pos = start
        while pos < end:
            n = min(_CHUNK, end - pos)
            chunk = os.pread(fd, n, pos)
            if chunk.count(0) != len(chunk):
                lost += len(chunk.rstrip(b"\0")) - (len(chunk) - len(chunk.lstrip(b"\0")))
                os.pwrite(fd, bytes(len(chunk)), pos)
            pos += n
    finally:
        os.close(fd)
    return lost


def _replace(path: str, data: bytes) -> None:
    tmp = path + ".powerloss-restore"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
