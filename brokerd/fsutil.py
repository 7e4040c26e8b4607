"""File-system durability helpers shared by the broker store, its metadata and the controller's Raft log."""

from __future__ import annotations

import os
from pathlib import Path

from brokerd import durability


def fsync_path(path: str | Path) -> None:
    """fsync a file or a directory by path (a directory: its entries, e.g. after a create, rename or delete)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        note = durability.before_fd_sync(fd, path) if durability.ENABLED else None
        os.fsync(fd)
        if note is not None:
            durability.record(note)
    finally:
        os.close(fd)


def fsync_fd(fd: int, path: str | Path, *, data_only: bool = False, reset: bool = False) -> None:
    """fsync (fdatasync with ``data_only``) an open file written at ``path``; the power-loss journal records it
    (``reset``: the file was cut back, not grown)."""
    if data_only:
        os.fdatasync(fd)
    else:
        os.fsync(fd)
    if durability.ENABLED:
        durability.fd_synced(fd, path, reset=reset)
