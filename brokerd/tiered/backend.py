"""Tier backends behind one small interface: a POSIX directory (any mounted filesystem) and an S3-compatible
object store (boto3). All calls are blocking; the tiered service runs them in a worker thread.

``create_exclusive`` is the compare-and-swap the manifest chain relies on: it writes an object only when no object
of that name exists (POSIX: ``link`` of a finished temporary file; S3: ``PutObject`` with ``If-None-Match: *``),
so of two writers of one manifest version exactly one wins.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Protocol


class TierBackend(Protocol):
    def put(self, name: str, data: bytes | memoryview) -> None:
        """Write (or replace) an object atomically: readers see the old or the new object, never a part."""

    def create_exclusive(self, name: str, data: bytes) -> bool:
        """Write an object only if none of that name exists; False when one does."""

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of an object (all from ``start`` when ``end`` is None); FileNotFoundError if absent."""

    def list(self, prefix: str) -> list[str]:
        """Names starting with ``prefix``, sorted."""

    def delete(self, name: str) -> None:
        """Remove an object (absent is fine)."""

    def location(self) -> dict[str, str]:
        """Where the objects are, enough for ``backend_at`` to open them again (never credentials)."""


class PosixBackend:
    """Objects are files under ``root``; names are relative paths with ``/``. ``create=False``: a reader that must
    not create the directory (it may be absent: then there is nothing to read)."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    def location(self) -> dict[str, str]:
        return {"provider": "posix", "path": str(self.root.resolve())}

    def _path(self, name: str) -> Path:
        p = (self.root / name).resolve()
        if self.root.resolve() not in p.parents:
            raise ValueError(f"tier object name escapes the tier directory: {name!r}")
        return p

    def _tmp(self, path: Path, data: bytes | memoryview) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def put(self, name: str, data: bytes | memoryview) -> None:
        path = self._path(name)
        os.replace(self._tmp(path, data), path)
        _fsync_dir(path.parent)

    def create_exclusive(self, name: str, data: bytes) -> bool:
        path = self._path(name)
        tmp = self._tmp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(path.parent)
        return True

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        with open(self._path(name), "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(end - start)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        if not base.is_dir() or not self.root.is_dir():
            return []
        root = self.root.resolve()
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for fn in files:
                if fn.startswith("."):
                    continue
                rel = str((Path(dirpath) / fn).relative_to(root))
                if rel.startswith(prefix):
                    out.append(rel)
        return sorted(out)

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class S3Backend:
    """An S3-compatible bucket (AWS, MinIO, moto ...); objects under ``prefix``."""

    def __init__(self, endpoint: str | None, bucket: str, access_key: str, secret_key: str, region: str,
                 prefix: str = "") -> None:  # fmt: skip
        import boto3  # imported here: only brokers configured for S3 load it
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint or ""
        self.region = region
        self.client: Any = boto3.client(
            "s3", endpoint_url=endpoint or None, aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None, region_name=region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=16))  # fmt: skip

    def location(self) -> dict[str, str]:
        return {"provider": "s3", "endpoint": self.endpoint, "bucket": self.bucket, "region": self.region,
                "prefix": self.prefix}  # fmt: skip

    def _error_code(self, exc: Exception) -> str:
        resp = getattr(exc, "response", None) or {}
        return str(resp.get("Error", {}).get("Code", ""))

    def put(self, name: str, data: bytes | memoryview) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=bytes(data))

    def create_exclusive(self, name: str, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if self._error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        kw: dict[str, Any] = {}
        if start or end is not None:
            kw["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        try:
            out: bytes = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name, **kw)["Body"].read()
        except Exception as exc:
            if self._error_code(exc) in ("NoSuchKey", "404"):
                raise FileNotFoundError(name) from exc
            raise
        return out

    def list(self, prefix: str) -> list[str]:
        names: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            names.extend(o["Key"][len(self.prefix):] for o in page.get("Contents", []))
        return sorted(names)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + name)


def make_backend(provider: str, *, path: str, cluster: str, broker_name: str, endpoint: str = "", bucket: str = "",
                 access_key: str = "", secret_key: str = "", region: str = "us-east-1") -> TierBackend:  # fmt: skip
    """The backend of one broker set: its objects live under ``<cluster>/<brokerName>/``."""
    if provider == "posix":
        return PosixBackend(Path(path) / cluster / broker_name)
    if provider == "s3":
        return S3Backend(endpoint, bucket, access_key, secret_key, region, prefix=f"{cluster}/{broker_name}/")
    raise ValueError(f"tieredBackendServiceProvider: unknown backend {provider!r} (posix or s3)")


def backend_at(location: dict[str, str], *, access_key: str = "", secret_key: str = "") -> TierBackend:
    """A backend for what ``TierBackend.location`` described (a POSIX one is not created when absent); S3
    credentials: the arguments, else boto3's own chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ...)."""
    provider = location.get("provider")
    if provider == "posix":
        return PosixBackend(location["path"], create=False)
    if provider == "s3":
        return S3Backend(location.get("endpoint") or None, location["bucket"], access_key, secret_key,
                         location.get("region") or "us-east-1", prefix=location.get("prefix", ""))  # fmt: skip
    raise ValueError(f"tier location: unknown provider {provider!r} (posix or s3)")
