"""The send lane's header cache (brokerd/csrc/hcache.c) against the full JSON header parse it short-cuts.

A header of the same length as one cached is parsed by its differences; whatever the bytes, the result (taken or
declined, and every field) must be what parse_header gives. ``header_cache_check`` runs a sequence of headers
through one cache and through parse_header and names each header whose two parses differ."""

from __future__ import annotations

import json
import pathlib
import random
import re

import pytest

from brokerd.native import native

pytestmark = pytest.mark.skipif(native is None, reason="brokerd._native is not built / BROKERD_NATIVE=0")

FRAMES = json.loads((pathlib.Path(__file__).parents[2] / "testdata" / "client_first_frames.json").read_text())


def json_headers() -> list[bytes]:
    out = []
    for f in FRAMES:
        raw = bytes.fromhex(f["hex"])
        hlen = int.from_bytes(raw[4:8], "big")
        if hlen >> 24 == 0:
            out.append(raw[8:8 + hlen])
    return out


HEADERS = json_headers()


def check(headers: list[bytes]) -> int:
    assert native is not None
    hits, bad = native.header_cache_check(headers)
    assert not bad, [(i, what, headers[i]) for i, what in bad[:5]]
    return int(hits)


def same_width(rng: random.Random, digits: bytes) -> bytes:
    low = 10 ** (len(digits) - 1) if len(digits) > 1 else 0
    return str(rng.randrange(low, 10 ** len(digits))).encode()


# what changes from one send to the next: the opaque, the born timestamp, the queue id, the UNIQ_KEY
CHANGING = re.compile(rb'("(?:opaque|g|bornTimestamp|e|queueId)":"?)(\d+)|(UNIQ_KEY\\u0001)([0-9A-F]+)')


def next_send(rng: random.Random, header: bytes) -> bytes:
    """The header a client sends next: the numbers that change, of the same width, and another UNIQ_KEY."""
    def change(m: re.Match[bytes]) -> bytes:
        if m.group(1):
            return m.group(1) + same_width(rng, m.group(2))
        return m.group(3) + bytes(rng.choice(b"0123456789ABCDEF") for _ in m.group(4))
    return CHANGING.sub(change, header)


def test_a_clients_next_sends_are_parsed_by_their_differences() -> None:
    rng = random.Random(7)
    assert len(HEADERS) >= 5
    for header in HEADERS:
        seq = [header]
        for _ in range(50):
            seq.append(next_send(rng, seq[-1]))
        assert all(len(h) == len(header) for h in seq)
        assert check(seq) == 50, header[:80]  # every send after the first is a hit


def test_clients_interleaved_share_the_cache() -> None:
    rng = random.Random(8)
    last = list(HEADERS)
    seq = []
    for _ in range(300):
        i = rng.randrange(len(last))
        last[i] = next_send(rng, last[i])
        seq.append(last[i])
    assert check(seq) > 0


ALPHABET = b'0123456789aZ"\\u-+.eE :,{}[]\x01\x1f\x7f\xc3\xa9\xff/nt'


@pytest.mark.parametrize("seed", range(8))
def test_any_byte_changed_anywhere_parses_as_the_full_parse_does(seed: int) -> None:
    """Random bytes (quotes, backslashes, control and non-ASCII bytes, digits, structure) at random places: a
    header the cache takes must parse exactly as in full, one it cannot must fall to the full parse."""
    rng = random.Random(seed)
    seq = []
    for _ in range(400):
        base = rng.choice(HEADERS)
        seq.append(base)
        mutant = bytearray(base)
        for _ in range(rng.choice((1, 1, 2, 3))):
            mutant[rng.randrange(len(mutant))] = rng.choice(ALPHABET)
        seq.append(bytes(mutant))
    assert check(seq) > 0, f"seed {seed}"


def test_escapes_and_numbers_that_change_are_read_again() -> None:
    """A changed escape (\\u0001 -> \\u0041 or an invalid \\u00G1), a number that loses its form (a leading zero, a
    sign, a fraction) and a changed code: each parses as in full, valid or not."""
    base = next(h for h in HEADERS if b"\\u0001" in h and b'"opaque":' in h)
    i = base.index(b"\\u0001")
    o = base.index(b'"opaque":') + len(b'"opaque":')
    variants = [base[:i + 4] + b"4" + base[i + 5:], base[:i + 4] + b"G" + base[i + 5:],
                base[:i + 1] + b"x" + base[i + 2:], base[:i] + b"a" + base[i + 1:]]
    digits = re.match(rb"-?\d+", base[o:])
    assert digits is not None
    n = digits.end()
    variants += [base[:o] + b"0" * n + base[o + n:], base[:o] + b"-" + base[o + 1:],
                 base[:o] + b"1." + b"5" * (n - 2) + base[o + n:], base[:o] + b"9" * n + base[o + n:]]
    c = base.index(b'"code":') + len(b'"code":')
    variants.append(base[:c] + b"9" + base[c + 1:])
    check([x for v in variants for x in (base, v)])
