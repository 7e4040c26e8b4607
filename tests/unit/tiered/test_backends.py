"""The two tier backends behave alike (a POSIX directory and a local S3-compatible server): ranged reads, listing,
and the create-if-absent the manifest chain's fencing relies on (of racing writers exactly one wins)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.tier_support import backend_of, tier_conf


@pytest.fixture(params=["posix", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    with tier_conf(request.param, tmp_path) as conf:
        yield backend_of(conf, "C", "broker-x")


def test_objects_round_trip_with_ranges_and_listing(backend: Any) -> None:
    backend.put("log/00000000000000000000-00000000000000000010", b"0123456789")
    backend.put("manifest/00000000000000000001", b"m1")
    assert backend.get("log/00000000000000000000-00000000000000000010", 3, 6) == b"345"
    assert backend.get("log/00000000000000000000-00000000000000000010", 7) == b"789"
    assert backend.list("manifest/") == ["manifest/00000000000000000001"]
    backend.delete("manifest/00000000000000000001")
    assert backend.list("manifest/") == []
    with pytest.raises(FileNotFoundError):
        backend.get("manifest/00000000000000000001")


def test_of_racing_exclusive_creates_exactly_one_wins(backend: Any) -> None:
    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(lambda i: backend.create_exclusive("manifest/00000000000000000007", b"w%d" % i), range(8)))
    assert wins.count(True) == 1
    winner = wins.index(True)
    assert backend.get("manifest/00000000000000000007") == b"w%d" % winner
