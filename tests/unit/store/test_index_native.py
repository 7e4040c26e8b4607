"""The C key-index put (brokerd/csrc/index.c) against its Python reference: the same puts give byte-identical
index files and the same lookups."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from brokerd.store import index as index_mod
from brokerd.store.index import IndexService

pytestmark = pytest.mark.skipif(index_mod.INDEX_PUT is None, reason="C module not built")

ALPHABET = ["a", "b", "Z", "0", " ", "é", "✓", "\U0001f600", "\ud800", "#", "@", "\x00"]


def random_key(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 40)))


def fill(root: Path, seed: int, native: bool, monkeypatch: pytest.MonkeyPatch) -> IndexService:
    monkeypatch.setattr(index_mod, "INDEX_PUT", index_mod.INDEX_PUT if native else None)
    svc = IndexService(root, slots=97, max_entries=400)
    svc.load()
    rng = random.Random(seed)
    for i in range(300):
        keys = [random_key(rng) for _ in range(rng.randrange(0, 4))]
        svc.put_keys(rng.choice(["T", "Tü", "T\ud800"]), keys, 1000 + i * 37, 1_700_000_000_000 + i)
    for f in svc.files:
        f.write_header()
    return svc


@pytest.mark.parametrize("seed", range(6))
def test_native_and_python_puts_write_the_same_index(tmp_path: Path, seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    a = fill(tmp_path / "c", seed, True, monkeypatch)
    b = fill(tmp_path / "py", seed, False, monkeypatch)
    try:
        assert [f.count for f in a.files] == [f.count for f in b.files] and len(a.files) >= 2  # rolled over
        for fa, fb in zip(a.files, b.files, strict=True):
            assert bytes(fa.mf.mm) == bytes(fb.mf.mm)
        rng = random.Random(seed)
        for _ in range(50):
            key = random_key(rng)
            assert a.query("T", key, 64, 0, 2**62) == b.query("T", key, 64, 0, 2**62)
    finally:
        a.close()
        b.close()


def test_puts_that_do_not_fit_write_nothing(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, slots=7, max_entries=4)
    svc.load()
    try:
        f = svc._writable(1)  # noqa: SLF001 - a file to write into directly
        assert index_mod.INDEX_PUT is not None
        before = bytes(f.mf.mm)
        with pytest.raises(ValueError):
            index_mod.INDEX_PUT(f.slot_view, f.ent_view, f.slots, f.count, f.max_entries, 5, ["a"] * 9, 1, 2)
        with pytest.raises(TypeError):
            index_mod.INDEX_PUT(f.slot_view, f.ent_view, f.slots, f.count, f.max_entries, 5, ["a", 3], 1, 2)
        assert bytes(f.mf.mm) == before
    finally:
        svc.close()
