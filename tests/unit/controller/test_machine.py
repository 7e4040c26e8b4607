"""Event codec, the Raft StateMachine adapter, determinism of apply and the msgpack snapshot."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.remoting.codes import ResponseCode as RC
from controller.statemachine.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    BrokerLiveness,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    EventDecodeError,
    ReadEvent,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from controller.statemachine.image import SnapshotError, decode_image, encode_image
from controller.statemachine.machine import ControllerStateMachine

names = st.sampled_from(["a", "b", "c"])
ids = st.integers(min_value=-1, max_value=5)
small = st.integers(min_value=0, max_value=4)
liveness = st.builds(BrokerLiveness, st.integers(1, 5), st.booleans(), small, st.integers(0, 1000), small, small)
events: st.SearchStrategy[Event] = st.one_of(
    st.builds(AlterSyncStateSetEvent, names, st.lists(st.integers(1, 5), max_size=4).map(lambda x: tuple(sorted(set(x)))),
              ids, small, small),
    st.builds(ApplyBrokerIdEvent, st.just("c1"), names, st.just("h:1"), st.sampled_from(["h:1;1", "h:2;2"]),
              st.integers(1, 5)),
    st.builds(ElectMasterEvent, names, ids, st.booleans(), st.booleans(), small, small,
              st.lists(liveness, max_size=5).map(tuple)),
    st.builds(CleanBrokerDataEvent, names,
              st.one_of(st.none(), st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))),
    st.builds(UpdateBrokerAddressEvent, st.just("c1"), names, st.integers(1, 5), st.sampled_from(["h:1", "h:9"])),
    st.just(ReadEvent()),
)


@given(events)
def test_event_codec_round_trip(ev: Event) -> None:
    assert decode_event(encode_event(ev)) == ev


def test_malformed_events_are_rejected_clearly() -> None:
    for data in (b"\xc1", msgpack.packb([]), msgpack.packb([99]), msgpack.packb({"t": 1}), msgpack.packb([2, "x"])):
        with pytest.raises(EventDecodeError):
            decode_event(data)


def test_undecodable_entry_is_skipped_identically() -> None:
    sm = ControllerStateMachine()
    r = sm.apply(1, b"\xc1garbage")
    assert not r.ok and r.code == RC.SYSTEM_ERROR and sm.image.applied_index == 1 and sm.image.sets == {}
    assert sm.apply(2, b"").ok and sm.image.applied_index == 2  # Raft no-op entries are accepted


@settings(max_examples=60, deadline=None)
@given(st.lists(events, max_size=60))
def test_apply_is_deterministic_and_snapshot_restores_the_whole_image(evs: list[Event]) -> None:
    a, b = ControllerStateMachine(), ControllerStateMachine()
    blobs = [encode_event(e) for e in evs]
    for i, blob in enumerate(blobs, start=1):
        ra, rb = a.apply(i, blob), b.apply(i, blob)
        assert (ra.ok, ra.code) == (rb.ok, rb.code)
        if i % 7 == 0:  # intermediate snapshots: the per-set encoding cache must never go stale
            assert decode_image(a.snapshot()) == a.image
    snap = a.snapshot()
    assert snap == b.snapshot()
    c = ControllerStateMachine()
    c.restore(snap)
    assert c.image == a.image and c.snapshot() == snap
    # a restored replica keeps applying exactly like the original
    more = [encode_event(ApplyBrokerIdEvent("c1", "a", "h:1", "h:1;1", 1)), encode_event(CleanBrokerDataEvent("b", None))]
    for j, blob in enumerate(more, start=len(blobs) + 1):
        assert a.apply(j, blob).ok == c.apply(j, blob).ok
    assert a.snapshot() == c.snapshot()


def test_snapshot_of_a_large_image_round_trips() -> None:
    rng = random.Random(7)
    sm = ControllerStateMachine()
    idx = 0
    for s in range(2000):
        for bid in range(1, 4):
            idx += 1
            assert sm.apply(idx, encode_event(ApplyBrokerIdEvent("c", f"set-{s}", f"h{bid}:1", f"h{bid}:1;{s}", bid))).ok
        idx += 1
        live = tuple(BrokerLiveness(i, True, 0, rng.randrange(100)) for i in range(1, 4))
        assert sm.apply(idx, encode_event(ElectMasterEvent(f"set-{s}", rng.randrange(1, 4), False, False, 0, 0, live))).ok
    image = decode_image(sm.snapshot())
    assert image == sm.image and image.applied_index == idx and len(image.sets) == 2000


def test_corrupt_snapshot_leaves_image_untouched() -> None:
    sm = ControllerStateMachine()
    sm.apply(1, encode_event(ApplyBrokerIdEvent("c", "a", "h:1", "h:1;1", 1)))
    before = sm.snapshot()
    for bad in (b"", b"\x00\x01", msgpack.packb({"format": 99}), msgpack.packb({"format": 1, "applied_index": 1,
                                                                                "sets": [["x"]]})):
        with pytest.raises(SnapshotError):
            sm.restore(bad)
        assert sm.snapshot() == before
    assert encode_image(decode_image(before)) == before
