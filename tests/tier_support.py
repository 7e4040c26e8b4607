"""Tier backends for tests: a POSIX directory, or a local S3-compatible server (moto's server mode) started on a
free port; the same tests run against both."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support import can_connect, free_port, wait_for

S3_KEYS = {"objectStoreAccessKey": "testing", "objectStoreSecretKey": "testing", "objectStoreRegion": "us-east-1"}


@contextmanager
def s3_server(log_dir: pathlib.Path) -> Iterator[str]:
    """A moto S3 server on a free port; yields its endpoint URL."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "moto.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_for(lambda: can_connect(port), 30, "the S3 server to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def make_bucket(endpoint: str) -> str:
    import boto3

    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name="us-east-1").create_bucket(Bucket=bucket)  # fmt: skip
    return bucket


@contextmanager
def tier_conf(kind: str, tmp: pathlib.Path) -> Iterator[dict[str, Any]]:
    """Broker config keys of a tier of ``kind`` (posix / s3), live for the block."""
    if kind == "posix":
        yield {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix",
               "tieredStoreFilePath": str(tmp / "tier")}  # fmt: skip
        return
    with s3_server(tmp / "s3") as endpoint:
        yield {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "s3", "objectStoreEndpoint": endpoint,
               "objectStoreBucket": make_bucket(endpoint), **S3_KEYS}  # fmt: skip


def backend_of(conf: dict[str, Any], cluster: str, broker: str) -> Any:
    """The test's own view of a broker set's tier (same backend class the broker uses)."""
    from brokerd.tiered.backend import make_backend

    return make_backend(conf["tieredBackendServiceProvider"], path=conf.get("tieredStoreFilePath", ""),
                        cluster=cluster, broker_name=broker, endpoint=conf.get("objectStoreEndpoint", ""),
                        bucket=conf.get("objectStoreBucket", ""), access_key="testing", secret_key="testing")  # fmt: skip
